"""The runners' contract with the loop: bumpless enable, progress, finish, no allocation."""

from __future__ import annotations

import tomllib
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from controller.experiment import Experiment
from controller.feedback import Feedback
from controller.plant.params import PlantParams
from controller.runner import ExperimentRunner, HoldRunner

ROOT = Path(__file__).resolve().parents[2]
DT = 1e-3


def feedback(q: list[float]) -> Feedback:
    fb = Feedback(len(q))
    fb.q[:] = q
    fb.p_cap[:] = 3.4e6
    fb.p_rod[:] = 3.0e6
    return fb


def fake_plant_step(fb: Feedback, ref: np.ndarray, k: int) -> None:
    """Feedback that follows the reference with a small lag and noise-like wiggle (no I/O)."""
    fb.q += 0.5 * (ref - fb.q) + 1e-5 * np.sin(0.37 * k)
    fb.t += DT


def test_hold_runner_holds_the_enable_position(rig2: tuple) -> None:
    r = HoldRunner(*rig2, DT)
    fb = feedback([0.7, 0.5])
    r.enable(fb)
    ref, volts = np.zeros(2), np.zeros(2)
    assert r.step(fb, ref, volts)
    np.testing.assert_allclose(ref, [0.7, 0.5])
    np.testing.assert_allclose(volts, 0.0)  # bumpless: at the target, nothing to do
    fb.q[:] = [0.69, 0.51]
    r.step(fb, ref, volts)
    assert volts[0] > 0 > volts[1]
    r.disable()


def test_experiment_runner_progress_and_finish(rig2: tuple) -> None:
    d = {
        "name": "x",
        "home_deg": [40.0, 30.0],
        "segments": [
            {
                "name": "a",
                "duration_s": 0.5,
                "trajectory": {"kind": "hold"},
                "controller": {"kind": "pid"},
            },
            {
                "name": "b",
                "duration_s": 0.5,
                "repeats": 2,
                "controller": {"kind": "pid"},
                "trajectory": {
                    "kind": "sine",
                    "amplitude_deg": [1.0, 1.0],
                    "frequency_hz": [2.0, 2.0],
                },
            },
        ],
    }
    r = ExperimentRunner(Experiment.from_dict(d), *rig2, DT)
    fb = feedback(list(np.radians([41.0, 30.0])))  # 1° off: an approach move first
    r.enable(fb)
    assert r.segment_name == "approach:start"
    assert r.total_duration > 1.0
    ref, volts = np.zeros(2), np.zeros(2)
    seen: list[str] = []
    k = 0
    while r.step(fb, ref, volts):
        if not seen or seen[-1] != r.segment_name:
            seen.append(r.segment_name)
        assert 0 <= r.time_in_segment < 1.0 + 1e-9
        fake_plant_step(fb, ref, k)
        k += 1
        assert k < 5000
    # the sine ends moving (12.6 °/s): a brake to rest before the final hold
    assert seen == ["approach:start", "a", "b", "brake"]
    assert k * DT == pytest.approx(r.total_duration, abs=2 * DT)
    assert r.elapsed == pytest.approx(r.total_duration, abs=2 * DT)
    assert r.finished and r.segment_name == "finished"
    # After the end: holds the final pose — where the brake from the sine's last reference
    # (0.5 s, one cycle before its end) stops at each joint's acceleration limit — and keeps
    # returning False.
    assert not r.step(fb, ref, volts)
    w = 2 * np.pi * 2.0
    t_last = 0.5 - DT
    v = np.radians(1.0) * w * np.cos(w * t_last)
    q_last = np.radians([40.0, 30.0]) + np.radians(1.0) * np.sin(w * t_last)
    a = np.array([lim.max_acceleration for lim in rig2[1]])
    np.testing.assert_allclose(ref, q_last + np.sign(v) * v**2 / (2 * a), atol=1e-9)
    r.disable()


