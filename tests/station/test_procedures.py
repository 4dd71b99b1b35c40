"""Calibration procedures through the command handler on the realistic simulated plant: what
they find against the simulator's truth (its sensors' `sim_error`), applying only results within
the declared accuracy, refusing to start outside IDLE."""

from __future__ import annotations

from pathlib import Path

import pytest

from daq.profile.schema import Profile
from daq.service.control_api import CommandError
from tests.conditions import wait_until
from tests.loop.station_profile import station_profile
from tests.station.station_rig import REALISTIC, Station, arms


def test_pressure_zero_finds_each_offset_within_2_kpa_and_applies_it(station: Station) -> None:
    result = station.calibrate("pressure_zero", apply=True)
    assert result["ok"] and result["applied"]
    chans = result["channels"]
    assert set(chans) == {"p_cap_1", "p_rod_1", "p_cap_2", "p_rod_2", "p_supply"}
    for name, found in chans.items():
        offset, _ = station.truth(name)
        assert found["offset"] == pytest.approx(offset, abs=2000.0), name
        assert 0 < found["sigma_offset"] < 1000.0
        # the zero keeps the gain, and its uncertainty: the declared class until a span
        assert found["sigma_gain"] == (0.001 if name == "p_supply" else 0.005), name
    assert station.loop.state.name == "IDLE"
    assert station.loop.station.power.name == "OFF"
    in_force = station.api.handle("calibration", {})["calibration"]["channels"]
    assert in_force["p_cap_1"]["method"] == "pressure_zero"


def test_position_finds_potentiometer_zero_and_span_and_the_resolver_offset(
    station: Station,
) -> None:
    result = station.calibrate("position", apply=True)
    assert result["ok"] and result["applied"], result
    chans = result["channels"]
    for pot in ("piston_1", "piston_2"):
        offset, gain = station.truth(pot)
        assert chans[pot]["offset"] == pytest.approx(offset, abs=0.05e-3), pot
        assert chans[pot]["gain"] == pytest.approx(gain, rel=1e-3), pot
    for res in ("q_1", "q_2"):
        offset, _ = station.truth(res)
        assert chans[res]["offset"] == pytest.approx(offset, abs=2e-4), res  # 0.01°
    # Both procedures' results together: the pressure zero keeps the position's channels.
    station.calibrate("pressure_zero", apply=True)
    in_force = station.api.handle("calibration", {})["calibration"]["channels"]
    assert {"piston_1", "q_2", "p_rod_2"} <= set(in_force)


def test_a_result_beyond_the_declared_accuracy_is_not_applied(tmp_path: Path) -> None:
    data = station_profile(REALISTIC).model_dump(exclude_none=True)
    ch = next(c for c in data["channels"] if c["name"] == "p_cap_1")
    ch["accuracy"] = {"offset": 1.0, "gain": 0.005}  # 1 Pa: no zero's residual is below it
    st = Station(Profile.model_validate(data), tmp_path / "cal")
    try:
        result = st.calibrate("pressure_zero", apply=True)
        assert not result["ok"] and not result["applied"]
        assert "exceeds the declared accuracy" in result["channels"]["p_cap_1"]["problems"][0]
        assert st.api.handle("calibration", {}) == {"calibration": None, "applied": []}
    finally:
        st.loop.stop()
        st.loop.join(10.0)


def test_a_procedure_is_refused_unless_idle(station: Station) -> None:
    api = station.api
    api.handle("power", {"level": "low"})
    assert wait_until(lambda: arms(api))
    with pytest.raises(CommandError, match="calibrate position refused in ARMED") as err:
        api.handle("calibrate", {"procedure": "position"})
    assert err.value.code == "invalid_state"
    api._call_loop("run", None)  # RUNNING, holding
    with pytest.raises(CommandError, match="calibrate pressure_zero refused in RUNNING"):
        api.handle("calibrate", {"procedure": "pressure_zero"})
    assert station.loop.state.name == "RUNNING" and station.loop.station.power.name == "LOW"
    with pytest.raises(CommandError, match="unknown procedure 'span'"):
        api.handle("calibrate", {"procedure": "span"})


