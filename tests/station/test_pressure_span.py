"""The pressure span through the command handler on the realistic simulated plant: each
chamber's gain against the supply channel or a gauge reading, within its σ of the simulator's
truth, applied only when every residual is within the declared accuracy."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from daq.commands.errors import CommandError
from daq.commands.spec import validate
from daq.profile.schema import Profile
from tests.loop.station_profile import station_profile
from tests.station.station_rig import REALISTIC, Station

CHAMBERS = ("p_cap_1", "p_rod_1", "p_cap_2", "p_rod_2")


def test_span_against_the_supply_channel_finds_each_gain_within_its_sigma(
    station: Station,
) -> None:
    assert "run pressure_zero" in station.error("pressure_span")  # the zero comes first
    assert station.api.handle("calibration", {})["calibration"] is None
    zero = station.calibrate("pressure_zero", apply=True)
    result = station.calibrate("pressure_span", apply=True)
    assert result["ok"] and result["applied"], result
    chans = result["channels"]
    assert set(chans) == set(CHAMBERS)  # the supply channel is the reference
    for name in CHAMBERS:
        _, gain = station.truth(name)
        found = chans[name]
        # within 3σ of the truth, and the σ well inside the datasheet class (0.5 %); it
        # includes the supply transducer's class (0.1 %)
        assert abs(found["gain"] - gain) <= 3.0 * found["sigma_gain"], (name, found, gain)
        assert 0.001 < found["sigma_gain"] < 0.5 * found["accuracy_gain"], name
        assert found["offset"] == zero["channels"][name]["offset"]  # the zero is kept
        assert found["residual"] <= found["accuracy_offset"]
        assert len(result["span_points"][name]) == 2  # low and high stage
    in_force = station.api.handle("calibration", {})["calibration"]["channels"]
    assert in_force["p_rod_2"]["method"] == "pressure_span"
    assert in_force["p_supply"]["method"] == "pressure_zero"
    assert station.loop.state.name == "IDLE"


def test_span_against_a_gauge_reading_and_a_misread_gauge_is_not_applied(
    station: Station,
) -> None:
    station.calibrate("pressure_zero", apply=True)
    before = station.api.handle("calibration", {})["calibration"]
    gauge = 7.0e6  # the high stage's relief setting read on the gauge (the plant's truth)
    # A gauge misread by 5 %: every gain 5 % off, beyond 5 × the class (0.5 %): refused whole.
    bad = station.calibrate("pressure_span", apply=True, reference_pa=1.05 * gauge)
    assert not bad["ok"] and not bad["applied"]
    assert "beyond 5 × the declared accuracy" in bad["channels"]["p_cap_1"]["problems"][0]
    assert station.api.handle("calibration", {})["calibration"] == before
    good = station.calibrate(
        "pressure_span", apply=True, reference_pa=gauge, reference_sigma_pa=3.5e3
    )
    assert good["ok"] and good["applied"], good
    assert set(good["channels"]) == {*CHAMBERS, "p_supply"}  # the supply spanned too
    for name in (*CHAMBERS, "p_supply"):
        _, gain = station.truth(name)
        found = good["channels"][name]
        assert abs(found["gain"] - gain) <= 3.0 * found["sigma_gain"], (name, found, gain)
        assert len(good["span_points"][name]) == (2 if name == "p_supply" else 1)


def test_a_span_residual_beyond_the_declared_accuracy_applies_nothing(tmp_path: Path) -> None:
    data = station_profile(REALISTIC).model_dump(exclude_none=True)
    ch = next(c for c in data["channels"] if c["name"] == "p_rod_2")
    # 50 Pa: the two stages' points miss a line through the zero by more (a few kPa)
    ch["accuracy"] = {"offset": 50.0, "gain": 0.005}
    st = Station(Profile.model_validate(data), tmp_path / "cal")
    try:
        zero = st.calibrate("pressure_zero")  # not applied: its residual exceeds 50 Pa too
        assert not zero["ok"]
        # apply the zero by hand, as a file would
        from daq.station.calfile import Calibration, ChannelCal

        cal = Calibration(st.profile.rig.id, "2026-01-01T00:00:00Z", {
            n: ChannelCal(c["offset"], 1.0, c["sigma_offset"], 0.0, "pressure_zero")
            for n, c in zero["channels"].items()
        })  # fmt: skip
        st.api.calibration.apply(cal)
        before = st.api.handle("calibration", {})["calibration"]
        result = st.calibrate("pressure_span", apply=True)
        assert not result["ok"] and not result["applied"]
        assert "exceeds the declared accuracy 50" in result["channels"]["p_rod_2"]["problems"][0]
        assert result["channels"]["p_cap_1"]["ok"]  # the others were fine, and not applied
        assert st.api.handle("calibration", {})["calibration"] == before
    finally:
        st.loop.stop()
        st.loop.join(10.0)


def test_span_without_a_supply_channel_needs_a_gauge_reading(tmp_path: Path) -> None:
    data = station_profile(REALISTIC).model_dump(exclude_none=True)
    data["channels"] = [c for c in data["channels"] if c["role"] != "supply"]
    st = Station(Profile.model_validate(data), tmp_path / "cal")
    try:
        assert "no supply channel" in st.error("pressure_span")
        assert "reference_pa 100 Pa is not the high stage's supply" in st.error(
            "pressure_span", reference_pa=100.0
        )
        assert "reference_sigma_pa -1 must be ≥ 0" in st.error(
            "pressure_span", reference_pa=7.0e6, reference_sigma_pa=-1.0
        )
        # the command server's check (daq.commands.spec) refuses a non-finite reading
        with pytest.raises(CommandError, match="reference_pa") as err:
            validate("calibrate", {"procedure": "pressure_span", "reference_pa": math.nan})
        assert err.value.code == "bad_args"
        assert "reference_pa nan Pa is not the high stage's supply" in st.error(
            "pressure_span", reference_pa=math.nan
        )
        assert st.api.handle("calibration", {})["calibration"] is None  # nothing applied
    finally:
        st.loop.stop()
        st.loop.join(10.0)
