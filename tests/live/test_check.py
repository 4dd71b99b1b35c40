"""`rigctl check` offline, and the limit check's cost: O(1) memory in the experiment's length,
durations beyond the documented maximum refused by field, value and range."""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.checks import (
    MAX_EXPERIMENT_DURATION_S,
    MAX_SEGMENT_DURATION_S,
    _predict_valve_sine,
    check_experiment,
    common_period,
    describe,
)
from controller.experiment import Experiment
from controller.trajectories import HarmonicSum
from daq.profile import load_profile
from daq.service.control_api import joint_limits
from rigctl.main import main

ROOT = Path(__file__).resolve().parents[2]
PROFILES = {
    1: ROOT / "hw_profiles" / "sim-1dof.toml",
    2: ROOT / "hw_profiles" / "sim-2dof.toml",
    4: ROOT / "hw_profiles" / "sim-excavator.toml",  # a chain profile: rigctl check's own limits
}
REALISTIC = ROOT / "hw_profiles" / "sim-2dof-realistic.toml"
BROKEN = """
name = "broken"
home_deg = [40.0, 30.0]
[[segments]]
name = "big-sine"
duration_s = 4.0
trajectory = { kind = "sine", amplitude_deg = [30.0, 5.0], frequency_hz = [0.5, 0.5] }
controller = { kind = "pid" }
[[segments]]
name = "forever"
duration_s = 1e9
trajectory = { kind = "hold" }
controller = { kind = "pid" }
"""
# sim-2dof j1: soft limits 22…58°, 60°/s, 600°/s². 40° ± 30° at 0.5 Hz: 70° at t = 0.5 s (first
# beyond 58° at asin(0.6)/π = 0.205 s), 10° at 1.5 s (first below 22° at 1 + 0.205 s), peak speed
# 30·π = 94.2°/s at t = 0; peak acceleration 30·π² = 296°/s² (within).
BROKEN_LINES = [
    "segment 'forever': duration_s = 1e+09 s is outside the allowed range (0, 86400] s",
    "experiment: total duration (duration_s × repeats) = 1e+09 s is outside the allowed range "
    "(0, 604800] s",
    "segment 'big-sine', joint j1: position reaches 70.0° at t=0.21 s, limit 58.0°",
    "segment 'big-sine', joint j1: position reaches 10.0° at t=1.21 s, limit 22.0° (min)",
    "segment 'big-sine', joint j1: speed reaches 94.2°/s at t=0.00 s, limit 60.0°/s",
]


def _n_joints(path: Path) -> int:
    return 1 if "1dof" in path.stem else 4 if "excavator" in path.stem else 2


