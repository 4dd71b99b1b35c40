"""The shipped Foxglove layout is the one the code builds, and every plotted path names a field
the bridge's schemas define."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daq.bridge.channels import TOPIC_ESTIMATES, ChannelSet
from daq.profile import load_profile
from daq.profile.plant import plant_params
from daq.sample_layout import SampleLayout

pytest.importorskip("foxglove")
from daq.bridge.layout import layout_json

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "hw_profiles" / "sim-2dof.toml"


def _values(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["value"]] if isinstance(node.get("value"), str) else []
        return own + [v for x in node.values() for v in _values(x)]
    if isinstance(node, list):
        return [v for x in node for v in _values(x)]
    return []


def _find(node: Any, key: str) -> list[Any]:
    if isinstance(node, dict):
        own = [node[key]] if key in node else []
        return own + [v for x in node.values() for v in _find(x, key)]
    if isinstance(node, list):
        return [v for x in node for v in _find(x, key)]
    return []


def test_stock_panels_read_topics_the_bridge_serves() -> None:
    from daq.bridge.arm3d import ArmModel
    from daq.bridge.standard import TOPIC_DIAGNOSTICS, TOPIC_LOG, TOPIC_SCENE, TOPIC_TF

    shipped = json.loads((ROOT / "docs" / "foxglove-layout.json").read_text())
    profile = load_profile(PROFILE)
    cs = ChannelSet(SampleLayout.from_profile(profile).to_dict(), {})
    served = {*cs.schemas(), TOPIC_ESTIMATES, TOPIC_LOG, TOPIC_DIAGNOSTICS, TOPIC_TF, TOPIC_SCENE}
    panels = {p["panelType"]: p for p in _find(shipped, "content") if p.get("type") == "panel"}
    assert {"ThreeDee", "Log", "DiagnosticsSummary"} <= set(panels)
    assert panels["Log"]["config"]["topicToRender"] == TOPIC_LOG
    assert panels["DiagnosticsSummary"]["config"]["topicToRender"] == TOPIC_DIAGNOSTICS
    assert set(panels["ThreeDee"]["config"]["topics"]) == {TOPIC_SCENE}
    arm = ArmModel.from_profile(profile)
    assert arm is not None and panels["ThreeDee"]["config"]["followTf"] in arm.frames
    topics = [*_find(shipped, "topicToRender"), *_find(shipped, "topicPath")]
    topics += [t for d in _find(shipped, "topics") for t in d]
    assert len(topics) >= 5 and set(topics) <= served, set(topics) - served


def test_shipped_layout_is_current_and_every_path_exists() -> None:
    shipped = json.loads((ROOT / "docs" / "foxglove-layout.json").read_text())
    assert shipped == json.loads(layout_json(str(PROFILE)))
    profile = load_profile(PROFILE)
    cs = ChannelSet(
        SampleLayout.from_profile(profile).to_dict(), {c.name: c.role for c in profile.channels}
    )
    params = plant_params(profile)
    schemas = {
        **cs.schemas(),
        TOPIC_ESTIMATES: cs.estimate_schema([*params.mech_names(), *params.fluid_names()]),
    }
    paths = _values(shipped)
    assert len(paths) > 40
    for path in paths:
        topic, *fields = path.split(".")
        node = schemas[topic]
        for f in fields:
            node = node["properties"][f]
    # Every field of every row channel is shown somewhere (pistons and oil temperature too).
    for topic in ("/rig/joints", "/rig/pressures", "/rig/valves", "/rig/sensors"):
        for group, node in schemas[topic]["properties"].items():
            for f in node.get("properties", {}):
                assert f"{topic}.{group}.{f}" in paths, f"{topic}.{group}.{f} is in no panel"
    # Parameter convergence with bands: θ, θ − 3σ, θ + 3σ of every parameter.
    assert {p for p in paths if p.startswith(TOPIC_ESTIMATES + ".low_3sigma.")} == {
        f"{TOPIC_ESTIMATES}.low_3sigma.{k}"
        for k in schemas[TOPIC_ESTIMATES]["properties"]["theta"]["properties"]
    }
