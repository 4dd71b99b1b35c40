"""The compiled cycle's rare paths equal the Python cycle's. On a simulated run where one
interlock fires (following error, valve rate, amplitude clamp, pressure, soft limit, channel
range high and low) both paths record the same rows, latch the same trip — code, where, value,
limit, cycle — and count the same clamped cycles; on the realistic profile (the station's
supply watched) and with polynomial and table scalings on two pressures, the same rows.

The runs of test_compiled_cycle.py never trip and no shipped profile scales a channel
non-linearly: without these a wrong comparison in daq/loop/kernel.py's checks, a trip reported
with the wrong value or a wrong scaling would pass every test."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from daq.loop.interlocks import CLAMP_FLAG, Trip
from daq.profile.loader import load_profile
from daq.profile.plant import known_params
from daq.profile.schema import Profile
from tests.loop.compiled_harness import PROFILE, ROOT, recorded_loop, sim_loop
from tests.loop.test_compiled_cycle import _assert_rows_equal

REALISTIC = ROOT / "hw_profiles" / "sim-2dof-realistic.toml"

#: 4° / 3° sines about home: on sim-2dof the hold before it stays within 0.07° of its reference,
#: steps its valve commands by ≤ 3.07 mV a cycle, holds pressures ≤ 3.46 MPa and joint 1
#: ≤ 40.06°; the sine reaches a following error of 2.2°, steps of 3.68 mV, 76 mV, 5.1 MPa on
#: joint 2, 43.7° on joint 1, 4.78 / 2.43 MPa on p_cap_1 / p_rod_1.
SINE: dict[str, Any] = {
    "name": "sine",
    "home_deg": [40.0, 30.0],
    "segments": [
        {"name": "sine", "duration_s": 2.0, "controller": {"kind": "pid"},
         "trajectory": {"kind": "sine", "amplitude_deg": [4.0, 3.0], "frequency_hz": [0.7, 0.9]}},
    ],
}  # fmt: skip


def _limits(j: int, **changes: Any) -> Callable[[Profile], Profile]:
    def change(p: Profile) -> Profile:
        joints = list(p.joints)
        lim = joints[j].limits.model_copy(update=changes)
        joints[j] = joints[j].model_copy(update={"limits": lim})
        return p.model_copy(update={"joints": joints})

    return change


def _channel(name: str, **changes: Any) -> Callable[[Profile], Profile]:
    def change(p: Profile) -> Profile:
        chans = [c.model_copy(update=changes) if c.name == name else c for c in p.channels]
        return p.model_copy(update={"channels": chans})

    return change


#: name → (profile change, the trip it must latch (NONE: none), where).
CASES: dict[str, tuple[Callable[[Profile], Profile], Trip, str]] = {
    "following": (
        _limits(0, following_error_deg=0.5, following_error_per_velocity_s=0.001),
        Trip.FOLLOWING_ERROR,
        "j1",
    ),
    "valve_rate": (_limits(1, valve_max_rate_v_per_s=3.4), Trip.VALVE_RATE, "valve_2"),
    "clamp": (_limits(0, valve_max_v=0.06), Trip.NONE, ""),
    "pressure": (_limits(1, max_pressure_pa=4.0e6), Trip.PRESSURE, "?"),
    "soft_limit": (_limits(0, soft_max_deg=42.0), Trip.SOFT_LIMIT, "j1"),
    "range_high": (_channel("p_cap_1", valid_max=4.0e6), Trip.CHANNEL_RANGE, "p_cap_1"),
    "range_low": (_channel("p_rod_1", valid_min=2.6e6), Trip.CHANNEL_RANGE, "p_rod_1"),
}


def _both(profile: Profile, **kw: Any) -> tuple[Any, Any, Any, Any]:
    python, lp = recorded_loop(False, SINE, profile, seconds=2.0, **kw)
    compiled, lc = recorded_loop(True, SINE, profile, seconds=2.0, **kw)
    return python, lp, compiled, lc


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_trip_is_the_same_on_both_paths(case: str) -> None:
    change, code, where = CASES[case]
    # The controllers keep the unchanged profile's valve limit (a clamp needs a command beyond
    # the interlock's, which the laws' own limit would otherwise stop first).
    plain = load_profile(PROFILE)
    python, lp, compiled, lc = _both(change(plain), runner_profile=plain)
    _assert_rows_equal(python, compiled)
    assert lc.interlocks.clamped == lp.interlocks.clamped
    if code == Trip.NONE:  # the clamp: counted and flagged, never a trip
        assert lc.fault is None and lp.fault is None
        assert lc.interlocks.clamped > 0
        assert (compiled[:, 4].astype(np.int64) & CLAMP_FLAG).any()
        return
    f, g = lp.fault, lc.fault
    assert f is not None and g is not None
    assert f.code == code, f  # the run really reaches this trip, during the sine
    assert where == "?" or f.where == where, f
    assert (g.code, g.where, g.value, g.limit, g.seq) == (f.code, f.where, f.value, f.limit, f.seq)
    running = np.flatnonzero(python[:, 2] == 2)
    assert running.size >= 50 and python[running[0], 0] < f.seq


def test_the_realistic_profile_is_the_same_on_both_paths() -> None:
    """The supply watched while live, and the plant's own misbehaviour (sim-2dof-realistic)."""
    profile = load_profile(REALISTIC)
    python, lp, compiled, lc = _both(profile, power=2)
    _assert_rows_equal(python, compiled)
    assert lc.station.check_supply and lc.compiled
    assert (python[:, 2] == 2).sum() > 300
    f, g = lp.fault, lc.fault
    assert (f is None) == (g is None)
    if f is not None and g is not None:
        assert (g.code, g.where, g.value, g.limit, g.seq) == (
            f.code,
            f.where,
            f.value,
            f.limit,
            f.seq,
        )