def test_valve_null_finds_the_lvdt_span_at_the_spool_stops_and_the_holding_command(
    station: Station,
) -> None:
    result = station.calibrate("valve_null")
    assert not result["applied"]  # not asked to
    chans = result["channels"]
    assert set(chans) == {"spool_1", "spool_2"}
    for name, found in chans.items():
        offset, gain = station.truth(name)
        assert found["gain"] == pytest.approx(gain, rel=1e-3), name
        # the LVDT's zero in the spool's frame: its true offset, from the stops' middle
        assert found["offset"] == pytest.approx(offset, abs=0.5e-3), name
        assert 0.0 < found["sigma_offset"] < 0.5e-3 and found["residual"] is not None
    # The valve command that holds each joint still, in volts at the valve (null bias
    # 7 mV / −6 mV of spool and k_v = 0.25 make it tens of mV).
    assert set(result["valve_null_v"]) == {"j1", "j2"}
    assert all(abs(v) < 0.2 for v in result["valve_null_v"].values())
    assert station.loop.state.name == "IDLE"


def test_a_calibrated_twin_is_in_force_for_the_plain_profile(tmp_path: Path) -> None:
    from daq.profile.loader import load_profile
    from daq.service.twin_calibration import calibrate_twin
    from daq.station.calstore import CalibrationStore
    from tests.loop.station_profile import PROFILES

    plain = load_profile(PROFILES / REALISTIC)
    cal, path, results = calibrate_twin(plain, tmp_path)
    assert [r["procedure"] for r in results] == [
        "oil_temperature", "pressure_zero", "pressure_span", "position", "valve_null"
    ]  # fmt: skip
    assert cal.channels["spool_1"].method == "valve_null"
    # the profile's own channels, its supply transducer among them
    assert {"p_supply", "p_cap_1", "piston_2", "q_1", "oil_temp"} <= set(cal.channels)
    # the oil against the simulated reference thermometer (0.1 °C), not the channel's 0.75 °C
    oil = results[0]["channels"]["oil_temp"]
    assert oil["sigma_offset"] == pytest.approx(0.1, rel=0.01)
    assert abs(oil["offset"] - 0.75) < 0.3  # 0.5 °C + 1 % of ~22 °C: the simulated error
    # every later procedure records the oil as the calibrated channel reads it
    assert results[1]["oil_c"] == pytest.approx(results[0]["oil_c"], abs=0.3)
    current = CalibrationStore(tmp_path, plain).current()
    assert current is not None and current[1] == path


def test_valve_null_where_the_chambers_balance_is_within_its_sigma_of_the_centred_edges(
    station: Station,
) -> None:
    """The LVDT reading at centred metering edges (sensor offset + span × the valve's null
    bias at the oil temperature) within 3σ of the null found, after the pressure zero."""
    station.calibrate("pressure_zero", apply=True)
    result = station.calibrate("valve_null")
    eff = station.sim.true_effects
    oil = station.sim.true_oil_temperature()
    for j, name in enumerate(("spool_1", "spool_2")):
        found = result["hydraulic_null"][name]
        offset, gain = station.truth(name)
        je = eff.joints[j]
        bias = je.null_bias + je.null_shift_per_k * (oil - eff.reference_c)
        truth = offset - gain * bias  # the declared reading at the centred edges
        if any("no pressure gain" in p for p in found["problems"]):
            assert found["sigma"] == float("inf")  # nothing bounds it
            continue
        assert found["sigma"] < 2e-3, name
        assert abs(found["reading"] - truth) <= 3.0 * found["sigma"], (name, found, truth)
        # in spool units, through the LVDT's calibration from the stops: the bias itself
        assert abs(found["spool"] + bias) <= 3.0 * found["sigma"] + 0.5e-3, (name, found, bias)
    # The LVDT's own calibration is the stops' (applied if asked), never the hydraulic null.
    for name in ("spool_1", "spool_2"):
        offset, _ = station.truth(name)
        assert result["channels"][name]["offset"] == pytest.approx(offset, abs=0.5e-3)
    # What a static hold measures is the true balance point (mismatched edges included): j1's
    # load holds its piston on the stop, and its null is that point within 0.15 mV (the σ's
    # edge share, ≈ 0.5 mV, is what separates it from the centred edges, not from this).
    # j2's balanced chambers push its piston off the stop: the creep is said in words.
    j1 = result["hydraulic_null"]["spool_1"]
    offset, gain = station.truth("spool_1")
    assert j1["problems"] == []
    assert abs(j1["reading"] - (offset + gain * station.sim.true_valve_balance(0))) < 0.15e-3
    assert any(
        "crept off its retracted stop" in w for w in result["hydraulic_null"]["spool_2"]["problems"]
    )
