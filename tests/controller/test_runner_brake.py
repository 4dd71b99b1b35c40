"""The brake after a last segment that ends moving (`ExperimentRunner.plan_brake`): the
reference leaves the segment's last reference at its velocity and comes to rest at each joint's
acceleration limit, never stepping; the final hold is its rest pose; the compiled twin does the
same cycle for cycle; a last segment at rest or open loop gets none; a second run brakes the
same way."""

from __future__ import annotations

import numpy as np
import pytest

from controller.compiled.runner import compile_runner
from controller.experiment import Experiment
from controller.feedback import Feedback
from controller.runner import ExperimentRunner
from tests.controller.test_compiled import _drive

DT = 1e-3
HOME = [40.0, 30.0]


def _sine_exp(duration: float, last: dict | None = None) -> Experiment:
    segs = [{"name": "sine", "duration_s": duration, "controller": {"kind": "pid"},
             "trajectory": {"kind": "sine", "amplitude_deg": [3.0, 2.0],
                            "frequency_hz": [0.5, 0.8]}}]  # fmt: skip
    if last is not None:
        segs.append(last)
    return Experiment.from_dict({"name": "b", "home_deg": HOME, "segments": segs})


def _run(r: ExperimentRunner) -> tuple[list[str], np.ndarray]:
    """Steps `r` with feedback that follows the reference exactly; (phase names, refs)."""
    fb = Feedback(2)
    fb.q[:] = np.radians(HOME)
    fb.p_cap[:], fb.p_rod[:] = 3.4e6, 3.0e6
    r.enable(fb)
    ref, volts = np.zeros(2), np.zeros(2)
    names: list[str] = []
    refs = []
    after = 10  # cycles of the final hold kept
    for _ in range(20000):
        running = r.step(fb, ref, volts)
        if not names or names[-1] != r.segment_name:
            names.append(r.segment_name)
        refs.append(ref.copy())
        fb.q[:] = ref
        if not running:
            after -= 1
            if not after:
                break
    return names, np.array(refs)


def test_a_last_segment_ending_moving_brakes_at_the_acceleration_limit(rig2: tuple) -> None:
    gains, limits = rig2
    exp = _sine_exp(1.1)  # ends at speed on both joints
    r = ExperimentRunner(exp, gains, limits, DT)
    names, refs = _run(r)
    assert names == ["sine", "brake", "finished"]
    a = np.array([lim.max_acceleration for lim in limits])
    n_sine = round(1.1 / DT)
    v = np.diff(refs, axis=0) / DT
    v_end = v[n_sine - 2]  # the sine's last step
    assert np.all(np.abs(v_end) > np.radians(5.0))  # it was moving
    # from the sine's last steps on, no step in the reference's velocity: at most a·DT per
    # cycle (+ rounding); the sine's own start is a step from rest, the plan's business
    dv = np.abs(np.diff(v[n_sine - 3 :], axis=0))
    assert np.all(dv <= a * DT * 1.001 + 1e-9), dv.max(axis=0)
    # it comes to rest where the stop from the last reference at a ends, and holds there
    q_last = refs[n_sine - 1]
    w = 2 * np.pi * np.array([0.5, 0.8])
    v_last = np.radians([3.0, 2.0]) * w * np.cos(w * (1.1 - DT))
    rest = q_last + np.sign(v_last) * v_last**2 / (2 * a)
    np.testing.assert_allclose(refs[-1], rest, atol=1e-9)
    assert np.all(np.abs(v[-5:]) < 1e-9)
    assert r.total_duration == pytest.approx(1.1 + np.max(np.abs(v_last) / a), abs=2 * DT)


