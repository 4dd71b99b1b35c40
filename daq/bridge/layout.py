"""The Foxglove layout shipped as `docs/foxglove-layout.json`, built with foxglove-sdk's
`foxglove.layouts` (layout format version 1) from a profile's joints and channels:

- positions vs references per joint (deg), tracking errors;
- chamber pressures (bar);
- valve commands (V) and spool positions; the other sensors (pistons, oil temperature), one
  plot per unit;
- parameter convergence: each estimated parameter with its θ ± 3σ band (`/estimator/estimates`);
- loop state transitions and timing; the raw status and events;
- stock panels on standard messages: the arm in 3-D (`/tf`, `/rig/scene`), the log of events
  and faults (`/rig/log`, foxglove.Log) and the diagnostics (`/diagnostics`).

    python -m daq.bridge.layout hw_profiles/sim-2dof.toml > docs/foxglove-layout.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from daq.bridge.arm3d import BASE, arm_from_profile
from daq.bridge.channels import (
    TOPIC_ESTIMATES,
    TOPIC_EVENTS,
    TOPIC_JOINTS,
    TOPIC_PRESSURES,
    TOPIC_SENSORS,
    TOPIC_STATE,
    TOPIC_STATUS,
    TOPIC_TIMING,
    TOPIC_VALVES,
    ChannelSet,
    field_name,
)
from daq.bridge.standard import TOPIC_DIAGNOSTICS, TOPIC_LOG, TOPIC_SCENE


def _plot(fl: Any, title: str, series: list[tuple[str, str]], **style: Any) -> Any:
    return fl.PlotPanel(
        title=title,
        config=fl.PlotConfig(
            paths=[fl.PlotSeries(value=v, label=label, **style) for v, label in series],
            show_legend=True,
        ),
    )


def build_layout(cs: ChannelSet, parameters: Sequence[str], arm: bool = True) -> Any:
    import foxglove.layouts as fl

    schemas = cs.schemas()
    fields = lambda topic, group: list(schemas[topic]["properties"][group]["properties"])  # noqa: E731
    joints = [
        _plot(fl, f"joint {j}: position vs reference (deg)", [
            (f"{TOPIC_JOINTS}.position_deg.{j}", f"{j} position"),
            (f"{TOPIC_JOINTS}.reference_deg.{j}", f"{j} reference"),
        ])
        for j in fields(TOPIC_JOINTS, "position_deg")
    ]  # fmt: skip
    errors = _plot(fl, "tracking error (deg)", [
        (f"{TOPIC_JOINTS}.error_deg.{j}", j) for j in fields(TOPIC_JOINTS, "error_deg")
    ])  # fmt: skip
    pressures = _plot(fl, "pressures (bar)", [
        (f"{TOPIC_PRESSURES}.bar.{p}", p) for p in fields(TOPIC_PRESSURES, "bar")
    ])  # fmt: skip
    valves = _plot(fl, "valve commands (V) and spools", [
        *((f"{TOPIC_VALVES}.command.{v}", v) for v in fields(TOPIC_VALVES, "command")),
        *((f"{TOPIC_VALVES}.spool.{s}", s) for s in fields(TOPIC_VALVES, "spool")),
    ])  # fmt: skip
    by_unit: dict[str, list[str]] = {}
    for name in fields(TOPIC_SENSORS, "values"):
        by_unit.setdefault(name.rpartition("_")[2], []).append(name)
    sensors = [
        _plot(fl, f"sensors ({unit})", [(f"{TOPIC_SENSORS}.values.{n}", n) for n in names])
        for unit, names in by_unit.items()
    ]
    convergence = [
        _plot(fl, f"{name}: estimate ± 3σ", [
            (f"{TOPIC_ESTIMATES}.theta.{field_name(name)}", "θ"),
            (f"{TOPIC_ESTIMATES}.low_3sigma.{field_name(name)}", "θ − 3σ"),
            (f"{TOPIC_ESTIMATES}.high_3sigma.{field_name(name)}", "θ + 3σ"),
        ])
        for name in parameters
    ]  # fmt: skip
    state = fl.StateTransitionsPanel(
        title="loop state",
        config=fl.StateTransitionsConfig(
            paths=[
                fl.StateTransitionsSeries(value=f"{TOPIC_STATE}.state", label="state"),
                fl.StateTransitionsSeries(value=f"{TOPIC_STATE}.fault", label="fault"),
            ]
        ),
    )
    timing = _plot(fl, "loop timing (µs)", [
        (f"{TOPIC_TIMING}.wake_latency_us", "wake latency"),
        (f"{TOPIC_TIMING}.compute_time_us", "compute time"),
    ])  # fmt: skip

    def column(panels: list[Any]) -> Any:
        return fl.SplitContainer(
            direction="column", items=[fl.SplitItem(content=p) for p in panels]
        )

    tabs = [
        fl.TabItem(
            title="rig",
            content=fl.SplitContainer(
                direction="row",
                items=[
                    fl.SplitItem(proportion=2, content=column([*joints, errors])),
                    fl.SplitItem(
                        proportion=2, content=column([pressures, valves, *sensors])
                    ),
                    fl.SplitItem(proportion=1, content=column([state, timing])),
                ],
            ),
        ),
        fl.TabItem(
            title="parameters",
            content=fl.SplitContainer(
                direction="row",
                items=[
                    fl.SplitItem(content=column(list(convergence[k::3]))) for k in range(3)
                ],
            )
            if convergence
            else fl.RawMessagesPanel(config=fl.RawMessagesConfig(topic_path=TOPIC_ESTIMATES)),
        ),
        fl.TabItem(
            title="status & events",
            content=fl.SplitContainer(
                direction="row",
                items=[
                    fl.SplitItem(content=fl.RawMessagesPanel(
                        config=fl.RawMessagesConfig(topic_path=TOPIC_STATUS))),
                    fl.SplitItem(content=fl.RawMessagesPanel(
                        config=fl.RawMessagesConfig(topic_path=TOPIC_EVENTS))),
                ],
            ),
        ),
    ]  # fmt: skip
    station = [
        fl.SplitItem(proportion=2, content=fl.LogPanel(
            title="events and faults", config=fl.LogConfig(topic_to_render=TOPIC_LOG))),
        fl.SplitItem(proportion=2, content=fl.DiagnosticsSummaryPanel(
            title="diagnostics", config=fl.DiagnosticsSummaryConfig(
                topic_to_render=TOPIC_DIAGNOSTICS, sort_by_level=True))),
    ]  # fmt: skip
    if arm:
        three_d = fl.ThreeDeePanel(
            title="arm",
            config=fl.ThreeDeeConfig(
                follow_tf=BASE,
                topics={TOPIC_SCENE: fl.BaseRendererSceneUpdateTopicSettings(visible=True)},
            ),
        )
        station.insert(0, fl.SplitItem(proportion=3, content=three_d))
    tabs.insert(1, fl.TabItem(
        title="arm, log, diagnostics",
        content=fl.SplitContainer(direction="row", items=station),
    ))  # fmt: skip
    return fl.Layout(content=fl.TabContainer(tabs=tabs))


def layout_json(profile_path: str) -> str:
    """The layout for a profile (its columns, and the reference model's parameter names)."""
    from daq.profile import load_profile
    from daq.sample_layout import SampleLayout

    profile = load_profile(profile_path)
    columns = SampleLayout.from_profile(profile).to_dict()
    roles = {c.name: c.role for c in profile.channels}
    names: list[str] = []
    if profile.plant is not None:
        from daq.profile.plant import plant_params

        params = plant_params(profile)
        names = [*params.mech_names(), *params.fluid_names()]
    arm = arm_from_profile(profile) is not None
    return build_layout(ChannelSet(columns, roles), names, arm).to_json()


if __name__ == "__main__":
    text = layout_json(sys.argv[1] if len(sys.argv) > 1 else "hw_profiles/sim-2dof.toml")
    print(json.dumps(json.loads(text), indent=1, ensure_ascii=False))
