"""The compiled cycle equals the Python cycle it replaces: on recorded virtual-time runs of the
simulated rig, every row's numbers (all but the wake-up and compute-time columns, which are
timings) agree to 1e-12 — the standard experiment, and one driving every law and trajectory kind
on the compiled path; the compiled path really runs compiled code; and the cycle path is chosen by
`HYDRIG_LOOP_PATH`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from daq.loop import Loop
from daq.loop.cycle import compiled_by_default
from daq.profile.loader import load_profile
from daq.profile.plant import sim_plant
from tests.loop.compiled_harness import PROFILE, recorded_loop, recorded_run
from tests.loop.fakes import FakeBackend, HoldP

TOL = 1e-12
TIMING_COLUMNS = (5, 6)  # wake_s, compute_s

#: Every law kind and every trajectory kind the compiled path has, on the 2-DOF rig.
LAWS_EXPERIMENT: dict[str, Any] = {
    "name": "all-laws",
    "home_deg": [40.0, 30.0],
    "segments": [
        {"name": "ff-model", "duration_s": 1.5, "controller": {"kind": "pid_ff"},
         "trajectory": {"kind": "sine", "amplitude_deg": [4.0, 3.0], "frequency_hz": [0.7, 0.9]}},
        {"name": "ff-measured", "duration_s": 1.5,
         "controller": {"kind": "pid_ff", "pressure_source": "measured"},
         "trajectory": {"kind": "chirp", "amplitude_deg": [2.0, 2.0], "f0_hz": 0.3, "f1_hz": 1.0}},
        {"name": "sweep", "controller": {"kind": "pid"},
         "trajectory": {"kind": "sweep", "joint": 1, "low_deg": 25.0, "high_deg": 35.0,
                        "velocity_deg_s": 10.0, "acceleration_deg_s2": 40.0}},
        {"name": "gravity", "duration_s": 1.0,
         "controller": {"kind": "gravity_pd", "kp": [4000.0, 2000.0], "kd": [400.0, 200.0],
                        "kf": [1e-4, 1e-4]},
         "trajectory": {"kind": "hold"}},
        {"name": "vlpd", "duration_s": 1.5,
         "controller": {"kind": "vlpd", "kp": [25.0, 25.0], "kd": [10.0, 10.0],
                        "vmax_deg_s": [8.0, 8.0], "j_gain": [0.0, 0.0],
                        "velocity_ff": [0.5, 0.5]},
         "trajectory": {"kind": "hold", "position_deg": [44.0, 27.0]}},
        {"name": "valve", "duration_s": 1.0,
         "controller": {"kind": "valve_sine", "amplitude_v": [0.1, 0.0], "frequency_hz": [1.0, 1.0],
                        "centering_v_per_rad": [1.0, 0.0]},
         "trajectory": {"kind": "hold"}},
        {"name": "back", "duration_s": 1.0, "controller": {"kind": "pid"},
         "trajectory": {"kind": "hold"}},
    ],
}  # fmt: skip


def _assert_rows_equal(python: np.ndarray, compiled: np.ndarray) -> None:
    assert python.shape == compiled.shape
    keep = np.ones(python.shape[1], dtype=bool)
    keep[list(TIMING_COLUMNS)] = False
    a, b = python[:, keep], compiled[:, keep]
    both_nan = np.isnan(a) & np.isnan(b)
    diff = np.where(both_nan, 0.0, np.abs(a - b))
    worst = np.unravel_index(int(np.argmax(diff)), diff.shape)
    assert not np.isnan(diff).any(), "NaN on one path only"
    assert diff.max() <= TOL, f"row {worst[0]} column {worst[1]}: differs by {diff.max():.3g}"


def test_compiled_rows_equal_python_rows_on_a_short_standard_run() -> None:
    """3 s of the standard experiment: the approach move, the settle hold and the MFS."""
    python = recorded_run(compiled=False, seconds=3.0)
    compiled = recorded_run(compiled=True, seconds=3.0)
    assert (python[:, 2] == 2).sum() >= 2900  # RUNNING
    _assert_rows_equal(python, compiled)


@pytest.mark.slow
def test_compiled_rows_equal_python_rows_on_the_standard_experiment() -> None:
    """The whole standard experiment (≈ 95 s of loop time) to its end and back to the hold."""
    python = recorded_run(compiled=False)
    compiled = recorded_run(compiled=True)
    assert (python[:, 2] == 2).sum() > 90_000  # RUNNING to the end, no trip
    assert (python[:, 3] == 0).all()
    _assert_rows_equal(python, compiled)


@pytest.mark.slow
def test_compiled_rows_equal_python_rows_for_every_law_and_trajectory() -> None:
    params, _ = sim_plant(load_profile(PROFILE))
    python = recorded_run(compiled=False, experiment=LAWS_EXPERIMENT, params=params)
    compiled = recorded_run(compiled=True, experiment=LAWS_EXPERIMENT, params=params)
    assert (python[:, 2] == 2).sum() > 8000
    _assert_rows_equal(python, compiled)


def test_4khz_compiled_rows_equal_python_rows_and_the_hold_tracks() -> None:
    """`loop_rate_hz = 4000`: the same rows on both paths, four per millisecond, no trip, and
    the standard experiment's reference followed as at 1 kHz."""
    python = recorded_run(compiled=False, seconds=2.0, rate_hz=4000.0)
    compiled = recorded_run(compiled=True, seconds=2.0, rate_hz=4000.0)
    _assert_rows_equal(python, compiled)
    running = compiled[compiled[:, 2] == 2]
    assert len(running) >= 7900
    assert np.allclose(np.diff(running[:, 1]), 2.5e-4)
    assert (compiled[:, 3] == 0).all()


