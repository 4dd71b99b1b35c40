"""The oil temperature transmitter calibrated against a reference thermometer
(daq.service.procedure_temperature) on the realistic simulated station: the offset it finds
against the simulator's true sensor error, the corrected reading afterwards, and its refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from daq.profile.schema import Profile
from daq.service.control_api import CommandError
from daq.service.procedures import Rows
from tests.conditions import wait_until
from tests.loop.station_profile import station_profile
from tests.station.station_rig import REALISTIC, Station, arms

OIL = "oil_temp"


def _mean(st: Station, name: str, seconds: float = 0.5) -> float:
    rows = Rows(st.loop).seconds(seconds + 0.05)
    return float(rows[50:, st.loop.layout.index(f"eng.{name}")].mean())


def test_an_exact_reference_gives_the_transmitters_error_at_that_temperature(
    station: Station,
) -> None:
    true_c = station.sim.true_oil_temperature()
    result = station.calibrate("oil_temperature", apply=True, reference_c=true_c,
                               reference_sigma_c=0.0)  # fmt: skip
    assert result["ok"] and result["applied"], result
    found = result["channels"][OIL]
    offset, gain = station.truth(OIL)  # declared = gain·true + offset
    # the gain kept (1, declared): the offset is the whole error at this temperature
    assert found["gain"] == 1.0
    assert found["offset"] == pytest.approx(offset + (gain - 1.0) * true_c, abs=0.01)
    assert 0.0 < found["sigma_offset"] < 0.01  # the window mean's alone
    assert found["sigma_gain"] == 0.01  # the declared class, kept with the gain
    point = result["temperature_point"]
    assert point["reference_c"] == true_c and point["channel"] == OIL
    in_force = station.api.handle("calibration", {})["calibration"]["channels"][OIL]
    assert in_force["method"] == "oil_temperature" and in_force["oil_c"] == true_c
    # the loop now reads the oil within its noise's mean of the truth (0.75 °C off before)
    assert _mean(station, OIL) == pytest.approx(station.sim.true_oil_temperature(), abs=0.02)
    assert station.loop.state.name == "IDLE" and station.loop.station.power.name == "OFF"


def test_the_reference_thermometers_error_is_carried_in_the_sigma(station: Station) -> None:
    sigma = 0.1
    ref = station.sim.reference_thermometer_c(sigma)
    assert ref != station.sim.true_oil_temperature()  # the probe has an error of its own
    result = station.calibrate("oil_temperature", apply=True, reference_c=ref,
                               reference_sigma_c=sigma)  # fmt: skip
    found = result["channels"][OIL]
    offset, gain = station.truth(OIL)
    true_c = station.sim.true_oil_temperature()
    assert sigma <= found["sigma_offset"] < 1.01 * sigma
    assert abs(found["offset"] - (offset + (gain - 1.0) * true_c)) <= 3.0 * found["sigma_offset"]
    assert abs(_mean(station, OIL) - true_c) <= 3.0 * found["sigma_offset"]


def test_refusals_name_what_is_wrong(station: Station) -> None:
    assert "needs reference_c" in station.error("oil_temperature")
    err = station.error("oil_temperature", reference_c=150.0)
    assert "reference_c 150 °C is outside oil_temp's valid range [5, 90] °C" in err
    err = station.error("oil_temperature", reference_c=25.0, reference_sigma_c=-0.1)
    assert "reference_sigma_c -0.1 °C must be within 0–5 °C" in err
    err = station.error("oil_temperature", reference_c=25.0, window_s=0.0)
    assert "window_s 0 must be > 0" in err
    # the bounds themselves are allowed (a result, judged against the class; not an error)
    for ref, sigma in ((5.0, 5.0), (90.0, 0.0)):
        point = station.calibrate("oil_temperature", reference_c=ref, reference_sigma_c=sigma)
        assert point["temperature_point"]["reference_c"] == ref and not point["ok"]
    # a reading 10 °C off its reference: beyond 5 × the class, reported and not applied
    true_c = station.sim.true_oil_temperature()
    result = station.calibrate("oil_temperature", apply=True, reference_c=true_c - 10.0)
    assert not result["ok"] and not result["applied"]
    assert "beyond 5 × the declared accuracy" in result["channels"][OIL]["problems"][0]
    assert station.api.handle("calibration", {})["calibration"] is None
    station.api.handle("power", {"level": "low"})
    assert wait_until(lambda: arms(station.api))
    with pytest.raises(CommandError, match="calibrate oil_temperature refused in ARMED") as exc:
        station.api.handle("calibrate", {"procedure": "oil_temperature", "reference_c": 25.0})
    assert exc.value.code == "invalid_state"


def test_needs_a_temperature_channel_but_no_power_unit(tmp_path: Path) -> None:
    data = station_profile(REALISTIC).model_dump(exclude_none=True)
    del data["hydraulics"]
    st = Station(Profile.model_validate(data), tmp_path / "a")
    try:
        with pytest.raises(CommandError, match=r"needs \[hydraulics\]"):
            st.api.handle("calibrate", {"procedure": "pressure_zero"})
        # nothing here switches the power: no power unit needed
        true_c = st.sim.true_oil_temperature()
        result = st.calibrate("oil_temperature", reference_c=true_c, reference_sigma_c=0.0)
        assert result["ok"] and not result["applied"]
    finally:
        st.loop.stop()
        assert st.loop.join(10.0)
    data["channels"] = [c for c in data["channels"] if c["role"] != "temperature"]
    st = Station(Profile.model_validate(data), tmp_path / "b")
    try:
        assert "no oil temperature channel" in st.error("oil_temperature", reference_c=25.0)
    finally:
        st.loop.stop()
        assert st.loop.join(10.0)


def test_the_gain_in_force_is_kept_and_the_offset_referred_to_it(station: Station) -> None:
    """After a calibration that set the gain (here by hand, 2 %), the offset is the reading
    less gain × reference, so the corrected reading is the reference at that temperature."""
    cal = f'rig = "{station.profile.rig.id}"\n[channels.{OIL}]\ngain = 1.02\nsigma_gain = 0.002\n'
    station.api.handle("calibration_apply", {"text": cal, "source": "by-hand.toml"})
    true_c = station.sim.true_oil_temperature()
    result = station.calibrate("oil_temperature", apply=True, reference_c=true_c,
                               reference_sigma_c=0.0)  # fmt: skip
    found = result["channels"][OIL]
    offset, gain = station.truth(OIL)
    assert found["gain"] == 1.02 and found["sigma_gain"] == 0.002  # kept, with its σ
    assert found["offset"] == pytest.approx(offset + gain * true_c - 1.02 * true_c, abs=0.01)
    assert _mean(station, OIL) == pytest.approx(station.sim.true_oil_temperature(), abs=0.02)