def test_non_linear_scalings_are_the_same_on_both_paths() -> None:
    """A polynomial and a table scaling on two pressures, each with a calibration correction."""
    from daq.profile.schema import PolynomialScaling, TableScaling

    poly = PolynomialScaling(
        kind="polynomial", coefficients=[1.0e4, 2.0e6, 1.0e4, 50.0], units="Pa"
    )
    points = [[-10.0, -2.0e7], [0.0, 0.0], [1.6, 3.1e6], [10.0, 2.0e7]]
    table = TableScaling(kind="table", units="Pa", points=points)
    profile = _channel("p_rod_1", scaling=table)(
        _channel("p_cap_1", scaling=poly)(load_profile(PROFILE))
    )
    # A transducer calibration in force on both (eng = (declared − offset) / gain).
    correction = {"p_cap_1": (2.0e4, 1.01), "p_rod_1": (-1.5e4, 0.98), "q_1": (1e-3, 1.002)}
    python, lp, compiled, lc = _both(profile, correction=correction)
    assert len(lc.scaler.nonlinear) == 2 and lc.scaler.nonlinear == [0, 1]
    _assert_rows_equal(python, compiled)
    assert lp.fault is None and lc.fault is None and (python[:, 2] == 2).sum() > 1500


def test_a_rig_without_a_station_watches_no_supply() -> None:
    """sim-2dof has no [hydraulics]: no channel is the supply, so a pressure reading below zero
    (here p_rod_1 through a calibration offset of 5 MPa) trips nothing on either path."""
    profile = _channel("p_rod_1", valid_min=-1.0e7)(load_profile(PROFILE))
    python, lp, compiled, lc = _both(profile, correction={"p_rod_1": (5.0e6, 1.0)})
    assert not lc.station.check_supply
    _assert_rows_equal(python, compiled)
    assert lp.fault is None and lc.fault is None
    assert compiled[:, lc.layout.index("eng.p_rod_1")].max() < 0.0


def test_a_law_at_its_own_valve_limit_is_not_counted_as_clamped() -> None:
    """The laws saturate at the joint's valve_max_v, exactly the interlock's amplitude: a
    command at the limit is not beyond it, on either path (no clamp counted, no flag)."""
    profile = _limits(0, valve_max_v=0.06)(load_profile(PROFILE))
    python, lp, compiled, lc = _both(profile)
    _assert_rows_equal(python, compiled)
    assert lp.fault is None and lc.fault is None
    assert np.abs(compiled[:, lc.layout.index("cmd.valve_1")]).max() == 0.06  # saturated
    assert lc.interlocks.clamped == lp.interlocks.clamped == 0


def test_warm_up_leaves_no_kernel_to_compile_in_a_live_cycle() -> None:
    """`compile_all` calls every kernel the cycle calls, so none compiles on its first cycle (a
    compile is seconds: the loop would stall). Run in a fresh interpreter: this one's kernels
    have been compiled by the tests before."""
    code = (
        "from daq.loop.kernel import compile_all, k_rest, k_scale\n"
        "from controller.compiled.laws import law_disable, law_enable\n"
        "from controller.compiled.trajectories import traj_eval\n"
        "compile_all()\n"
        "kernels = (k_scale, k_rest, law_enable, law_disable, traj_eval)\n"
        "print([k.__name__ for k in kernels if not k.signatures])\n"
    )
    assert _fresh_interpreter(code) == "[]"