@pytest.mark.parametrize(
    "path", sorted((ROOT / "experiments").glob("*.toml")), ids=lambda p: p.stem
)
def test_shipped_experiments_pass_rigctl_check(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The bulk experiment is made for the realistic rig (its wider soft range; estimator/
    # bulk_experiment.py), whose 1/b it separates from the dead volumes.
    profile = REALISTIC if "bulk" in path.stem else PROFILES[_n_joints(path)]
    code = main(["check", str(path), "--profile", str(profile)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "is within" in out.out and out.err == ""


def test_broken_experiment_lists_every_violation_in_degrees_and_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "broken.toml"
    f.write_text(BROKEN)
    assert main(["check", str(f), "--profile", str(PROFILES[2])]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [ln.strip() for ln in err.splitlines()[1:]]
    assert lines == BROKEN_LINES


def test_bad_input_is_exit_2_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "typo.toml"
    f.write_text('name = "t"\nhome_deg = [40.0, 30.0]\n[[segments]]\nname = "s"\n'
                 'trajectory = { kind = "sine", amplitud_deg = [1.0, 1.0] }\n'
                 'controller = { kind = "pid" }\n')  # fmt: skip
    assert main(["check", str(f), "--profile", str(PROFILES[2])]) == 2
    err = capsys.readouterr().err
    assert "unknown key(s) ['amplitud_deg']" in err and "Traceback" not in err
    assert main(["check", str(tmp_path / "missing.toml"), "--profile", str(PROFILES[2])]) == 2
    assert "no such experiment file" in capsys.readouterr().err


def _exp(traj: dict[str, Any], duration: float, ctrl: dict[str, Any] | None = None) -> Experiment:
    return Experiment.from_dict(
        {
            "name": "x",
            "home_deg": [40.0, 30.0],
            "segments": [
                {
                    "name": "s",
                    "duration_s": duration,
                    "trajectory": traj,
                    "controller": ctrl or {"kind": "pid"},
                }
            ],
        }
    )


def _limits() -> list[Any]:
    return joint_limits(load_profile(PROFILES[2]))


def _peak_bytes(fn: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_duration() -> None:
    """Incommensurate frequencies (no period to exploit): every sample is checked, streamed."""
    traj = {"kind": "sine", "amplitude_deg": [5.0, 5.0], "frequency_hz": [0.1, 0.1 * math.sqrt(2)]}
    # envelope=False: sample although the envelope alone proves it (that is the next test's)
    short, peak_short = _peak_bytes(
        lambda: check_experiment(_exp(traj, 20.0), _limits(), envelope=False)
    )
    long_, peak_long = _peak_bytes(
        lambda: check_experiment(_exp(traj, 2000.0), _limits(), envelope=False)
    )
    assert short == long_ == []
    # 2000 s at 500 Hz = 1e6 rows; holding q, q̇, q̈ of 2 joints at once would take 48 MB.
    assert peak_long < 2 * peak_short + 1_000_000, (peak_short, peak_long)


def test_long_hold_and_periodic_segments_are_checked_on_one_period() -> None:
    hold, peak = _peak_bytes(lambda: check_experiment(_exp({"kind": "hold"}, 20_000.0), _limits()))
    assert hold == [] and peak < 200_000
    # 0.1 Hz and 0.3 Hz: period 10 s; the violation is found in the first period all the same.
    big = {"kind": "sine", "amplitude_deg": [25.0, 5.0], "frequency_hz": [0.1, 0.3]}
    v = [x for x in check_experiment(_exp(big, 20_000.0), _limits()) if x.limit == "position_max"]
    assert len(v) == 1 and v[0].time == pytest.approx(
        math.asin(18 / 25) / (2 * math.pi * 0.1), abs=3e-3
    )
    assert common_period([0.1, 0.3]) == pytest.approx(10.0)
    assert common_period([0.1, 0.1 * math.sqrt(2)]) is None
    assert common_period([0.0]) == 0.0


def test_open_loop_prediction_stops_at_its_periodic_steady_state() -> None:
    from daq.profile.plant import plant_params

    params = plant_params(load_profile(PROFILES[2]))
    from controller.feedforward import PlantModel

    # The held joint's frequency (no amplitude) has no common period with the driven one's:
    # only the driven joints' frequencies make the period.
    valve = {"kind": "valve_sine", "amplitude_v": [0.2, 0.0],
             "frequency_hz": [1.0, math.sqrt(2.0)], "centering_v_per_rad": [2.0, 2.0]}  # fmt: skip
    exp = _exp({"kind": "hold"}, 3600.0, valve)
    chunks = list(_predict_valve_sine(exp.segments[0], _limits(), PlantModel(params), 500.0, 4096))
    rows = sum(c[0].size for c in chunks)
    assert rows < 3600 * 500 / 10, rows  # stopped long before the hour's 1.8 M rows
    assert check_experiment(exp, _limits(), params) == []
    # The first sample has no earlier one: it takes the next sample's acceleration (a start at
    # full valve is not hidden behind a 0).
    qdd = chunks[0][3]
    assert qdd[0, 0] == qdd[1, 0] != 0.0


def test_samples_run_from_zero_to_the_end_inclusive_in_chunks() -> None:
    from controller.checks import _times

    t = np.concatenate(list(_times(2.0, 500.0, 300)))
    np.testing.assert_array_equal(t, np.arange(1001) / 500.0)


def test_open_loop_prediction_goes_on_while_the_state_still_drifts() -> None:
    """A weak centring gain lets the joint creep for many periods: the prediction must not stop
    at the first chunk (8 s of whole periods here) because the state has not yet repeated — the
    exit from the soft limits comes later."""
    from daq.profile.plant import plant_params

    params = plant_params(load_profile(PROFILES[2]))
    valve = {"kind": "valve_sine", "amplitude_v": [0.2, 0.0], "frequency_hz": [1.0, 1.0],
             "centering_v_per_rad": [0.004, 2.0], "offset_v": [0.002, 0.0]}  # fmt: skip
    v = check_experiment(_exp({"kind": "hold"}, 600.0, valve), _limits(), params)
    assert [(x.limit, x.joint) for x in v] == [("position_min", 0)]
    assert v[0].time > 8.0, v[0]


def test_duration_bounds_are_documented_and_named() -> None:
    v = check_experiment(_exp({"kind": "hold"}, MAX_SEGMENT_DURATION_S * 1.5), _limits())
    assert [x.limit for x in v] == ["duration_s"]
    assert v[0].joint == -1 and v[0].segment == 0  # not a joint's limit
    assert describe(v[0]) == (
        "segment 's': duration_s = 129600 s is outside the allowed range (0, 86400] s"
    )
    assert check_experiment(_exp({"kind": "hold"}, MAX_SEGMENT_DURATION_S), _limits()) == []
    many = Experiment.from_dict(
        {
            "name": "many",
            "home_deg": [40.0, 30.0],
            "segments": [
                {
                    "name": "s",
                    "duration_s": 3600.0,
                    "repeats": 200,
                    "trajectory": {"kind": "hold"},
                    "controller": {"kind": "pid"},
                }
            ],
        }
    )
    (total,) = check_experiment(many, _limits())
    assert total.value == 720_000.0 and total.bound == MAX_EXPERIMENT_DURATION_S
    assert total.joint == -1 and total.segment == -1
    # The week itself is allowed (the range is (0, 604800] s).
    week = _week()
    assert week.duration == MAX_EXPERIMENT_DURATION_S
    assert check_experiment(week, _limits()) == []


def _week() -> Experiment:
    seg = {"name": "s", "duration_s": 3600.0, "repeats": 168, "trajectory": {"kind": "hold"},
           "controller": {"kind": "pid"}}  # fmt: skip
    return Experiment.from_dict({"name": "week", "home_deg": [40.0, 30.0], "segments": [seg]})


def test_a_zero_frequency_does_not_end_the_common_period() -> None:
    assert common_period([0.0, 0.5]) == pytest.approx(2.0)
    assert common_period([0.5, 0.0, 0.25]) == pytest.approx(4.0)


def test_without_parameters_the_band_counts_amplitude_and_offset() -> None:
    """(|A| + |offset|)/c + allowance: 0.5 V and 0.3 V at 2 V/rad leave j1's ±18° window;
    either alone (or their difference) would not."""
    from controller.checks import VALVE_SINE_BAND_ALLOWANCE_RAD

    valve = {"kind": "valve_sine", "amplitude_v": [0.5, 0.0], "frequency_hz": [1.0, 1.0],
             "centering_v_per_rad": [2.0, 2.0], "offset_v": [-0.3, 0.0]}  # fmt: skip
    (v,) = check_experiment(_exp({"kind": "hold"}, 10.0, valve), _limits())
    assert v.limit == "valve_sine_band" and v.joint == 0
    assert v.band[0] == pytest.approx(0.8 / 2.0 + VALVE_SINE_BAND_ALLOWANCE_RAD, rel=1e-12)


def test_chirp_samples_many_times_exactly_as_the_loop_evaluates_them() -> None:
    import numpy as np

    from controller import trajectories as tr

    c = tr.chirp([0.5, 0.3], [0.1, 0.2], 0.1, 2.0, 50.0)
    t = np.linspace(0.0, 50.0, 2001)
    fast = c.sample(t)
    slow = tr.Trajectory.sample(c, t)  # the base class: `eval` one time at a time
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_a_multisine_inside_its_envelope_passes_without_sampling() -> None:
    """A day of incommensurate sines: the triangle-inequality envelope proves it safe, so the
    check evaluates no sample (and costs 0); one beyond the envelope's window is sampled and its
    first exceedance found."""
    from controller.checks import check_cost, harmonic_envelope

    irrational = [[0.05, 0.05 * math.sqrt(2), 0.05 * math.pi]] * 2
    ok = {
        "kind": "multisine",
        "frequencies_hz": irrational,
        "amplitudes_deg": [[2.0, 1.5, 1.0]] * 2,
    }
    exp = _exp(ok, MAX_SEGMENT_DURATION_S)
    calls: list[tuple[int, int]] = []
    assert check_experiment(exp, _limits(), progress=lambda d, t: calls.append((d, t))) == []
    assert check_cost(exp, _limits()) == 0 and calls == []
    traj = exp.segments[0].trajectory
    assert isinstance(traj, HarmonicSum)
    q_max, q_min, v_max, _ = harmonic_envelope(traj)
    assert v_max[0] == pytest.approx(
        2 * math.pi * math.radians(0.05 * (2 + 1.5 * math.sqrt(2) + math.pi))
    )
    assert q_max[0] - q_min[0] == pytest.approx(math.radians(2 * 4.5))
    # 20° of reach about 40° leaves the window (soft max 58° in the profile): sampled, refused.
    big = {**ok, "amplitudes_deg": [[10.0, 6.0, 4.0], [1.0, 1.0, 1.0]]}
    short = _exp(big, 200.0)
    assert check_cost(short, _limits()) == 200 * 500 + 1
    v = [x for x in check_experiment(short, _limits()) if x.limit == "position_max"]
    assert len(v) == 1 and v[0].joint == 0


def test_progress_is_reported_and_a_check_can_be_cancelled() -> None:
    from controller.checks import CheckCancelled

    traj = {"kind": "sine", "amplitude_deg": [5.0, 5.0], "frequency_hz": [0.1, 0.1 * math.sqrt(2)]}
    exp = _exp(traj, 100.0)
    seen: list[tuple[int, int]] = []

    def cancel_at_third(done: int, total: int) -> None:
        seen.append((done, total))
        if len(seen) == 3:
            raise CheckCancelled

    with pytest.raises(CheckCancelled):
        check_experiment(exp, _limits(), chunk=1000, progress=cancel_at_third, envelope=False)
    assert [d for d, _ in seen] == [1000, 2000, 3000]


@pytest.mark.parametrize("n", [1, 4])
def test_an_experiment_for_another_number_of_joints_is_refused_by_name(
    n: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 2-DOF standard experiment against the 1-DOF rig and against the excavator's chain
    profile: refused, naming both counts and the rig."""
    exp = ROOT / "experiments" / "standard-2dof.toml"
    assert main(["check", str(exp), "--profile", str(PROFILES[n])]) == 2
    err = capsys.readouterr().err
    assert "experiment: 2 joint(s) (home_deg), rig '" in err and f"' has {n}" in err, err


def test_a_silent_joint_s_frequency_does_not_spoil_the_period() -> None:
    """j2's sine has no amplitude: its frequency (incommensurate with j1's) is not part of the
    motion, so one 10 s period of j1 is all that is sampled of the 1000 s segment."""
    from controller.checks import check_cost

    big = {"kind": "sine", "amplitude_deg": [25.0, 0.0], "frequency_hz": [0.1, 0.1 * math.sqrt(2)]}
    assert check_cost(_exp(big, 1000.0), _limits()) == 10 * 500 + 1


def test_a_segment_shorter_than_its_period_is_sampled_to_its_end_only() -> None:
    """0.1 Hz (period 10 s) over 4 s: the 4 s are sampled, not the period beyond the end."""
    from controller.checks import check_cost

    big = {"kind": "sine", "amplitude_deg": [25.0, 5.0], "frequency_hz": [0.1, 0.1]}
    assert check_cost(_exp(big, 4.0), _limits()) == 4 * 500 + 1


def test_a_segment_proved_by_its_envelope_does_not_end_the_check() -> None:
    """The small sine is passed without sampling; the big one after it is still checked."""
    small = {
        "name": "small",
        "duration_s": 4.0,
        "controller": {"kind": "pid"},
        "trajectory": {"kind": "sine", "amplitude_deg": [1.0, 1.0], "frequency_hz": [0.5, 0.5]},
    }
    big = {
        **small,
        "name": "big",
        "trajectory": {"kind": "sine", "amplitude_deg": [25.0, 0.0], "frequency_hz": [0.1, 0.1]},
    }
    exp = Experiment.from_dict({"name": "two", "home_deg": [40.0, 30.0], "segments": [small, big]})
    found = check_experiment(exp, _limits())
    assert [(v.segment_name, v.limit) for v in found] == [("big", "position_max")]
    # A violation is a value: it cannot be edited after the check.
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        found[0].value = 0.0  # type: ignore[misc]


def test_a_joint_index_beyond_the_names_is_printed_as_a_number() -> None:
    from controller.checks import Violation

    v = Violation(0, "s", 0.5, 2, "velocity", 2.0, 1.0)
    assert describe(v, ["j1", "j2"]).startswith("segment 's', joint 2: speed reaches")
    assert describe(v, ["j1", "j2", "j3"]).startswith("segment 's', joint j3: speed reaches")


def test_an_open_loop_valve_sine_with_parameters_costs_every_sample() -> None:
    from controller.checks import check_cost
    from daq.profile.plant import plant_params

    params = plant_params(load_profile(PROFILES[2]))
    valve = {"kind": "valve_sine", "amplitude_v": [0.2, 0.0], "frequency_hz": [1.0, 1.0],
             "centering_v_per_rad": [2.0, 2.0]}  # fmt: skip
    exp = _exp({"kind": "hold"}, 4.0, valve)
    assert check_cost(exp, _limits(), params) == 4 * 500 + 1
    assert check_cost(exp, _limits()) == 1  # without parameters: its own command only