def test_the_compiled_loop_drives_the_runner_through_its_compiled_twin() -> None:
    """The standard runner gets a compiled twin; a runner the kernels do not know (the fakes'
    HoldP) runs on the Python path of the same loop."""
    profile = load_profile(PROFILE)
    loop = Loop(profile, FakeBackend(profile), hold=HoldP(), virtual_time=True, compiled=True)
    assert loop.compile_s > 0.0
    assert loop._cycle == loop._cycle_compiled
    assert loop._compile_runner(HoldP()) is None
    from daq.service.control_api import joint_gains, make_hold_runner

    assert loop._compile_runner(make_hold_runner(profile, joint_gains(profile))) is not None
    python = Loop(profile, FakeBackend(profile), hold=HoldP(), virtual_time=True, compiled=False)
    assert python._compile_runner(make_hold_runner(profile, joint_gains(profile))) is None


def test_the_cycle_path_is_chosen_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HYDRIG_LOOP_PATH", raising=False)
    assert compiled_by_default()
    monkeypatch.setenv("HYDRIG_LOOP_PATH", "python")
    assert not compiled_by_default()
    monkeypatch.setenv("HYDRIG_LOOP_PATH", "fast")
    with pytest.raises(ValueError, match="must be 'compiled' or 'python'"):
        compiled_by_default()


@pytest.mark.parametrize("compiled", [True, False])
def test_an_ended_experiment_is_held_at_its_last_reference(compiled: bool) -> None:
    """When an experiment ends the hold holds its last reference — where the rig was told to
    be — not the angle measured in that cycle (on a ringing arm, a peak of the ringing): the
    reference stays put across the switch on both cycle paths, while the measured angle was
    elsewhere."""
    sine = {"name": "sine", "home_deg": [40.0, 30.0],
            "segments": [{"name": "s", "duration_s": 1.25, "controller": {"kind": "pid"},
                          "trajectory": {"kind": "sine", "amplitude_deg": [4.0, 3.0],
                                         "frequency_hz": [1.0, 1.0]}}]}  # fmt: skip
    rows, loop = recorded_loop(compiled, sine, load_profile(PROFILE))
    lay = loop.layout
    state = rows[:, lay.index("state")]
    last = np.nonzero(state == 2)[0][-1]
    assert np.all(state[last + 1 :] == 1)  # ARMED: the hold took over
    for j, q_col in (("j1", "eng.q_1"), ("j2", "eng.q_2")):
        ref = rows[:, lay.index(f"ref.{j}")]
        held = ref[last + 2]  # (the switching row's reference is NaN: no runner stepped)
        assert np.all(ref[last + 2 :] == held), j
        assert abs(held - ref[last]) < 1e-5, (j, held, ref[last])  # the last reference
        q_switch = rows[last + 1, lay.index(q_col)]
        # not the measured angle: 200× farther from it than from the last reference (the sine
        # ends near its peak; the brake to rest after it takes a few cycles)
        assert abs(held - q_switch) > 2e-3, (j, held, q_switch)


def test_a_last_reference_is_held_once_and_not_left_by_an_enable_that_failed() -> None:
    from controller.feedback import Feedback
    from controller.runner import HoldRunner
    from daq.service.control_api import joint_gains, joint_limits

    profile = load_profile(PROFILE)
    hold = HoldRunner(joint_gains(profile), joint_limits(profile), profile.period)
    fb = Feedback(2)
    fb.q[:] = [0.7, 0.5]
    hold.hold_next_at(np.array([0.71, 0.52]))
    fb.q[0] = np.nan  # enable refuses a non-finite angle
    with pytest.raises(ValueError, match="not all finite"):
        hold.enable(fb)
    fb.q[0] = 0.7
    hold.enable(fb)  # a later arm: the measured angles, not the stale reference
    assert hold.position.tolist() == [0.7, 0.5]
    hold.hold_next_at(np.array([0.71, 0.52]))
    hold.enable(fb)
    assert hold.position.tolist() == [0.71, 0.52]
    hold.enable(fb)  # once only
    assert hold.position.tolist() == [0.7, 0.5]