def test_experiment_runner_enable_is_bumpless_at_the_start(rig2: tuple) -> None:
    d = {
        "name": "x",
        "home_deg": [40.0, 30.0],
        "segments": [
            {
                "name": "a",
                "duration_s": 1.0,
                "controller": {"kind": "pid"},
                "trajectory": {
                    "kind": "sine",
                    "amplitude_deg": [1.0, 1.0],
                    "frequency_hz": [1.0, 1.0],
                },
            }
        ],
    }
    r = ExperimentRunner(Experiment.from_dict(d), *rig2, DT)
    fb = feedback(list(np.radians([40.0, 30.0])))
    r.enable(fb)
    ref, volts = np.zeros(2), np.zeros(2)
    r.step(fb, ref, volts)
    np.testing.assert_allclose(ref, fb.q, atol=1e-12)  # the sine starts where the rig is
    np.testing.assert_allclose(volts, 0.0, atol=1e-12)


#: Bytes. A few state floats replaced since tracing began show up as a constant ~64 B that does
#: not grow with the number of steps; one leaked float per step would be 240 kB over 10 000, one
#: temporary numpy array per step ~100 B of peak each time it is alive.
MAX_GROWTH = 256
MAX_PEAK = 1024


def _steps_allocate(runner: object, fb: Feedback, n: int) -> tuple[int, int]:
    """(growth, peak above the start) of traced memory over `n` steps in steady state.

    Tracing starts 1000 steps before the measurement: state floats replaced after tracing began
    are counted, their predecessors' frees are not, so the baseline is taken once every piece
    of state has been replaced at least once."""
    ref, volts = np.zeros(fb.n_joints), np.zeros(fb.n_joints)
    step = runner.step  # type: ignore[attr-defined]
    j1 = 1 % fb.n_joints

    def run(count: int) -> None:
        for _ in range(count):
            step(fb, ref, volts)
            fb.q[0] = ref[0] + 1e-4  # in place: the loop fills its Feedback the same way
            fb.q[j1] = ref[j1] - 1e-4

    run(1000)  # warm up (lazy caches, first-call paths)
    tracemalloc.start()
    try:
        run(1000)
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        run(n)
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return after - before, peak - before


def test_hold_runner_step_allocates_nothing(rig2: tuple) -> None:
    r = HoldRunner(*rig2, DT)
    fb = feedback([0.7, 0.5])
    r.enable(fb)
    growth, peak = _steps_allocate(r, fb, 10_000)
    assert growth <= MAX_GROWTH and peak < MAX_PEAK, (growth, peak)


@pytest.mark.parametrize("ctrl", ["pid", "pid_ff", "gravity_pd", "vlpd", "valve_sine"])
def test_experiment_runner_step_allocates_nothing(
    ctrl: str, params2: PlantParams, rig2: tuple
) -> None:
    with open(ROOT / "experiments" / "standard-2dof.toml", "rb") as f:
        d = tomllib.load(f)
    laws = {
        "pid": {"kind": "pid"},
        "pid_ff": {"kind": "pid_ff", "pressure_source": "measured"},
        "gravity_pd": {"kind": "gravity_pd", "kp": [500.0] * 2, "kd": [50.0] * 2, "kf": [2e-4] * 2},
        "vlpd": {
            "kind": "vlpd",
            "kp": [100.0] * 2,
            "kd": [20.0] * 2,
            "vmax_deg_s": [20.0] * 2,
            "j_gain": [1e-5] * 2,
            "velocity_ff": [0.25] * 2,
        },
        "valve_sine": {"kind": "valve_sine", "amplitude_v": [0.1, 0.0], "frequency_hz": [1.0] * 2},
    }
    mfs = next(s for s in d["segments"] if s["name"] == "mfs")
    mfs["controller"] = laws[ctrl]
    mfs["repeats"] = 3
    d["segments"] = [mfs]
    r = ExperimentRunner(Experiment.from_dict(d), *rig2, DT, params2)
    fb = feedback(list(np.radians([40.0, 30.0])))
    r.enable(fb)
    growth, peak = _steps_allocate(r, fb, 10_000)
    assert r.segment_name == "mfs"
    assert growth <= MAX_GROWTH and peak < MAX_PEAK, (growth, peak)


