"""Interlocks on the simulated rig: the faults come from the simulator's own fault injection and
physics, the loop sees only converter counts."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from controller.feedback import Feedback
from daq.backends.sim import SimBackend
from daq.loop import Loop
from daq.loop.interlocks import Trip
from daq.loop.states import State
from daq.profile.schema import Profile
from tests.loop.conftest import col, cycles, post, with_changes
from tests.loop.fakes import HoldP, Ramp, Scripted


class Push(HoldP):
    """Reference = measured position (no following error), constant valve command."""

    def __init__(self, volts: float) -> None:
        super().__init__()
        self.volts = volts

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
        np.copyto(ref_out, fb.q)
        volts_out.fill(0.0)
        volts_out[0] = self.volts
        return True


def _sim_loop(profile: Profile, hold: Any, *, virtual: bool = True) -> tuple[Loop, SimBackend]:
    backend = SimBackend.from_profile(profile)
    backend.open()
    loop = Loop(profile, backend, hold=hold, virtual_time=virtual, ring_capacity=1 << 14)
    loop.warm_up()
    return loop, backend


def _assert_tripped(loop: Loop, code: Trip, where: str) -> int:
    assert loop.state == State.FAULT, loop.status()
    f = loop.fault
    assert f is not None and f.code == code and f.where == where, f
    seq = f.seq
    assert col(loop, seq, "fault") == code and col(loop, seq, "state") == State.FAULT
    assert col(loop, seq, "cmd.valve_1") == 0.0 and col(loop, seq, "cmd.valve_2") == 0.0
    if seq > 0:
        assert col(loop, seq - 1, "state") != State.FAULT
    return seq


def _assert_latched_then_reset(loop: Loop, code: Trip) -> None:
    cycles(loop, 20)
    assert loop.state == State.FAULT and col(loop, loop.seq - 1, "fault") == code
    req = post(loop, "reset")
    cycles(loop, 1)
    assert req.ok and loop.state == State.IDLE


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ("p_cap_1:rail_high", "p_cap_1"),
        ("q_2:rail_low", "q_2"),
        ("spool_1:rail_high", "spool_1"),
    ],
)
def test_broken_wire_trips_channel_range(profile: Profile, spec: str, where: str) -> None:
    loop, sim = _sim_loop(profile, HoldP())
    post(loop, "arm")
    cycles(loop, 50)
    assert loop.state == State.ARMED
    sim.inject_fault(spec + "@0.1")
    cycles(loop, 100)
    seq = _assert_tripped(loop, Trip.CHANNEL_RANGE, where)
    assert seq == 100  # t = 0.1 s exactly, in virtual time
    sim.clear_faults()
    _assert_latched_then_reset(loop, Trip.CHANNEL_RANGE)


def _hydraulic_omega(sim: SimBackend, q: np.ndarray, j: int) -> float:
    """Natural frequency (rad/s) of joint j locked by its closed valve: the two oil columns are a
    spring k = β (Ac²/Vc + Ar²/Vr) at the piston (DESIGN §1.2), K = k r² at the joint, against
    the joint's inertia (the diagonal of the mass matrix, from the inverse dynamics)."""
    from controller.plant import dynamics

    p = sim.true_params
    s, r = dynamics.cylinder(p, q[None, :])
    vc = p.dead_volume[j] + p.area_cap[j] * (p.stroke[j] / 2 + s[0, j])
    vr = p.dead_volume[j] + p.area_rod[j] * (p.stroke[j] / 2 - s[0, j])
    stiffness = p.bulk_modulus * (p.area_cap[j] ** 2 / vc + p.area_rod[j] ** 2 / vr) * r[0, j] ** 2
    unit = np.zeros((1, len(q)))
    unit[0, j] = 1.0
    zero = np.zeros_like(unit)
    inertia = (
        dynamics.inverse_dynamics(p, q[None, :], zero, unit)[0, j]
        - dynamics.inverse_dynamics(p, q[None, :], zero, zero)[0, j]
    )
    return math.sqrt(stiffness / inertia)


