"""Requests refused up front, through the command handler on the simulated rig: absurd gains
(`set_gains`, an experiment's `pid`), NaN/inf anywhere in an experiment, valve-sine values
outside the valve's range. Each refusal has its exact code and message (field, value, allowed
range), and the rig is left as it was (issue 16, items 4 and 5)."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

pytest.importorskip("controller.runner")

from daq.loop import Loop
from daq.loop.states import State
from daq.service.control_api import CommandError, ControlApi

# sim-2dof.toml: j1 soft limits 22–58° (36°), j2 0–48° (48°); both valve_max_v = 6 V,
# 60°/s, 600°/s², 1 kHz. The bounds below are worked out by hand from those numbers
# (FULL_SCALE_MULTIPLE = 100: a gain × full-scale input ≤ 600 V), not by the code under test.
P_MAX_J1 = 600.0 / math.radians(36.0)  # 954.93 V/rad
P_MAX_J2 = 600.0 / math.radians(48.0)  # 716.197 V/rad


def refusal(api: ControlApi, cmd: str, args: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(CommandError) as exc:
        api.handle(cmd, args, None)
    return exc.value.code, exc.value.message


@pytest.mark.parametrize(
    ("joint", "gains", "message"),
    [
        (
            "j1",
            {"p": 1e19},
            f"set_gains: joint j1: gains.p = 1e+19 is out of range [0, {P_MAX_J1:.6g}] V/rad "
            "(a full-scale error of 36° may demand at most 100 × valve_max_v = 600 V)",
        ),
        (
            "j2",
            {"p": 2.0, "i": 1e300},
            f"set_gains: joint j2: gains.i = 1e+300 is out of range [0, {P_MAX_J2:.6g}] "
            "V/(rad·s) (a full-scale error of 48° held 1 s may demand at most "
            "100 × valve_max_v = 600 V)",
        ),
        (
            "j1",
            {"p": -1.0},
            f"set_gains: joint j1: gains.p = -1.0 is out of range [0, {P_MAX_J1:.6g}] V/rad "
            "(a full-scale error of 36° may demand at most 100 × valve_max_v = 600 V)",
        ),
        (
            "j1",
            {"bias": 6.5},
            "set_gains: joint j1: gains.bias = 6.5 is out of range [-6, 6] V "
            "(within the valve's range)",
        ),
        (
            "j2",
            {"d_filter_hz": 900.0},
            "set_gains: joint j2: gains.d_filter_hz = 900.0 is out of range [0, 500] Hz "
            "(0 = unfiltered; at most the Nyquist frequency 500 Hz)",
        ),
    ],
)
def test_set_gains_refuses_values_outside_the_documented_ranges(
    rig: tuple[Loop, ControlApi], joint: str, gains: dict[str, float], message: str
) -> None:
    _, api = rig
    before = api.handle("describe", {}, None)["gains"]
    assert refusal(api, "set_gains", {"joint": joint, "gains": gains}) == ("bad_args", message)
    assert api.handle("describe", {}, None)["gains"] == before  # nothing changed


def test_set_gains_accepts_the_bound_itself_and_refuses_just_above(
    rig: tuple[Loop, ControlApi],
) -> None:
    _, api = rig
    out = api.handle("set_gains", {"joint": "j1", "gains": {"p": P_MAX_J1 * (1 - 1e-9)}}, None)
    assert out["gains"]["p"] == pytest.approx(P_MAX_J1)
    code, _ = refusal(api, "set_gains", {"joint": "j1", "gains": {"p": P_MAX_J1 * (1 + 1e-9)}})
    assert code == "bad_args"


HOLD = {"kind": "hold"}


def _experiment(controller: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "name": "x",
        "home_deg": [40.0, 30.0],
        "segments": [
            {"name": "seg", "duration_s": 2.0, "trajectory": HOLD, "controller": controller}
        ],
        **top,
    }


# The centring gain bounds the sane sine's motion without plant parameters (controller.checks).
VALVE_SINE = {
    "kind": "valve_sine",
    "amplitude_v": [0.2, 0.0],
    "frequency_hz": [1.0, 1.0],
    "centering_v_per_rad": [2.0, 2.0],
}


def _valve_sine(**changes: Any) -> dict[str, Any]:
    c = copy.deepcopy(VALVE_SINE)
    c.update(changes)
    return _experiment(c)


P_MSG_J1 = (
    f"is out of range [0, {P_MAX_J1:.6g}] V/rad "
    "(a full-scale error of 36° may demand at most 100 × valve_max_v = 600 V)"
)
P_MSG_J2 = (
    f"is out of range [0, {P_MAX_J2:.6g}] V/rad "
    "(a full-scale error of 48° may demand at most 100 × valve_max_v = 600 V)"
)


@pytest.mark.parametrize(
    ("experiment", "message"),
    [
        (
            _experiment({"kind": "pid", "pid": {"p": 1e6}}),
            f"run: experiment: segment 0 ('seg'): pid.p = 1000000.0 {P_MSG_J1} for joint index 0",
        ),
        (
            _experiment({"kind": "pid"}, pid=[{"p": 1.5}, {"p": 1e6}]),
            f"run: experiment: experiment 'x': pid[1].p = 1000000.0 {P_MSG_J2} for joint index 1",
        ),
        (
            _valve_sine(frequency_hz=[float("nan"), 1.0]),
            "run: experiment: segments[0].controller.frequency_hz[0] = nan is not a finite "
            "number (NaN and ±inf refused)",
        ),
        (
            _valve_sine(amplitude_v=[float("inf"), 0.0]),
            "run: experiment: segments[0].controller.amplitude_v[0] = inf is not a finite "
            "number (NaN and ±inf refused)",
        ),
        (
            {**_valve_sine(), "home_deg": [40.0, -math.inf]},
            "run: experiment: home_deg[1] = -inf is not a finite number (NaN and ±inf refused)",
        ),
        (
            _valve_sine(frequency_hz=[600.0, 1.0]),
            "run: experiment: segment 0 ('seg'): controller 'valve_sine': frequency_hz[0] = "
            "600.0 is out of range [0, 500] Hz (at most the Nyquist frequency 500 Hz)",
        ),
        (
            _valve_sine(amplitude_v=[7.0, 0.0]),
            "run: experiment: segment 0 ('seg'): controller 'valve_sine': amplitude_v[0] = 7.0 "
            "is out of range [-6, 6] V (within valve_max_v)",
        ),
        (
            _valve_sine(offset_v=[5.9, 0.0]),
            "run: experiment: segment 0 ('seg'): controller 'valve_sine': |amplitude_v[0]| + "
            "|offset_v[0]| = 6.1 V exceeds valve_max_v = 6 V (the sine must fit in the valve's "
            "range)",
        ),
        (
            _valve_sine(frequency_hz=[1.0]),
            "run: experiment: segment 0 ('seg'): controller 'valve_sine': frequency_hz must be "
            "a list of 2 numbers (one per joint), got [1.0]",
        ),
    ],
)
def test_run_refuses_absurd_content_before_anything_moves(
    rig: tuple[Loop, ControlApi], experiment: dict[str, Any], message: str
) -> None:
    loop, api = rig
    assert api.handle("arm", {}, None)["state"] == "ARMED"
    assert refusal(api, "run", {"experiment": experiment}) == ("rejected", message)
    assert loop.state == State.ARMED and loop.fault is None
    # The same experiment with sane numbers runs: the refusal was about the value alone.
    sane = _valve_sine()
    assert api.handle("run", {"experiment": sane}, None)["state"] == "RUNNING"


def test_a_monitor_estop_latches_and_names_who_pressed_it(rig: tuple[Loop, ControlApi]) -> None:
    """The e-stop decision end to end (docs/protocol.md, "Security"): a monitor's estop stops
    the rig like anyone's, and the fault says who and why, with the documented fields."""
    from daq.commands import ClientIdentity

    loop, api = rig
    api.handle("arm", {}, None)
    view = ClientIdentity("view", "monitor", True)
    out = api.handle("estop", {"reason": "smoke from valve 2"}, view)
    assert out["state"] == "ESTOP" and loop.state == State.ESTOP
    fault = api.handle("status", {}, None)["fault"]
    assert fault == {
        "code": 11,
        "name": "ESTOP",
        "where": "by view: smoke from valve 2",
        "value": 0,
        "limit": 0,
        "seq": out["seq"],
        "t": fault["t"],
        "message": "estop: by view: smoke from valve 2",
    }
    assert fault["t"] == pytest.approx(out["seq"] * loop.period)