def test_no_brake_after_a_segment_at_rest_or_open_loop(rig2: tuple) -> None:
    gains, limits = rig2
    rest = {"name": "rest", "duration_s": 0.3, "controller": {"kind": "pid"},
            "trajectory": {"kind": "hold"}}  # fmt: skip
    names, _ = _run(ExperimentRunner(_sine_exp(1.1, rest), gains, limits, DT))
    assert "brake" not in names
    sine = {"name": "valve", "duration_s": 0.3,
            "controller": {"kind": "valve_sine", "amplitude_v": [0.05, 0.05],
                           "frequency_hz": [2.0, 2.0]},
            "trajectory": {"kind": "hold"}}  # fmt: skip
    names, _ = _run(ExperimentRunner(_sine_exp(1.1, sine), gains, limits, DT, check=False))
    assert "brake" not in names


def test_a_second_run_brakes_the_same_way(rig2: tuple) -> None:
    gains, limits = rig2
    r = ExperimentRunner(_sine_exp(1.1), gains, limits, DT)
    first = _run(r)[1][-1]
    r.disable()
    second = _run(r)[1][-1]
    np.testing.assert_array_equal(first, second)


def test_the_compiled_twin_brakes_as_python_does(rig2: tuple) -> None:
    gains, limits = rig2
    exp = _sine_exp(1.1)

    def runner() -> ExperimentRunner:
        return ExperimentRunner(exp, gains, limits, DT, check=False)

    twin = compile_runner(runner())
    assert twin is not None
    _drive(runner(), twin, 2, 1600, seed=2)
    py = twin.py
    assert isinstance(py, ExperimentRunner) and py.finished
    assert py._brake.duration > 0.01  # the brake ran on both (v/a: 15 ms on joint 1)


def test_the_check_refuses_a_brake_that_would_stop_beyond_a_position_limit(rig2: tuple) -> None:
    """The limit check sees the brake's rest pose: a sine ending at speed close to a position
    limit is refused, naming the brake; the same sine with room to stop is not."""
    import dataclasses

    from controller.checks import check_experiment

    _, limits = rig2
    exp = _sine_exp(1.1)
    q, qd, _ = exp.segments[0].trajectory.sample(np.array([1.1]))
    stop = q[0] + np.sign(qd[0]) * qd[0] ** 2 / (
        2 * np.array([lim.max_acceleration for lim in limits])
    )
    assert check_experiment(exp, limits) == []
    # joint 1 ends moving down (−): a lower limit between the sine's end and its stop
    assert qd[0, 0] < 0
    tight = list(limits)
    tight[0] = dataclasses.replace(limits[0], position_min=float(0.5 * (q[0, 0] + stop[0])))
    assert q[0, 0] > tight[0].position_min > stop[0]
    bad = [v for v in check_experiment(exp, tight) if "brake" in v.segment_name]
    assert len(bad) == 1 and bad[0].joint == 0 and bad[0].limit == "position_min"
    assert bad[0].segment == 0 and bad[0].time == pytest.approx(1.1)
    assert bad[0].value == pytest.approx(stop[0])


def test_a_brake_that_stops_exactly_on_a_position_limit_is_inside(rig2: tuple) -> None:
    """The position window is closed, for the brake's rest pose as for any reference: a limit
    moved onto the rest pose the check itself reports (to the last bit) passes, on either
    side; one float further in, it is refused."""
    import dataclasses

    from controller.checks import brake_violations

    _, limits = rig2
    exp = _sine_exp(1.1)
    q, qd, _ = exp.segments[0].trajectory.sample(np.array([1.1]))
    for j, lim in enumerate(limits):
        side = "position_max" if qd[0, j] > 0 else "position_min"
        between = q[0, j] + np.sign(qd[0, j]) * qd[0, j] ** 2 / (4 * lim.max_acceleration)
        tight = list(limits)
        tight[j] = dataclasses.replace(lim, **{side: float(between)})
        (v,) = brake_violations(exp, tight)  # the rest pose, as the check computes it
        assert v.joint == j and v.limit == side
        tight[j] = dataclasses.replace(lim, **{side: v.value})
        assert brake_violations(exp, tight) == [], (j, side)
        inward = np.nextafter(v.value, -np.inf if side == "position_max" else np.inf)
        tight[j] = dataclasses.replace(lim, **{side: float(inward)})
        assert [(w.joint, w.limit) for w in brake_violations(exp, tight)] == [(j, side)]