def _fresh_interpreter(code: str) -> str:
    """The last line `code` prints in a new Python process (numba's dispatchers start empty)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_warm_up_loads_the_simulators_kernels_and_builds_the_holds_twin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing the first armed cycles need is loaded or built in them: the simulator's D/A
    kernel (the warm-up writes only null) is loaded by `warm_up` (in a fresh interpreter, as
    above), and arming reuses the hold's compiled twin `Loop.warm_up` built."""
    code = (
        "from daq.profile.loader import load_profile\n"
        "from daq.backends.sim import SimBackend\n"
        "from daq.backends.sim.backend import _to_dac\n"
        "b = SimBackend.from_profile(load_profile('hw_profiles/sim-2dof.toml'))\n"
        "b.open()\n"
        "b.warm_up()\n"
        "print(len(_to_dac.signatures))\n"
    )
    assert _fresh_interpreter(code) == "1"

    from controller.compiled import runner as compiled_runner
    from daq.loop.mailbox import Request
    from daq.loop.states import State

    loop = sim_loop(load_profile(PROFILE), compiled=True, ring_capacity=1 << 10)
    hold = loop.hold
    built = []
    real = compiled_runner.compile_runner
    monkeypatch.setattr(compiled_runner, "compile_runner", lambda r: built.append(r) or real(r))
    loop.mailbox._slot.append(Request("arm", None))
    loop.run(0.05)
    assert loop.state == State.ARMED and loop.active is hold and loop._fast is not None
    assert built == []


def test_a_law_that_raises_inside_the_compiled_cycle_trips_and_the_loop_goes_on() -> None:
    """A plant model with a zero valve gain makes `pid_ff` divide by zero (the feed-forward's
    u / k_v). Inside the compiled `k_rest` that raises ZeroDivisionError (numba keeps Python's
    semantics), and it must be the controller's fault, not the loop's: a CONTROLLER_ERROR
    trip, valves null, the loop still cycling. (The Python path divides numpy floats there and
    gets a NaN command instead, which the command check trips on.)"""
    profile = load_profile(PROFILE)
    base = known_params(profile)
    params = dataclasses.replace(base, valve_gain=np.array([0.0, *base.valve_gain[1:]]))
    ff = {
        "name": "ff", "home_deg": [40.0, 30.0],
        "segments": [{"name": "sine", "duration_s": 1.0, "controller": {"kind": "pid_ff"},
                      "trajectory": {"kind": "sine", "amplitude_deg": [2.0, 2.0],
                                     "frequency_hz": [1.0, 1.0]}}],
    }  # fmt: skip
    rows, loop = recorded_loop(True, ff, profile, params=params, seconds=1.0)
    assert loop.error is None, loop.error
    assert loop.fault is not None and loop.fault.code == Trip.CONTROLLER_ERROR, loop.fault
    assert "ZeroDivisionError" in loop.fault.where
    assert (rows[:, 0] > loop.fault.seq).sum() > 100  # it went on cycling


def test_a_runner_whose_phase_change_raises_trips_and_the_loop_goes_on() -> None:
    """The compiled runner's `prepare` (its rare phase changes, in Python) raising is the
    controller's fault as a law's error is: CONTROLLER_ERROR naming it, valves null, the loop
    still cycling."""
    from daq.loop.mailbox import Request
    from daq.loop.states import State

    loop = sim_loop(load_profile(PROFILE), compiled=True, ring_capacity=1 << 10)
    loop.mailbox._slot.append(Request("arm", None))
    loop.run(0.02)
    assert loop.state == State.ARMED and loop._fast is not None

    def broken(fb: Any) -> bool:
        raise RuntimeError("phase table corrupt")

    loop._fast.prepare = broken  # type: ignore[method-assign]
    seq = loop.seq
    loop.run(0.05)
    assert loop.error is None
    assert loop.fault is not None and loop.fault.code == Trip.CONTROLLER_ERROR
    assert "phase table corrupt" in loop.fault.where and loop.fault.seq == seq
    assert loop.seq == seq + 50  # it went on cycling
    assert np.all(loop.volts == loop.null)
