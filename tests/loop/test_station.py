"""The station through the command handler on the simulated rig: hydraulic power levels, the
supply interlock, e-stop dropping power, arm refused without power, and jogging an arm back
inside its soft limits (docs/operations.md, "Hydraulic power" and "Jog")."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from daq.backends.sim import SimBackend
from daq.loop import Loop
from daq.loop.interlocks import Trip
from daq.loop.states import State
from daq.profile.schema import Profile
from daq.service.control_api import CommandError, ControlApi, joint_gains, make_hold_runner
from daq.station.power import Power
from tests.conditions import wait_until
from tests.loop.station_profile import station_profile

LOW, HIGH = 2.5e6, 7.0e6


class Rig:
    """Loop (virtual time, own thread) + simulator + command handler; the loop stops itself at
    the first FAULT so that the rows around the trip stay in the ring."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.sim = SimBackend.from_profile(profile)
        self.sim.open()
        hold = make_hold_runner(profile, joint_gains(profile))
        self.loop = Loop(profile, self.sim, hold=hold, virtual_time=True, ring_capacity=1 << 16)
        self.loop.warm_up()
        self.api = ControlApi(self.loop)

    def __call__(self, cmd: str, **args: Any) -> dict[str, Any]:
        return self.api.handle(cmd, args)

    def col(self, name: str) -> float:
        """The latest published row's column."""
        ring = self.loop.ring
        return float(ring.data[(ring.published - 1) & ring.mask, self.loop.layout.index(name)])

    def until(self, cond: Any) -> None:
        assert wait_until(cond), "timed out"

    def supply_at(self, pa: float) -> None:
        self.until(lambda: abs(self.col("eng.p_supply") - pa) < 0.05 * pa)


@pytest.fixture
def make_rig() -> Iterator[Any]:
    rigs: list[Rig] = []

    def make(profile: Profile | None = None, *, stop_at_fault: bool = False) -> Rig:
        rig = Rig(profile or station_profile())
        if stop_at_fault:
            loop = rig.loop
            loop.after_cycle = lambda: loop.stop() if loop.state == State.FAULT else None
        rig.loop.start()
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.loop.stop()
        assert rig.loop.join(10.0) and rig.loop.error is None


def test_power_levels_build_and_drop_the_supply_and_show_in_status(make_rig: Any) -> None:
    rig = make_rig()
    assert rig("status")["station"] == {"power": "OFF", "jogging": False, "shunt": []}
    assert rig.col("eng.p_supply") < 0.1e6
    assert rig("power", level="low")["power"] == "LOW"
    rig.supply_at(LOW)
    assert rig.sim.supply.level == Power.LOW
    rig("power", level="high")
    rig.supply_at(HIGH)
    assert rig("status")["station"]["power"] == "HIGH"
    rig("power", level="off")
    rig.until(lambda: rig.col("eng.p_supply") < 0.1e6)
    kinds = [e for e in rig.loop.drain_events() if e["kind"] == "power"]
    assert [e["power"] for e in kinds] == ["LOW", "HIGH", "OFF"]
    with pytest.raises(CommandError, match="off, low or high"):
        rig("power", level="medium")


def test_arm_needs_power_and_a_built_supply(make_rig: Any) -> None:
    rig = make_rig()
    with pytest.raises(CommandError, match="hydraulic power is off"):
        rig("arm")
    rig("power", level="low")
    rig.supply_at(LOW)
    assert rig("arm")["state"] == "ARMED"
    with pytest.raises(CommandError, match="power off refused in ARMED: disarm first"):
        rig("power", level="off")
    rig("disarm")
    rig("power", level="off")
    rig.until(lambda: rig.col("eng.p_supply") < 1.0e6)
    rig("power", level="low")  # on again, but the supply has not built yet
    with pytest.raises(CommandError, match=r"supply pressure .* below 2.25 MPa"):
        rig("arm")


