"""Calibration files: round trip, the scaling layer's correction, and every bad input refused
naming what is wrong (another rig, a gain outside 0.8–1.25, NaN, unknown or output channels)."""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from daq.profile.loader import load_profile
from daq.scaling import ChannelScaler, counts_to_eng, eng_to_counts
from daq.station.calfile import (
    Calibration,
    CalibrationError,
    ChannelCal,
    load,
    parse,
    write_atomic,
)
from daq.station.calstore import CalibrationStore

PROFILES = Path(__file__).resolve().parents[2] / "hw_profiles"
PROFILE = load_profile(PROFILES / "sim-2dof.toml")

GOOD = """
rig = "sim2dof"
created_utc = "2026-11-25T18:00:00Z"

[channels.p_cap_1]
offset = 30000.0
gain = 1.004
sigma_offset = 300.0
sigma_gain = 0.0005
method = "pressure_zero"
time_utc = "2026-11-25T17:59:00Z"
oil_c = 22.5
"""


def test_a_good_file_round_trips_through_its_text() -> None:
    assert PROFILE.rig.id == "sim2dof"
    cal = parse(GOOD, PROFILE)
    c = cal.channels["p_cap_1"]
    assert (c.offset, c.gain, c.sigma_offset, c.method, c.oil_c) == (
        30000.0, 1.004, 300.0, "pressure_zero", 22.5,
    )  # fmt: skip
    again = parse(cal.dumps(), PROFILE)
    assert again == cal and again.sha256 == cal.sha256
    assert c.pivot == 0.0 and "pivot" not in cal.dumps()  # a zero made at zero load


def test_a_one_point_calibrations_pivot_round_trips_and_reaches_the_header() -> None:
    text = GOOD.replace("oil_c = 22.5", "oil_c = 22.5\npivot = 22.5")
    cal = parse(text, PROFILE)
    assert cal.channels["p_cap_1"].pivot == 22.5
    assert parse(cal.dumps(), PROFILE) == cal
    assert cal.summary()["channels"]["p_cap_1"]["pivot"] == 22.5
    with pytest.raises(CalibrationError, match=r"p_cap_1.pivot: expected a finite number"):
        parse(GOOD.replace("oil_c = 22.5", "pivot = inf"), PROFILE)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('rig = "sim2dof"', 'rig = "other"'), r"made for rig 'other', this rig is 'sim2dof'"),
        (
            ("gain = 1.004", "gain = 1.3"),
            r"channels.p_cap_1.gain: 1.3 is outside the allowed 0.8–1.25",
        ),
        (("gain = 1.004", "gain = 0.7"), r"gain: 0.7 is outside the allowed 0.8–1.25"),
        (
            ("offset = 30000.0", "offset = nan"),
            r"channels.p_cap_1.offset: expected a finite number",
        ),
        (("sigma_offset = 300.0", "sigma_offset = -1.0"), r"sigma_offset: must be ≥ 0"),
        (("[channels.p_cap_1]", "[channels.p_cap_9]"), r"channels.p_cap_9: not a channel of rig"),
        (("[channels.p_cap_1]", "[channels.valve_1]"), r"valve_1: an output"),
        (('method = "pressure_zero"', 'method = "guess"'), r"method: 'guess' is not one of"),
        (("oil_c = 22.5", "oil_temp = 22.5"), r"unknown key\(s\) oil_temp"),
    ],
)
def test_bad_input_is_refused_naming_what_is_wrong(change: tuple[str, str], message: str) -> None:
    with pytest.raises(CalibrationError, match=message):
        parse(GOOD.replace(*change), PROFILE, "cal.toml")


def _cal(offset: float, gain: float, name: str = "p_cap_1") -> Calibration:
    return Calibration(PROFILE.rig.id, "2026-11-25T18:00:00Z", {name: ChannelCal(offset, gain)})