def test_wrong_sizes_are_refused(rig2: tuple, rig1: tuple) -> None:
    d = {
        "name": "x",
        "home_deg": [40.0],
        "segments": [
            {
                "name": "a",
                "duration_s": 1.0,
                "trajectory": {"kind": "hold"},
                "controller": {"kind": "pid"},
            }
        ],
    }
    with pytest.raises(ValueError, match="experiment has 1 joints"):
        ExperimentRunner(Experiment.from_dict(d), *rig2, DT)
    ExperimentRunner(Experiment.from_dict(d), *rig1, DT)


def test_enable_refuses_unknown_positions(rig2: tuple) -> None:
    fb = feedback([0.7, float("nan")])
    with pytest.raises(ValueError, match="not all finite"):
        HoldRunner(*rig2, DT).enable(fb)
    with pytest.raises(ValueError, match="feedback has 1 joints"):
        HoldRunner(*rig2, DT).enable(feedback([0.7]))


def test_feedforward_survives_a_dropped_pressure_sample(params2: PlantParams, rig2: tuple) -> None:
    d = {
        "name": "x",
        "home_deg": [40.0, 30.0],
        "segments": [
            {
                "name": "a",
                "duration_s": 1.0,
                "controller": {"kind": "pid_ff", "pressure_source": "measured"},
                "trajectory": {
                    "kind": "sine",
                    "amplitude_deg": [1.0, 1.0],
                    "frequency_hz": [1.0, 1.0],
                },
            }
        ],
    }
    r = ExperimentRunner(Experiment.from_dict(d), *rig2, DT, params2)
    fb = feedback(list(np.radians([40.0, 30.0])))
    r.enable(fb)
    ref, volts = np.zeros(2), np.zeros(2)
    for k in range(300):
        fb.p_cap[0] = np.nan if k == 100 else 3.4e6
        r.step(fb, ref, volts)
        fb.q[:] = ref
        assert np.all(np.isfinite(volts))
    # The filtered pressures recovered: the law still uses the measurements, not the fallback.
    law = r._cur.law
    assert np.isfinite(law._pc).all() and law._pc[0] == pytest.approx(3.4e6)


def test_recovery_move_after_an_open_loop_segment(rig2: tuple, params2: PlantParams) -> None:
    sine = {"kind": "valve_sine", "amplitude_v": [0.1, 0.0], "frequency_hz": [1.0, 1.0]}
    hold = {"kind": "hold"}
    d = {
        "name": "x",
        "home_deg": [40.0, 30.0],
        "segments": [
            {"name": "drive", "duration_s": 0.5, "trajectory": hold, "controller": sine},
            {"name": "hold", "duration_s": 0.3, "trajectory": hold, "controller": {"kind": "pid"}},
        ],
    }
    r = ExperimentRunner(Experiment.from_dict(d), *rig2, DT, params2)
    home = np.radians([40.0, 30.0])
    fb = feedback(list(home))
    r.enable(fb)
    ref, volts = np.zeros(2), np.zeros(2)
    seen: list[str] = []
    refs = []
    for _ in range(3000):
        running = r.step(fb, ref, volts)
        refs.append(ref.copy())
        if not seen or seen[-1] != r.segment_name:
            seen.append(r.segment_name)
        if r.segment_name == "drive":
            assert ref[0] == fb.q[0]  # open loop: the measured position is reported
            fb.q[0] += 2e-4  # the valve walks joint 1 away (0.1 rad over the segment)
        else:
            fb.q[:] = ref
        if not running:
            break
    assert seen == ["drive", "approach:recover", "hold", "finished"]
    steps = np.abs(np.diff(np.asarray(refs), axis=0)).max()
    assert steps < 1e-3  # the reference never jumps
    np.testing.assert_allclose(ref, home)