def test_arming_needs_more_supply_than_the_trip_level_hysteresis(make_rig: Any) -> None:
    """Between the trip level (0.7 × low) and the arm level (0.9 × low) the supply is not lost
    but not built either: an arm accepted there would trip on the next noisy sample."""
    rig = make_rig()
    station, loop = rig.loop.station, rig.loop
    eng = np.zeros(len(rig.profile.inputs))
    for pa, lost, refused in ((1.7e6, True, True), (2.0e6, False, True), (2.3e6, False, False)):
        eng[station.supply_index] = pa
        assert station.supply_low(eng) is lost, pa
        assert (loop._supply_refusal(eng) is not None) is refused, pa
    eng[station.supply_index] = math.nan
    assert station.supply_low(eng) and loop._supply_refusal(eng) is not None


def _sine(seconds: float) -> dict[str, Any]:
    return {
        "name": "sine",
        "home_deg": [40.0, 30.0],
        "pid": [{"p": 1.5}, {"p": 1.5}],
        "segments": [
            {
                "name": "sine",
                "duration_s": seconds,
                "trajectory": {
                    "kind": "sine",
                    "amplitude_deg": [2.0, 0.0],
                    "frequency_hz": [0.5, 0.5],
                },
                "controller": {"kind": "pid"},
            }
        ],
    }


def _supply_first() -> Profile:
    """The station profile with the supply transducer as input channel 0 (an index the
    compiled cycle must watch as any other: `supply_index >= 0`)."""
    data = station_profile().model_dump(exclude_none=True)
    chans = data["channels"]
    chans.insert(0, chans.pop(next(i for i, c in enumerate(chans) if c["name"] == "p_supply")))
    return Profile.model_validate(data)


@pytest.mark.parametrize("supply_first", [False, True])
def test_supply_loss_while_running_faults_and_nulls_the_valves_in_that_cycle(
    make_rig: Any, supply_first: bool
) -> None:
    rig = make_rig(_supply_first() if supply_first else None, stop_at_fault=True)
    assert rig.loop.compiled
    assert (rig.loop.station.supply_index == 0) is supply_first
    rig("power", level="high")
    rig.supply_at(HIGH)
    rig("arm")
    rig("run", experiment=_sine(600.0))
    t0 = rig.loop.t
    rig.until(lambda: rig.loop.t > t0 + 1.0)
    assert rig.loop.state == State.RUNNING
    rig.sim.supply.switch(Power.OFF)  # the pump trips: nobody asked the service
    rig.until(lambda: rig.loop.finished.is_set())
    loop = rig.loop
    assert loop.fault is not None and loop.fault.code == Trip.SUPPLY_LOST
    assert loop.fault.where == "p_supply" and loop.fault.limit == pytest.approx(0.7 * LOW)
    seq = loop.fault.seq
    lay, data, mask = loop.layout, loop.ring.data, loop.ring.mask
    trip, before = data[seq & mask], data[(seq - 1) & mask]
    assert trip[0] == seq and before[0] == seq - 1
    # The first cycle that read the supply below the limit is the one that nulled the valves.
    assert trip[lay.index("eng.p_supply")] < 0.7 * LOW <= before[lay.index("eng.p_supply")]
    assert before[lay.index("state")] == State.RUNNING
    assert trip[lay.index("state")] == State.FAULT
    cmd = [lay.index(f"cmd.{c.name}") for c in rig.profile.outputs]
    np.testing.assert_array_equal(trip[cmd], loop.null)
    assert np.any(before[cmd] != loop.null)  # live until then


def test_estop_drops_power(make_rig: Any) -> None:
    rig = make_rig()
    rig("power", level="high")
    rig.supply_at(HIGH)
    rig("estop", reason="test")
    assert rig("status")["station"]["power"] == "OFF"
    assert rig.sim.supply.level == Power.OFF
    with pytest.raises(CommandError, match="latched; reset first"):
        rig("power", level="low")


def test_a_profile_without_hydraulics_is_implicitly_powered(make_rig: Any) -> None:
    from daq.profile.loader import load_profile
    from tests.loop.station_profile import PROFILES

    rig = make_rig(load_profile(PROFILES / "sim-2dof.toml"))
    assert rig("status")["station"]["power"] == "HIGH"
    with pytest.raises(CommandError, match=r"no \[hydraulics\] section"):
        rig("power", level="off")
    assert rig("arm")["state"] == "ARMED"


