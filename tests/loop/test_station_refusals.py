"""The loop's own refusals of station requests (daq/loop/station.py), asked directly through the
mailbox: the service's command layer checks some of the same things first, but the loop is the
last word on what the valves and the power lines do, and each refusal must leave the rig as it
was and say why."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

from controller.experiment import Experiment
from controller.runner import ExperimentRunner
from controller.station_runner import Phase, PhaseRunner
from daq.backends.base import BackendStatus
from daq.loop import Loop
from daq.loop.mailbox import Request
from daq.loop.states import State
from daq.loop.station import CalibrationSwap
from daq.profile.loader import load_profile
from daq.profile.schema import Profile
from daq.service.control_api import joint_gains, joint_limits
from daq.station.power import Power
from tests.loop.compiled_harness import sim_loop
from tests.loop.station_profile import PROFILES, ask, jog_payload, station_profile


def _loop(profile: Profile, compiled: bool = True) -> Loop:
    loop = sim_loop(profile, compiled=compiled)
    loop.run(0.01)
    return loop


def _refused(req: Request, code: str, words: str) -> None:
    assert req.ok is False, (req.reason, req.data)
    assert req.data.get("code") == code and words in req.reason, (req.reason, req.data)


def _powered(level: Power = Power.LOW) -> Loop:
    loop = _loop(station_profile())
    assert ask(loop, "power", int(level)).ok
    loop.run(3.0)  # the twin's ramp-up is 1.5 s
    return loop


def _drain_runner(p: Profile) -> PhaseRunner:
    phase = Phase("drain", 5.0, (1.0,) * len(p.joints), square_s=0.5)
    return PhaseRunner([phase], joint_gains(p), joint_limits(p), p.period)


def test_power_without_a_hydraulics_section() -> None:
    loop = _loop(load_profile(PROFILES / "sim-2dof.toml"))
    _refused(ask(loop, "power", int(Power.LOW)), "rejected", "no [hydraulics] section")


def test_drain_needs_idle_and_the_power_off() -> None:
    loop = _powered()
    p = loop.profile
    _refused(ask(loop, "drain", _drain_runner(p)), "rejected", "only with the hydraulic power off")
    assert loop.state == State.IDLE and not loop.station.draining
    assert ask(loop, "arm").ok
    _refused(ask(loop, "drain", _drain_runner(p)), "invalid_state", "drain refused in ARMED")


def test_power_is_not_switched_on_while_the_valves_drain() -> None:
    loop = _loop(station_profile())
    assert ask(loop, "drain", _drain_runner(loop.profile)).ok
    assert loop.station.draining
    _refused(ask(loop, "power", int(Power.LOW)), "invalid_state", "while the valves drain")
    assert loop.station.power == Power.OFF


def test_power_changes_are_refused_while_running_and_the_same_level_is_not_a_change() -> None:
    loop = _powered()
    p = loop.profile
    assert ask(loop, "arm").ok
    exp = Experiment.from_dict({
        "name": "hold", "home_deg": [j.home_deg for j in p.joints],
        "segments": [{"name": "h", "duration_s": 5.0, "controller": {"kind": "pid"},
                      "trajectory": {"kind": "hold"}}]})  # fmt: skip
    runner = ExperimentRunner(exp, joint_gains(p), joint_limits(p), p.period, None, check=False)
    assert ask(loop, "run", runner).ok and loop.state == State.RUNNING
    _refused(ask(loop, "power", int(Power.HIGH)), "invalid_state", "in RUNNING: stop first")
    assert ask(loop, "power", int(Power.LOW)).ok and loop.state == State.RUNNING


def test_a_backend_that_cannot_switch_the_power_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = _loop(station_profile())
    monkeypatch.setattr(loop.backend, "write_power", lambda level: BackendStatus.ERROR)
    _refused(ask(loop, "power", int(Power.LOW)), "rejected", "could not switch the lines")
    assert loop.station.power == Power.OFF  # not recorded as switched
    assert not [e for e in loop.drain_events() if e["kind"] == "power"]


def test_jog_refusals_at_the_loop() -> None:
    loop = _loop(station_profile())
    p = loop.profile
    soft_max = p.joints[0].limits.soft_max_deg
    assert ask(loop, "power", int(Power.LOW)).ok
    # Just switched on, the supply has not built: a jog from IDLE needs it, as arming does.
    _refused(ask(loop, "jog", jog_payload(p, "j1", soft_max)), "rejected", "jog refused: supply")
    loop.run(3.0)
    # A target the command layer would refuse reaches the loop: it refuses it too.
    beyond = dataclasses.replace(
        jog_payload(p, "j1", soft_max), target=math.radians(soft_max) + 0.01
    )
    _refused(ask(loop, "jog", beyond), "rejected", "is outside its soft limits")
    # Exactly at the soft limit is inside.
    at = ask(loop, "jog", jog_payload(p, "j1", soft_max))
    assert at.ok and loop.station.jogging, at.reason
    at_min = ask(loop, "jog", jog_payload(p, "j2", p.joints[1].limits.soft_min_deg))
    assert at_min.ok, at_min.reason
    # While the jog moves, high pressure is refused; the level it has is not a change.
    _refused(ask(loop, "power", int(Power.HIGH)), "invalid_state", "while a jog moves")
    assert ask(loop, "power", int(Power.LOW)).ok
    assert ask(loop, "estop").ok
    _refused(
        ask(loop, "jog", jog_payload(p, "j1", soft_max)), "invalid_state", "jog refused in ESTOP"
    )


def test_a_backend_that_cannot_switch_the_shunts(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = _loop(station_profile())
    monkeypatch.setattr(loop.backend, "write_shunt", lambda mask: BackendStatus.ERROR)
    bits = sum(1 << k for k in range(len(loop.station.shunt_limit)))
    _refused(ask(loop, "shunt", (True, bits)), "rejected", "could not switch the shunt relays")
    assert loop.station.shunt == 0


def test_a_calibration_is_applied_in_idle_only() -> None:
    loop = _powered()
    n = len(loop.scaler.channels)
    swap = CalibrationSwap(np.zeros(n), np.ones(n), "test")
    assert ask(loop, "arm").ok
    _refused(ask(loop, "calibration", swap), "invalid_state", "calibration refused in ARMED")
    assert loop.station.calibration != "test"
    assert ask(loop, "disarm").ok
    assert ask(loop, "calibration", swap).ok and loop.station.calibration == "test"


def test_arming_before_the_supply_has_built_names_the_reading() -> None:
    loop = _loop(station_profile())
    assert ask(loop, "power", int(Power.LOW)).ok
    req = ask(loop, "arm")
    _refused(req, "rejected", "arm refused: supply pressure")
    reading = float(req.reason.split("supply pressure ")[1].split(" MPa")[0])
    st = loop.station
    # The reading of the refusing cycle, a few ms before now: the supply is still building.
    assert 0.0 <= reading <= loop.eng_now[st.supply_index] / 1e6 + 0.005
    assert f"below {st.supply_arm / 1e6:.2f} MPa" in req.reason


def test_a_shunt_with_the_power_on_is_refused_saying_so() -> None:
    loop = _powered()
    bits = sum(1 << k for k in range(len(loop.station.shunt_limit)))
    req = ask(loop, "shunt", (True, bits))
    _refused(req, "rejected", "hydraulic power is LOW; a shunt calibration reads")
    assert "implicitly on" not in req.reason  # this station's power is switched


@pytest.mark.parametrize("station", [False, True], ids=["no-hydraulics", "no-supply-channel"])
def test_without_a_supply_to_watch_nothing_trips_on_it(station: bool) -> None:
    """A profile without [hydraulics], and a station without a supply transducer, hold armed on
    either cycle path without a SUPPLY_LOST: there is no reading to judge (the loop does not
    read another channel in its place)."""
    for compiled in (True, False):
        if station:
            profile = station_profile(supply_channel=False)
        else:
            profile = load_profile(PROFILES / "sim-2dof.toml")
        loop = _loop(profile, compiled)
        if station:
            assert ask(loop, "power", int(Power.LOW)).ok
            loop.run(3.0)
        assert ask(loop, "arm").ok, compiled
        loop.run(0.5)
        assert loop.fault is None and loop.state == State.ARMED, (compiled, loop.fault)


class _NoStart:
    """A runner whose enable raises (a law refusing its gains, a driver not ready)."""

    def enable(self, fb: Any) -> None:
        raise RuntimeError("not ready")

    def disable(self) -> None:
        pass


def test_a_jog_or_a_drain_whose_runner_cannot_start_is_refused() -> None:
    loop = _loop(station_profile())
    p = loop.profile
    # Drain (IDLE, power off): refused, the soft limits back.
    soft = loop.interlocks.soft_min.copy()
    _refused(ask(loop, "drain", _NoStart()), "rejected", "drain refused: the runner failed")
    assert loop.state == State.IDLE and not loop.station.draining
    assert np.array_equal(loop.interlocks.soft_min, soft)
    # Jog from ARMED: refused, and the hold takes the arm again.
    assert ask(loop, "power", int(Power.LOW)).ok
    loop.run(3.0)
    assert ask(loop, "arm").ok
    bad = dataclasses.replace(jog_payload(p, "j1", 40.0), runner=_NoStart())
    _refused(ask(loop, "jog", bad), "rejected", "jog refused: the controller failed to enable")
    assert loop.state == State.ARMED and loop.active is loop.hold
    assert not loop.station.jogging
    assert np.array_equal(loop.interlocks.soft_min, soft)
