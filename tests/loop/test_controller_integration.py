"""The real controller (controller.runner) in the loop on the simulated rig, through the command
handler: hold when armed, run an experiment to its end, refuse one outside the limits, change
gains bumplessly. Skipped until the controller package is on this branch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("controller.runner")

from daq.loop import Loop
from daq.loop.states import State
from daq.service.control_api import CommandError, ControlApi
from tests.conditions import wait_until


def _experiment(amplitude_deg: float, seconds: float = 1.0) -> dict[str, Any]:
    return {
        "name": "small-sine",
        "home_deg": [40.0, 30.0],
        "pid": [{"p": 1.5, "ff1": 0.25}, {"p": 1.5, "ff1": 0.16}],
        "segments": [
            {
                "name": "sine",
                "duration_s": seconds,
                "trajectory": {
                    "kind": "sine",
                    "amplitude_deg": [amplitude_deg, 0.0],
                    "frequency_hz": [1.0, 1.0],
                },
                "controller": {"kind": "pid"},
            }
        ],
    }


def _until(cond: Any) -> None:
    assert wait_until(cond), "timed out"


def test_armed_holds_then_an_experiment_runs_to_its_end(rig: tuple[Loop, ControlApi]) -> None:
    loop, api = rig
    armed = api.handle("arm", {}, None)
    start = armed["seq"]
    reply = api.handle("run", {"experiment": _experiment(5.0, 2.0)}, None)
    assert reply["state"] == "RUNNING" and reply["experiment"] == "small-sine"
    assert reply["duration_s"] >= 2.0
    _until(lambda: any(e["kind"] == "experiment_done" for e in list(loop.events)))
    _until(lambda: loop.state == State.ARMED)
    assert loop.fault is None
    end = loop.seq
    assert end - start < loop.ring.capacity
    rows = loop.ring.data[np.arange(start, end) & loop.ring.mask]
    lay = loop.layout
    q1 = np.degrees(rows[:, lay.index("eng.q_1")])
    ref1 = np.degrees(rows[:, lay.index("ref.j1")])
    running = rows[:, lay.index("state")] == State.RUNNING
    assert running.sum() >= 2000
    assert np.ptp(ref1[running]) > 9.0  # the ±5° sine was commanded …
    assert np.ptp(q1[running]) > 7.0  # … and followed
    assert np.max(np.abs(q1[running] - ref1[running])) < 3.0


def test_an_experiment_beyond_the_soft_limits_is_rejected(rig: tuple[Loop, ControlApi]) -> None:
    loop, api = rig
    api.handle("arm", {}, None)
    with pytest.raises(CommandError) as exc:
        api.handle("run", {"experiment": _experiment(25.0)}, None)  # 40 ± 25° > 58°
    assert exc.value.code == "rejected" and "limit" in exc.value.message
    assert loop.state == State.ARMED
    with pytest.raises(CommandError) as exc:
        api.handle("run", {"experiment": {"name": "x", "segments": []}}, None)
    assert exc.value.code == "rejected"


def test_set_gains(rig: tuple[Loop, ControlApi]) -> None:
    loop, api = rig
    api.handle("arm", {}, None)
    out = api.handle("set_gains", {"joint": "j2", "gains": {"p": 3.0, "d": 0.01}}, None)
    assert out["joint"] == "j2" and out["gains"]["p"] == 3.0 and out["gains"]["d"] == 0.01
    assert out["state"] == "ARMED" and loop.active is loop.hold
    assert api.handle("describe", {}, None)["gains"][1]["p"] == 3.0
    with pytest.raises(CommandError) as exc:
        api.handle("set_gains", {"joint": "j9", "gains": {"p": 1.0}}, None)
    assert exc.value.code == "bad_args" and "j9" in exc.value.message
    with pytest.raises(CommandError) as exc:
        api.handle("set_gains", {"joint": "j1", "gains": {"p": -1.0}}, None)
    assert exc.value.code == "bad_args"
    assert loop.fault is None


def test_an_amplitude_phase_compensated_sine_runs_in_the_loop_and_records_its_command(
    rig: tuple[Loop, ControlApi],
) -> None:
    """The loop takes a compensated segment (on its Python path: no compiled form); the
    motion gets the desired ±5° that the plain PID with velocity feed-forward overshoots, and
    the recorded reference is the adapted command, not the desired sine."""
    loop, api = rig
    api.handle("arm", {}, None)
    amp: dict[bool, tuple[float, float]] = {}
    for compensated in (False, True):
        d = _experiment(5.0, 8.0)
        if compensated:
            d["segments"][0]["compensation"] = {"kind": "amplitude_phase", "gain": 0.7}
        done = sum(e["kind"] == "experiment_done" for e in list(loop.events))
        start = loop.seq
        api.handle("run", {"experiment": d}, None)
        _until(lambda d0=done: sum(e["kind"] == "experiment_done" for e in list(loop.events)) > d0)
        _until(lambda: loop.state == State.ARMED)
        assert loop.fault is None
        rows = loop.ring.data[np.arange(start, loop.seq) & loop.ring.mask]
        lay = loop.layout
        running = rows[:, lay.index("state")] == State.RUNNING
        last = slice(-2000, None)  # the last two periods
        ref1 = np.degrees(rows[running, lay.index("ref.j1")])[last]
        q1 = np.degrees(rows[running, lay.index("eng.q_1")])[last]
        amp[compensated] = (float(np.ptp(ref1) / 2), float(np.ptp(q1) / 2))
    (ref_plain, q_plain), (ref_comp, q_comp) = amp[False], amp[True]
    assert abs(ref_plain - 5.0) < 0.01 and abs(q_plain - 5.0) > 0.15  # ff1 overshoots
    assert abs(q_comp - 5.0) < abs(q_plain - 5.0) / 3  # the motion has the desired amplitude
    assert abs(ref_comp - 5.0) > 0.1  # because the recorded command is not the desired