def test_driving_beyond_the_soft_limit_trips_and_stops_within_the_oil_spring(
    profile: Profile,
) -> None:
    """0.2 V open loop reaches the 58° soft limit at ~46°/s (under the 60°/s limit). With the
    valves nulled the joint coasts into its oil columns: it overshoots by at most v/ω_h (an
    undamped spring from speed v) plus what it travels while the spool closes (3 τ_valve) —
    about 1°, far short of the 60.7° end stop that the old bound of 62° could not tell from."""
    prof = with_changes(profile, following_error=False)
    loop, sim = _sim_loop(prof, Push(0.2))
    post(loop, "arm")
    n = sim.true_params.n
    for _ in range(3000):
        cycles(loop, 1)
        if loop.state == State.FAULT:
            break
    _assert_tripped(loop, Trip.SOFT_LIMIT, "j1")
    assert loop.fault is not None
    assert loop.fault.value > math.radians(58.0) == pytest.approx(loop.fault.limit)
    x = sim.true_state()
    q_trip, v_trip = float(x[0]), float(x[n])
    assert 0.0 < v_trip <= math.radians(60.0)
    omega = _hydraulic_omega(sim, x[:n].copy(), 0)
    bound = v_trip / omega + v_trip * 3.0 * float(sim.true_params.valve_tau[0])
    q_max = q_trip
    for _ in range(int(2.0 * math.pi / omega / loop.period) + 50):  # a full oil-spring period
        cycles(loop, 1)
        q_max = max(q_max, float(sim.true_state()[0]))
    assert 0.5 * v_trip / omega < q_max - q_trip <= bound, (math.degrees(q_max - q_trip), bound)
    assert math.degrees(q_max) < 59.5


def test_pressure_above_its_limit_trips(profile: Profile) -> None:
    joints = list(profile.joints)
    limits = joints[0].limits.model_copy(update={"max_pressure_pa": 3.2e6})
    joints[0] = joints[0].model_copy(update={"limits": limits})
    prof = profile.model_copy(update={"joints": joints})
    loop, _ = _sim_loop(prof, HoldP())
    cycles(loop, 5)  # holding the arm at home needs p_cap_1 ≈ 3.4 MPa
    _assert_tripped(loop, Trip.PRESSURE, "p_cap_1")
    assert loop.fault is not None and loop.fault.value > 3.2e6


def test_stuck_valve_gives_a_following_error_trip(profile: Profile) -> None:
    loop, sim = _sim_loop(profile, HoldP())
    post(loop, "arm")
    cycles(loop, 20)
    sim.inject_fault("valve_2:stuck_valve")
    post(loop, "run", Ramp(rate=0.5, steps=10_000))
    cycles(loop, 2000)
    _assert_tripped(loop, Trip.FOLLOWING_ERROR, "j2")
    f = loop.fault
    assert f is not None and f.value > f.limit > math.radians(3.0)  # the velocity term counts


def test_a_command_step_trips_the_rate_limit(profile: Profile) -> None:
    loop, _ = _sim_loop(profile, Scripted(4.0, after=10))
    post(loop, "arm")
    cycles(loop, 50)
    _assert_tripped(loop, Trip.VALVE_RATE, "valve_1")


def test_a_stalled_read_trips_the_overrun_interlock_in_real_time(profile: Profile) -> None:
    prof = with_changes(profile, overrun_limit=1)
    loop, sim = _sim_loop(prof, HoldP(), virtual=False)
    sim.inject_fault("q_1:stall_read:0.05@0.05")
    loop.run(0.3)
    assert loop.fault is not None and loop.fault.code == Trip.OVERRUN
    timing: dict[str, Any] = loop.timing.snapshot()
    assert timing["skipped_cycles"] >= 40  # a 50 ms stall skips ~50 deadlines, not bunched
    t = loop.ring.data[: loop.seq, 1]
    assert np.max(np.diff(t)) >= 0.045


def test_virtual_time_on_the_simulator_is_deterministic(profile: Profile) -> None:
    def once() -> np.ndarray:
        loop, _ = _sim_loop(profile, HoldP())
        cycles(loop, 50)
        post(loop, "arm")
        cycles(loop, 50)
        post(loop, "run", Ramp(rate=0.1, steps=500))
        cycles(loop, 900)
        keep = [
            i
            for i, c in enumerate(loop.layout.columns)
            if c.name not in ("wake_latency", "compute_time")
        ]
        return loop.ring.data[: loop.seq][:, keep].copy()

    a, b = once(), once()
    assert a.shape[0] == 1000
    assert np.array_equal(a, b, equal_nan=True)
    assert np.ptp(a[:, 7]) > 0  # raw counts vary (noise, motion): not a constant trace
