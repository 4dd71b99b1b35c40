"""Shunt calibration on the realistic simulated plant, through the command handler: the
procedure finds each transducer's true gain within its σ (the certificate's error included), and
the loop keeps a shunted channel away from everything that acts on pressures — a relay closes
only in IDLE with the power off, `arm` is refused while one is closed, and every state change,
power change and e-stop opens them all."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daq.service.control_api import CommandError, ControlApi
from daq.service.procedures import Rows
from tests.conditions import wait_until
from tests.loop.station_profile import station_profile
from tests.station.station_rig import REALISTIC, Station, arms

SHUNTED = ("p_cap_1", "p_rod_1", "p_cap_2", "p_rod_2", "p_supply")


def _shunted(api: ControlApi) -> list[str]:
    return list(api.handle("status", {})["station"]["shunt"])


def _mean(st: Station, name: str, seconds: float = 0.5) -> float:
    """A channel's mean reading, from 50 ms after the call (the cycle that took the last
    request read its inputs before it: its row may still be on the way)."""
    rows = Rows(st.loop).seconds(seconds + 0.05)
    return float(rows[50:, st.loop.layout.index(f"eng.{name}")].mean())


def test_shunt_finds_the_true_gains_within_their_sigma(station: Station) -> None:
    assert "run pressure_zero" in station.error("pressure_shunt")  # the zero comes first
    zero = station.calibrate("pressure_zero", apply=True)
    station.loop.drain_events()
    result = station.calibrate("pressure_shunt", apply=True)
    assert result["ok"] and result["applied"], result
    chans = result["channels"]
    assert set(chans) == set(SHUNTED)
    # Ten numbers each held to its own ±3σ would fail about one run in forty with every σ right:
    # one may sit past 3σ, none past 4σ (the chain tests' convention).
    z = {}
    for name in SHUNTED:
        _, gain = station.truth(name)
        found = chans[name]
        z[f"{name} gain"] = (found["gain"] - gain) / found["sigma_gain"]
        # the certificate's 0.1 % dominates the σ; the windows' noise and drift add little
        assert found["gain"] * 0.001 <= found["sigma_gain"] < 0.0012, name
        assert found["offset"] == zero["channels"][name]["offset"]  # the zero is kept
        assert found["residual"] <= found["accuracy_offset"], name
        point = result["shunt_points"][name]
        true_step = gain * station.sim.true_shunt_equivalent(name)
        z[f"{name} step"] = (point["step"] - true_step) / point["sigma_step"]
    assert max(abs(v) for v in z.values()) <= 4.0, z
    assert sum(abs(v) > 3.0 for v in z.values()) <= 1, z
    in_force = station.api.handle("calibration", {})["calibration"]["channels"]
    assert in_force["p_cap_2"]["method"] == "pressure_shunt"
    # Every relay open again, disarmed, power off; one event per switch.
    assert _shunted(station.api) == [] and station.loop.state.name == "IDLE"
    assert station.loop.station.power.name == "OFF"
    events = [e for e in station.loop.drain_events() if e["kind"] == "shunt"]
    assert [(e["on"], e["previous"]) for e in events] == [
        (list(SHUNTED), []), ([], list(SHUNTED))
    ]  # fmt: skip


def test_a_shunt_closes_only_in_idle_with_the_power_off(station: Station) -> None:
    api = station.api
    api.handle("power", {"level": "low"})
    with pytest.raises(CommandError, match="shunt on refused: hydraulic power is LOW") as err:
        api.handle("shunt", {"state": "on"})
    assert err.value.code == "rejected"
    assert wait_until(lambda: arms(api))
    with pytest.raises(CommandError, match="shunt on refused in ARMED") as err:
        api.handle("shunt", {"state": "on", "channels": ["p_cap_1"]})
    assert err.value.code == "invalid_state"
    api._call_loop("run", None)  # RUNNING, holding
    with pytest.raises(CommandError, match="shunt on refused in RUNNING"):
        api.handle("shunt", {"state": "on"})
    with pytest.raises(CommandError, match="calibrate pressure_shunt refused in RUNNING"):
        api.handle("calibrate", {"procedure": "pressure_shunt"})
    with pytest.raises(CommandError, match="channel 'q_1' has no shunt") as err:
        api.handle("shunt", {"state": "on", "channels": ["q_1"]})
    assert err.value.code == "bad_args"
    assert _shunted(api) == [] and not np.any(station.sim._shunt_input)
    api.handle("shunt", {"state": "off"})  # opening is always allowed
    assert station.loop.state.name == "RUNNING"


def test_a_closed_shunt_shows_in_status_steps_the_reading_and_refuses_arm(
    station: Station,
) -> None:
    api = station.api
    # The supply, off from the start, stands still (the chambers may still be decaying).
    before = _mean(station, "p_supply")
    api.handle("shunt", {"state": "on", "channels": ["p_supply"]})
    assert _shunted(api) == ["p_supply"]
    _, gain = station.truth("p_supply")
    step = _mean(station, "p_supply") - before
    assert step == pytest.approx(gain * station.sim.true_shunt_equivalent("p_supply"), abs=2e3)
    with pytest.raises(
        CommandError, match="arm refused: shunt calibration relay closed on p_supply"
    ):
        api.handle("arm", {})
    assert station.loop.state.name == "IDLE" and _shunted(api) == ["p_supply"]
    api.handle("shunt", {"state": "on", "channels": ["p_rod_2"]})
    assert _shunted(api) == ["p_rod_2", "p_supply"]  # profile order
    api.handle("shunt", {"state": "off", "channels": ["p_supply"]})
    assert _shunted(api) == ["p_rod_2"]
    # A power change opens every relay (they close only with the power off).
    api.handle("power", {"level": "low"})
    assert _shunted(api) == [] and not np.any(station.sim._shunt_input)
    events = [e for e in station.loop.drain_events() if e["kind"] == "shunt"]
    assert [e["on"] for e in events] == [["p_supply"], ["p_rod_2", "p_supply"], ["p_rod_2"], []]


def test_a_shunt_that_would_trip_an_interlock_is_refused(station: Station) -> None:
    """A loaded chamber (here joint 1's cap chamber held at 4 MPa by the test, every cycle:
    the arm's own trapped pressure decays within a second of rig time, too fast to catch in
    virtual time): shunted it would read above its pressure limit and trip PRESSURE; refused
    instead, naming it, nothing switched."""
    n = len(station.profile.joints)

    def loaded() -> None:
        station.sim._x[2 * n] = 4.0e6  # [q, q̇, p⁺, p⁻, u]: joint 1's p⁺, true

    station.loop.after_cycle = loaded
    assert wait_until(lambda: _mean(station, "p_cap_1", 0.05) > 3.5e6)
    with pytest.raises(CommandError, match=r"shunt on refused: p_cap_1 reads \d\.\d+ MPa: shunted "
                       r"it would read above its limit 7.5 MPa") as err:  # fmt: skip
        station.api.handle("shunt", {"state": "on"})
    assert err.value.code == "rejected"
    assert station.loop.state.name == "IDLE" and _shunted(station.api) == []
    station.loop.after_cycle = None
    # Drained, the same request closes every relay.
    _drain(station)
    station.api.handle("shunt", {"state": "on"})
    assert _shunted(station.api) == list(SHUNTED)


def test_estop_a_fault_and_a_state_change_open_every_shunt(station: Station) -> None:
    api = station.api
    _drain(station)
    api.handle("shunt", {"state": "on"})
    assert _shunted(api) == list(SHUNTED)
    api.handle("estop", {})
    assert station.loop.state.name == "ESTOP"
    assert _shunted(api) == [] and not np.any(station.sim._shunt_input)
    api.handle("reset", {})
    api.handle("shunt", {"state": "on", "channels": ["p_rod_1"]})
    assert _shunted(api) == ["p_rod_1"]
    station.sim.inject_fault("q_1:rail_high")  # a broken wire: CHANNEL_RANGE, in IDLE too
    assert wait_until(lambda: station.loop.state.name == "FAULT")
    assert _shunted(api) == [] and not np.any(station.sim._shunt_input)
    station.sim.clear_faults()
    assert wait_until(lambda: _resets(api))
    api.handle("shunt", {"state": "on", "channels": ["p_supply"]})
    api._call_loop("drain", _drain_runner(station, 1.0))  # IDLE → ARMED, valves draining
    assert station.loop.state.name == "ARMED" and _shunted(api) == []


def _drain(st: Station) -> None:
    """Both chambers of each joint to tank (power off, valves open both ways), then disarm."""
    st.api._call_loop("drain", _drain_runner(st, 3.0))
    Rows(st.loop).seconds(2.5)
    st.api.handle("disarm", {})


def _resets(api: ControlApi) -> bool:
    try:
        api.handle("reset", {})
    except CommandError:
        return False
    return True


def _drain_runner(st: Station, seconds: float) -> object:
    from controller.station_runner import Phase, PhaseRunner
    from daq.service.control_api import joint_gains, joint_limits

    p = st.profile
    return PhaseRunner(
        [Phase("drain", seconds, (2.0,) * len(p.joints), square_s=0.5)],
        joint_gains(p), joint_limits(p), p.period,
    )  # fmt: skip


def test_the_shunt_state_crosses_to_the_service_with_the_loop_in_its_own_process(
    tmp_path: Path,
) -> None:
    from daq.service import Service
    from tests.loop.conftest import with_changes

    profile = with_changes(station_profile(REALISTIC), overrun_limit=0)
    service = Service(profile, None, loop_process=True, network=False, run_dir=tmp_path / "runs")
    service.start()
    try:
        api = service.api
        assert service.status()["station"]["shunt"] == []
        api.handle("shunt", {"state": "on", "channels": ["p_supply"]})
        assert wait_until(lambda: service.status()["station"]["shunt"] == ["p_supply"])
        with pytest.raises(CommandError, match="relay closed on p_supply"):
            api.handle("arm", {})
        api.handle("estop", {"reason": "test"})
        assert wait_until(lambda: service.status()["station"]["shunt"] == [])
    finally:
        assert service.shutdown() == 0