@given(
    counts=st.floats(0, 65535),
    offset=st.floats(-5e4, 5e4),
    gain=st.floats(0.8, 1.25),
    channel=st.sampled_from(["p_cap_1", "piston_2", "q_1"]),
)
def test_the_scaler_applies_true_is_declared_minus_offset_over_gain(
    counts: float, offset: float, gain: float, channel: str
) -> None:
    inputs = PROFILE.inputs
    i = [c.name for c in inputs].index(channel)
    scaler = ChannelScaler(inputs)
    raw = np.full(len(inputs), 32768.0)
    raw[i] = counts
    eng, plain = np.zeros(len(inputs)), np.zeros(len(inputs))
    scaler.scale(raw, plain)
    scaler.set_correction(*_cal(offset, gain, channel).corrections(PROFILE))
    scaler.scale(raw, eng)
    declared = counts_to_eng(inputs[i], counts)
    assert eng[i] == pytest.approx((declared - offset) / gain, rel=1e-9, abs=1e-9 * abs(offset))
    others = np.arange(len(inputs)) != i
    np.testing.assert_array_equal(eng[others], plain[others])
    scaler.set_correction(np.zeros(len(inputs)), np.ones(len(inputs)))  # back to declared
    scaler.scale(raw, eng)
    np.testing.assert_allclose(eng, plain, rtol=1e-12, atol=1e-12)


def test_a_calibrated_table_channel_and_no_allocation_per_row() -> None:
    data = PROFILE.model_dump(exclude_none=True)
    ch = next(c for c in data["channels"] if c["name"] == "oil_temp")
    ch["scaling"] = {"kind": "table", "points": [[-10.0, -100.0], [0.0, 0.0], [10.0, 120.0]],
                     "units": "degC"}  # fmt: skip
    profile = type(PROFILE).model_validate(data)
    inputs = profile.inputs
    i = [c.name for c in inputs].index("oil_temp")
    scaler = ChannelScaler(inputs)
    cal = Calibration(profile.rig.id, "", {"oil_temp": ChannelCal(0.5, 1.01)})
    scaler.set_correction(*cal.corrections(profile))
    raw = np.array([eng_to_counts(c, 0.5 * (c.valid_min + c.valid_max)) for c in inputs])
    eng = np.zeros(len(inputs))
    scaler.scale(raw, eng)
    declared = counts_to_eng(inputs[i], raw[i])
    assert eng[i] == pytest.approx((declared - 0.5) / 1.01)
    tracemalloc.start()
    for _ in range(100):
        scaler.scale(raw, eng)
    snap = tracemalloc.take_snapshot()
    tracemalloc.stop()
    scaling_py = [
        s for s in snap.statistics("filename") if s.traceback[0].filename.endswith("scaling.py")
    ]
    assert sum(s.size for s in scaling_py) < 1024


def test_files_are_written_atomically_and_the_store_keeps_the_order(tmp_path: Path) -> None:
    store = CalibrationStore(tmp_path, PROFILE)
    assert store.current() is None
    first = store.save(_cal(1000.0, 1.0))
    store.push(first)
    second = store.save(_cal(2000.0, 1.0))  # same stamp: a new name, never over the first
    assert second != first and first.exists()
    store.push(second)
    assert store.applied() == [second.name, first.name]
    cal, path = store.current()  # type: ignore[misc]
    assert path == second and cal.channels["p_cap_1"].offset == 2000.0
    assert store.pop() == [first.name]
    assert not list(tmp_path.rglob("*.tmp"))  # no temporary left behind
    target = tmp_path / "x.toml"
    target.write_text("old")

    with pytest.raises(TypeError):
        write_atomic(target, 42)  # type: ignore[arg-type]  # fails mid-write
    assert target.read_text() == "old" and not list(tmp_path.glob(".x.toml.*"))
    with pytest.raises(CalibrationError, match="cannot read"):
        load(tmp_path / "missing.toml", PROFILE)
    assert math.isfinite(cal.channels["p_cap_1"].gain)
