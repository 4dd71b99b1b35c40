"""Rows and estimates as Foxglove JSON messages: display units, NaN as null, σ bands."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from daq.bridge.channels import TOPIC_JOINTS, TOPIC_PRESSURES, TOPIC_STATE, ChannelSet, dumps
from daq.profile import load_profile
from daq.sample_layout import SampleLayout

PROFILE = Path(__file__).resolve().parents[2] / "hw_profiles" / "sim-2dof.toml"


def test_row_in_display_units_with_nan_as_null() -> None:
    profile = load_profile(PROFILE)
    cols = SampleLayout.from_profile(profile).to_dict()
    cs = ChannelSet(cols, {c.name: c.role for c in profile.channels})
    names = [c["name"] for c in cols]
    row = [0.0] * len(cols)
    row[names.index("seq")], row[names.index("t")], row[names.index("state")] = 12, 0.012, 3
    row[names.index("fault")] = 4
    row[names.index("eng.q_1")] = math.pi / 4
    row[names.index("ref.j1")] = math.nan
    row[names.index("eng.p_cap_1")] = 6.5e6
    msgs = cs.row_messages(row)
    text = {topic: json.loads(dumps(m)) for topic, m in msgs.items()}  # strict JSON: no NaN
    joints = text[TOPIC_JOINTS]
    assert joints["seq"] == 12 and joints["position_deg"]["j1"] == pytest.approx(45.0)
    assert joints["reference_deg"]["j1"] is None and joints["error_deg"]["j1"] is None
    assert text[TOPIC_PRESSURES]["bar"]["p_cap_1_bar"] == pytest.approx(65.0)
    assert text[TOPIC_STATE]["state"] == "FAULT" and text[TOPIC_STATE]["fault"] == "PRESSURE"
    assert b"NaN" not in dumps(msgs[TOPIC_JOINTS])


def test_estimate_sigma_from_the_covariance_and_bands() -> None:
    msg = ChannelSet.estimate_message({
        "seq": 3, "t": 1.5, "data_seq": 1500, "names": ["M1", "1/b", "Cf++1", "dFs+1"],
        "theta": [4.0, 4e-9, 6e-7, 98.6], "sigma_pct": [5.0, 10.0, math.nan, math.nan],
        "cov": [[0.04, 0, 0, 0], [0, 1.6e-19, 0, 0], [0, 0, -1.0, 0], [0, 0, 0, 1e-20]],
    })  # fmt: skip
    assert set(msg["theta"]) == {"M1", "inv_b", "Cfpp1", "dFsp1"}
    assert msg["sigma"]["M1"] == pytest.approx(0.2)
    assert msg["low_3sigma"]["M1"] == pytest.approx(3.4) and msg["high_3sigma"][
        "M1"
    ] == pytest.approx(4.6)
    assert msg["sigma"]["inv_b"] == pytest.approx(4e-10)
    assert msg["sigma"]["Cfpp1"] is None  # negative variance, NaN %: no σ rather than a wrong one
    # Held at the batch's value (estimator.structure): a tiny variance, but not measured.
    assert msg["sigma"]["dFsp1"] is None and msg["low_3sigma"]["dFsp1"] is None
    assert msg["theta"]["dFsp1"] == pytest.approx(98.6)
    json.loads(dumps(msg))


def test_status_schema_declares_the_status_fields() -> None:
    profile = load_profile(PROFILE)
    cs = ChannelSet(SampleLayout.from_profile(profile).to_dict(), {})
    props = cs.schemas()["/rig/status"]["properties"]
    assert {"state", "fault", "seq", "t", "timing", "recorder", "telemetry", "runner"} <= set(props)
    assert "segment_name" in props["runner"]["properties"]
    assert "p99" in props["timing"]["properties"]["wake_latency_us"]["properties"]