def test_jog_brings_an_arm_parked_outside_its_soft_range_back(make_rig: Any) -> None:
    # Joint 1 rests 3° below its soft minimum (28°).
    profile = station_profile(initial_deg=[25.0, 30.0], soft_min_deg=[28.0, 0.0])
    rig = make_rig(profile)
    rig("power", level="low")
    rig.supply_at(LOW)
    q1 = lambda: math.degrees(rig.col("eng.q_1"))  # noqa: E731
    assert q1() < 27.5
    with pytest.raises(CommandError, match=r"outside its soft limits.*jog j1"):
        rig("arm")
    with pytest.raises(CommandError, match=r"outside its soft limits.*only moves toward"):
        rig("jog", joint="j1", target_deg=20.0)  # away from the range
    rig("power", level="high")
    rig.supply_at(HIGH)
    with pytest.raises(CommandError, match="power is HIGH; jogging runs at low pressure only"):
        rig("jog", joint="j1", target_deg=32.0)
    rig("power", level="low")
    rig.supply_at(LOW)
    with pytest.raises(CommandError, match=r"velocity_deg_s must be in \(0, 5\]"):
        rig("jog", joint="j1", target_deg=32.0, velocity_deg_s=20.0)
    assert rig("jog", joint="j1", target_deg=32.0, velocity_deg_s=2.0)["state"] == "ARMED"
    assert rig("status")["station"]["jogging"] is True
    runner = rig.loop.active
    rig.until(lambda: runner.done and abs(q1() - 32.0) < 0.5)
    assert rig.loop.state == State.ARMED and rig.loop.fault is None
    # Back inside, the soft limits are the profile's again.
    il = rig.loop.interlocks
    assert math.degrees(il.soft_min[0]) == pytest.approx(28.0)
    rig("power", level="high")  # the jog is done: high pressure is allowed
    rig("disarm")
    assert rig("arm")["state"] == "ARMED"


def test_a_drain_lifts_the_soft_limits_and_leaving_it_puts_the_profiles_back(
    make_rig: Any,
) -> None:
    """A drain (power off, valves open to tank for a calibration) runs without soft limits;
    once the rig leaves the live states — here by disarming, with no jog ever run — the
    profile's limits are in force again."""
    from controller.station_runner import Phase, PhaseRunner
    from daq.service.control_api import joint_limits

    rig = make_rig()
    p = rig.profile
    il = rig.loop.interlocks
    soft = (il.soft_min.copy(), il.soft_max.copy())
    assert np.all(np.isfinite(soft[0])) and np.all(np.isfinite(soft[1]))
    runner = PhaseRunner(
        [Phase("drain", 5.0, (1.0,) * len(p.joints), square_s=0.5)],
        joint_gains(p), joint_limits(p), p.period,
    )  # fmt: skip
    rig.api._call_loop("drain", runner)
    assert rig.loop.state == State.ARMED and rig.loop.station.draining
    assert np.all(np.isinf(il.soft_min)) and np.all(np.isinf(il.soft_max))
    rig("disarm")
    rig.until(lambda: not rig.loop.station.draining)
    assert rig.loop.state == State.IDLE and not rig.loop.station.jogging
    assert np.array_equal(il.soft_min, soft[0]) and np.array_equal(il.soft_max, soft[1])


def test_power_and_estop_through_the_service_with_the_loop_in_its_own_process(
    tmp_path: Any,
) -> None:
    from daq.service import Service
    from tests.loop.conftest import with_changes

    profile = with_changes(station_profile(), overrun_limit=0)
    service = Service(profile, None, loop_process=True, network=False, run_dir=tmp_path / "runs")
    service.start()
    try:
        api = service.api
        assert service.status()["station"]["power"] == "OFF"
        with pytest.raises(CommandError, match="hydraulic power is off"):
            api.handle("arm", {})
        assert api.handle("power", {"level": "low"})["power"] == "LOW"
        assert wait_until(lambda: service.status()["station"]["power"] == "LOW")
        assert wait_until(lambda: _try_arm(api), 60.0), "arm once the supply has built"
        api.handle("estop", {"reason": "test"})
        assert wait_until(lambda: service.status()["station"]["power"] == "OFF")
    finally:
        assert service.shutdown() == 0


def _try_arm(api: ControlApi) -> bool:
    try:
        api.handle("arm", {})
    except CommandError as exc:
        assert "supply pressure" in str(exc)
        return False
    return True
