"""Experiment files: parsing, clear errors, and the limit checks that refuse an experiment."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

from controller.checks import check_experiment
from controller.experiment import Experiment, ExperimentError, build_law, sakai_sequential
from controller.laws import FeedforwardPid, ValveSine, VelocityLimitedPD
from controller.plant.params import PlantParams
from controller.runner import ExperimentRefused, ExperimentRunner

ROOT = Path(__file__).resolve().parents[2]


def one(traj: dict, ctrl: dict | None = None, dur: float | None = 4.0, **seg: object) -> dict:
    s = {"name": "s", "trajectory": traj, "controller": ctrl or {"kind": "pid"}, **seg}
    if dur is not None:
        s["duration_s"] = dur
    return {"name": "t", "home_deg": [40.0, 30.0], "segments": [s]}


@pytest.mark.parametrize("name", ["standard-2dof", "standard-1dof"])
def test_standard_experiments_load_and_pass_the_checks(
    name: str, request: pytest.FixtureRequest
) -> None:
    n = 2 if name.endswith("2dof") else 1
    params = request.getfixturevalue(f"params{n}")
    _, limits = request.getfixturevalue(f"rig{n}")
    with open(ROOT / "experiments" / f"{name}.toml", "rb") as f:
        exp = Experiment.from_dict(tomllib.load(f))
    assert exp.n_joints == n
    assert exp.duration <= 120.0
    assert check_experiment(exp, limits, params) == []
    kinds = {s.trajectory.__class__.__name__ for s in exp.segments}
    assert "HarmonicSum" in kinds  # MFS / multisine
    assert any(s.controller["kind"] == "valve_sine" for s in exp.segments)
    np.testing.assert_allclose(exp.home, np.radians([40.0, 30.0][:n]))


def test_every_trajectory_and_controller_kind_parses(params2: PlantParams, rig2: tuple) -> None:
    gains, limits = rig2
    trajs = [
        {"kind": "hold", "position_deg": [41.0, 31.0]},
        {"kind": "sine", "amplitude_deg": [5.0, 5.0], "frequency_hz": [1.0, 1.0]},
        {
            "kind": "multisine",
            "frequencies_hz": [[0.5, 1.0]] * 2,
            "amplitudes_deg": [[2.0, 1.0]] * 2,
        },
        {"kind": "chirp", "amplitude_deg": [2.0, 2.0], "f0_hz": 0.2, "f1_hz": 1.0},
        {
            "kind": "trapezoid",
            "end_deg": [45.0, 35.0],
            "max_velocity_deg_s": [10.0, 10.0],
            "max_acceleration_deg_s2": [50.0, 50.0],
        },
        {
            "kind": "sweep",
            "joint": 1,
            "low_deg": 10.0,
            "high_deg": 40.0,
            "velocity_deg_s": 20.0,
            "acceleration_deg_s2": 100.0,
            "cycles": 1,
        },
        {
            "kind": "fourier",
            "base_hz": 0.25,
            "a_deg_s": [[1.0, 2.0]] * 2,
            "b_deg_s": [[0.5, 0.0]] * 2,
        },
        {
            "kind": "mfs",
            "base_hz": 0.25,
            "a_deg_s": [[1.0, -1.0, 0.0]] * 2,
            "b_deg_s": [[0.0, 0.0, 0.0]] * 2,
        },
    ]
    for tr in trajs:
        exp = Experiment.from_dict(one(tr))
        assert exp.segments[0].trajectory.n == 2
        assert check_experiment(exp, limits, params2) == [], tr["kind"]
    ctrls = [
        ({"kind": "pid", "pid": {"p": 1.0}}, "PidLaw"),
        ({"kind": "pid_ff", "pressure_source": "measured"}, "FeedforwardPid"),
        (
            {"kind": "gravity_pd", "kp": [500.0] * 2, "kd": [50.0] * 2, "kf": [2e-4] * 2},
            "GravityCompPD",
        ),
        (
            {
                "kind": "vlpd",
                "kp": [100.0] * 2,
                "kd": [20.0] * 2,
                "vmax_deg_s": [20.0] * 2,
                "j_gain": [0.0] * 2,
                "velocity_ff": [0.25] * 2,
            },
            "VelocityLimitedPD",
        ),
        (
            {"kind": "valve_sine", "amplitude_v": [0.1, 0.0], "frequency_hz": [1.0, 1.0]},
            "ValveSine",
        ),
    ]
    for c, cls in ctrls:
        exp = Experiment.from_dict(one({"kind": "hold"}, c))
        law = build_law(
            exp.segments[0],
            gains,
            limits,
            1e-3,
            __import__("controller.feedforward", fromlist=["PlantModel"]).PlantModel(params2),
        )
        assert type(law).__name__ == cls
    assert isinstance(law, ValveSine) and list(law.open_loop) == [True, False]
    assert not isinstance(law, (FeedforwardPid, VelocityLimitedPD))


@pytest.mark.parametrize(
    ("d", "message"),
    [
        ({"name": "x", "segments": []}, "missing key 'home_deg'"),
        ({"home_deg": [40.0], "segments": []}, "non-empty list"),
        ({"home_deg": [40.0], "segments": [], "colour": 1}, "unknown top-level key"),
        (one({"kind": "spiral"}), "unknown trajectory kind 'spiral'"),
        (
            one({"kind": "sine", "amplitude_deg": [1, 1], "frequency_hz": [1, 1], "freq": 2}),
            r"unknown key\(s\) \['freq'\]",
        ),
        (one({"kind": "sine", "amplitude_deg": [1, 1]}), "missing key 'frequency_hz'"),
        (
            one({"kind": "sine", "amplitude_deg": [1], "frequency_hz": [1, 1]}),
            "amplitude has 1 entries",
        ),
        (one({"kind": "hold"}, {"kind": "bangbang"}), "unknown controller kind"),
        (one({"kind": "hold"}, {"kind": "pid", "pid": {"kp": 1}}), None),  # checked at build time
        (one({"kind": "hold"}, dur=-1.0), "duration_s must be > 0"),
        (one({"kind": "hold"}, dur=None), "needs duration_s"),
        (
            one(
                {
                    "kind": "trapezoid",
                    "end_deg": [45, 35],
                    "max_velocity_deg_s": [10, 10],
                    "max_acceleration_deg_s2": [50, 50],
                },
                dur=None,
                repeats=2,
            ),
            "does not end where it starts",
        ),
        (one({"kind": "hold"}, repeats=0), "repeats must be an integer"),
        (
            one(
                {
                    "kind": "mfs",
                    "base_hz": 0.25,
                    "a_deg_s": [[1.0, 0, 0]] * 2,
                    "b_deg_s": [[0, 0, 0]] * 2,
                }
            ),
            "boundary conditions",
        ),
        (
            one({"kind": "chirp", "amplitude_deg": [1, 1], "f0_hz": 1, "f1_hz": 2}, dur=None),
            "chirp needs",
        ),
    ],
)
def test_errors_name_segment_and_key(d: dict, message: str | None, rig2: tuple) -> None:
    if message is None:
        exp = Experiment.from_dict(d)
        with pytest.raises(ExperimentError, match=r"segment 's'.*unknown PID parameter"):
            build_law(exp.segments[0], *rig2, 1e-3, None)
        return
    with pytest.raises(ExperimentError, match=message):
        Experiment.from_dict(d)


def test_model_laws_need_parameters(rig2: tuple) -> None:
    exp = Experiment.from_dict(one({"kind": "hold"}, {"kind": "pid_ff"}))
    with pytest.raises(ExperimentError, match="needs plant parameters"):
        ExperimentRunner(exp, *rig2, 1e-3, params=None)


def test_position_violation_named_with_segment_time_and_limit(rig2: tuple) -> None:
    _, limits = rig2
    # 40° + 20° sin(2π·0.25 t) crosses the 58° soft limit when sin = 0.9 (t ≈ 0.713 s).
    exp = Experiment.from_dict(
        one({"kind": "sine", "amplitude_deg": [20.0, 1.0], "frequency_hz": [0.25, 0.25]})
    )
    v = [x for x in check_experiment(exp, limits) if x.limit == "position_max"]
    assert len(v) == 1 and v[0].joint == 0 and v[0].segment == 0 and v[0].segment_name == "s"
    assert v[0].time == pytest.approx(math.asin(0.9) / (2 * math.pi * 0.25), abs=3e-3)
    assert v[0].value == pytest.approx(math.radians(60.0), rel=1e-4)
    assert v[0].bound == pytest.approx(math.radians(58.0))
    assert "position_max" in str(v[0]) and "segment 0 ('s')" in str(v[0])
    assert {x.limit for x in check_experiment(exp, limits)} == {"position_max", "position_min"}


def test_velocity_acceleration_and_valve_capacity(params2: PlantParams, rig2: tuple) -> None:
    _, limits = rig2
    # 4° at 3 Hz: 75°/s (> 60), 1421°/s² (> 600).
    exp = Experiment.from_dict(
        one({"kind": "sine", "amplitude_deg": [4.0, 0.5], "frequency_hz": [3.0, 3.0]})
    )
    lims = {(x.limit, x.joint) for x in check_experiment(exp, limits, params2)}
    assert ("velocity", 0) in lims and ("acceleration", 0) in lims
    assert ("velocity", 1) not in lims
    # Valve capacity: with 0.1 V allowed on the valve (25 mV of spool, ≈ 23°/s at joint 1 against
    # gravity) joint 1 cannot do 8° at 1 Hz (50°/s); joint 2's 0.5° (3°/s) is fine.
    from controller.limits import JointLimits

    weak = [JointLimits(lim.position_min, lim.position_max, 2.0, 50.0, 0.1) for lim in limits]
    exp = Experiment.from_dict(
        one({"kind": "sine", "amplitude_deg": [8.0, 0.5], "frequency_hz": [1.0, 1.0]})
    )
    cap = [x for x in check_experiment(exp, weak, params2) if x.limit == "valve_capacity"]
    assert [x.joint for x in cap] == [0] and cap[0].value > 1.0
    assert check_experiment(exp, limits, params2) == []


def test_valve_sine_motion_is_predicted(params2: PlantParams, rig2: tuple) -> None:
    _, limits = rig2
    big = Experiment.from_dict(
        one(
            {"kind": "hold"},
            {"kind": "valve_sine", "amplitude_v": [2.0, 0.0], "frequency_hz": [0.5, 0.5]},
        )
    )
    found = {(x.limit, x.joint) for x in check_experiment(big, limits, params2)}
    assert ("position_max", 0) in found or ("position_min", 0) in found
    small = Experiment.from_dict(
        one(
            {"kind": "hold"},
            {"kind": "valve_sine", "amplitude_v": [0.1, 0.0], "frequency_hz": [1.0, 1.0]},
        )
    )
    assert check_experiment(small, limits, params2) == []
    over = Experiment.from_dict(
        one(
            {"kind": "hold"},
            {"kind": "valve_sine", "amplitude_v": [7.0, 0.0], "frequency_hz": [1.0, 1.0]},
        )
    )
    assert "valve_voltage" in {x.limit for x in check_experiment(over, limits)}


def test_runner_refuses_with_every_violation(rig2: tuple) -> None:
    exp = Experiment.from_dict(
        one({"kind": "sine", "amplitude_deg": [20.0, 30.0], "frequency_hz": [0.25, 0.25]})
    )
    with pytest.raises(ExperimentRefused) as e:
        ExperimentRunner(exp, *rig2, 1e-3)
    assert len(e.value.violations) >= 3 and "joint 1 position_max" in str(e.value)


def test_sakai_sequential_protocol(params2: PlantParams, rig2: tuple) -> None:
    """Seed 000, Fig. 3: joint 2 driven with joint 1 held; then joint 1 driven with joint 2
    held at q2min, then at q2max."""
    exp = Experiment.from_dict(sakai_sequential([40.0, 30.0], (8.0, 40.0)))
    steps = [s for s in exp.segments if s.name.startswith("step")]
    assert [s.controller["amplitude_v"] for s in steps] == [[0.0, 0.2], [0.2, 0.0], [0.2, 0.0]]
    holds = [np.degrees(s.trajectory.start()) for s in steps]
    assert holds == [
        pytest.approx([40.0, 30.0]),
        pytest.approx([40.0, 8.0]),
        pytest.approx([40.0, 40.0]),
    ]
    assert check_experiment(exp, rig2[1], params2) == []
    with pytest.raises(ValueError, match="q2_range_deg"):
        sakai_sequential([40.0, 30.0])


def test_sakai_file_is_what_the_generator_builds() -> None:
    with open(ROOT / "experiments" / "sakai-sequential-2dof.toml", "rb") as f:
        from_file = Experiment.from_dict(tomllib.load(f))
    built = Experiment.from_dict(sakai_sequential([40.0, 30.0], (8.0, 40.0)))
    assert [s.name for s in from_file.segments] == [s.name for s in built.segments]
    for a, b in zip(from_file.segments, built.segments, strict=True):
        assert a.controller == b.controller and a.duration == b.duration
        assert np.allclose(a.trajectory.start(), b.trajectory.start())


@pytest.mark.parametrize(
    "path",
    # The excavator's plans are checked against its chain profile (jack strokes, valve flow)
    # in tests/live/test_check.py: the 1-/2-DOF limit check below has no 4-joint rig.
    sorted(p for p in (ROOT / "experiments").glob("*.toml") if "excavator" not in p.stem),
    ids=lambda p: p.stem,
)
def test_every_example_experiment_passes_its_rigs_checks(
    path: Path, request: pytest.FixtureRequest
) -> None:
    with open(path, "rb") as f:
        exp = Experiment.from_dict(tomllib.load(f))
    n = exp.n_joints
    params = request.getfixturevalue(f"params{n}")
    _, limits = request.getfixturevalue(f"rig{n}")
    assert check_experiment(exp, limits, params) == []
    assert exp.duration <= 120.0


def test_standard_2dof_mfs_condition_numbers_as_documented(params2: PlantParams) -> None:
    from controller.excitation import max_single_sine, trajectory_condition
    from controller.limits import JointLimits

    with open(ROOT / "experiments" / "standard-2dof.toml", "rb") as f:
        exp = Experiment.from_dict(tomllib.load(f))
    mfs = next(s for s in exp.segments if s.name == "mfs").trajectory
    assert trajectory_condition(mfs, "mechanical", params2) == pytest.approx(82, rel=0.02)
    assert trajectory_condition(mfs, "fluid", params2) == pytest.approx(4.0, rel=0.02)
    lim = [
        JointLimits.from_degrees(22, 58, 60, 600, 6),
        JointLimits.from_degrees(0, 48, 60, 600, 6),
    ]
    sine = max_single_sine(exp.home, 0.1, lim)
    assert trajectory_condition(sine, "mechanical", params2) > 5 * 82


@pytest.mark.parametrize(
    ("d", "message"),
    [
        (one({"kind": "hold"}, dur=math.nan), r"segments\[0\].duration_s = nan is not a finite"),
        (
            one({"kind": "sine", "amplitude_deg": [1, math.inf], "frequency_hz": [1, 1]}),
            r"segments\[0\].trajectory.amplitude_deg\[1\] = inf is not a finite",
        ),
        (
            one(
                {"kind": "mfs", "base_hz": 0.1, "a_deg_s": [[1.0, -math.inf]] * 2, "b_deg_s": [[0]]}
            ),
            r"segments\[0\].trajectory.a_deg_s\[0\]\[1\] = -inf is not a finite",
        ),
        ({**one({"kind": "hold"}), "pid": {"p": math.nan}}, r"pid.p = nan is not a finite"),
    ],
)
def test_non_finite_numbers_anywhere_are_refused_with_their_path(d: dict, message: str) -> None:
    with pytest.raises(ExperimentError, match=message):
        Experiment.from_dict(d)


@pytest.mark.parametrize(
    ("d", "message"),
    [
        (
            {**one({"kind": "hold"}), "pid": [{"p": 1.5}, {"ff2": -100.0}]},
            r"experiment 't': pid\[1\].ff2 = -100.0 is out of range \[-57.2958, 57.2958\]",
        ),
        (
            one({"kind": "hold"}, {"kind": "pid_ff", "pid": {"i": 2000.0}}),
            r"segment (0 \()?'s'\)?: pid.i = 2000.0 is out of range \[0, 954.93\]",
        ),
        (
            one(
                {"kind": "hold"},
                {"kind": "valve_sine", "amplitude_v": [0.1, 0], "frequency_hz": [0.0, 1.0]},
            ),
            r"frequency_hz\[0\] = 0.0 must be > 0 for a driven joint",
        ),
        (
            one(
                {"kind": "hold"},
                {
                    "kind": "valve_sine",
                    "amplitude_v": [0.1, 0],
                    "frequency_hz": [1.0, 1.0],
                    "centering_v_per_rad": [2.0, 1e4],
                },
            ),
            r"centering_v_per_rad\[1\] = 10000.0 is out of range \[0, 716.197\] V/rad",
        ),
    ],
)
def test_gains_and_valve_values_outside_their_ranges(d: dict, message: str, rig2: tuple) -> None:
    """`check_ranges` and the runner (through build_law) refuse the same content."""
    gains, limits = rig2
    exp = Experiment.from_dict(d)
    with pytest.raises(ExperimentError, match=message):
        exp.check_ranges(limits, 1e-3)
    if "experiment 't'" not in message:  # segment content: the law builder refuses it too
        with pytest.raises(ExperimentError, match=message):
            build_law(exp.segments[0], gains, limits, 1e-3, None)


def test_the_valve_capacity_need_is_the_closed_form_speed_ratio(
    params2: PlantParams, rig2: tuple
) -> None:
    """The check's vectorised need (required piston speed / steady-state speed at full spool
    against the load force, DESIGN §1.2) equals the feedforward model's closed form, state by
    state, extending and retracting."""
    from controller.checks import _capacity_need
    from controller.feedforward import PlantModel

    limits = rig2[1]
    model = PlantModel(params2)
    rng = np.random.default_rng(0)
    n = model.n
    q = np.radians([40.0, 30.0]) + rng.uniform(-0.2, 0.2, (50, n))
    qd = rng.uniform(-0.8, 0.8, (50, n))
    qdd = rng.uniform(-5.0, 5.0, (50, n))
    need = _capacity_need(limits, params2, q, qd, qdd)
    tau = [0.0] * n
    for k in range(50):
        model.inverse_dynamics(q[k].tolist(), qd[k].tolist(), qdd[k].tolist(), tau)
        for j in range(n):
            _, r = model.cylinder(j, float(q[k, j]))
            spool = min(model.umax[j], model.kv[j] * limits[j].valve_max_v)
            ext, ret = model.max_piston_speed(j, tau[j] / r, spool)
            sd = r * qd[k, j]
            assert need[k, j] == pytest.approx(abs(sd) / (ext if sd >= 0 else ret), rel=1e-9)


def test_a_sine_over_one_limit_only_is_sampled_not_passed_by_its_envelope(rig2: tuple) -> None:
    """45° ± 15° in j1's 22°…58° window: above the top only (speed and acceleration within), so
    the envelope proves nothing and the samples find the exceedance."""
    data = one({"kind": "sine", "amplitude_deg": [15.0, 0.0], "frequency_hz": [0.2, 0.2]}, dur=10.0)
    exp = Experiment.from_dict({**data, "home_deg": [45.0, 30.0]})
    found = check_experiment(exp, rig2[1])
    assert [(v.limit, v.joint) for v in found] == [("position_max", 0)]


@pytest.mark.parametrize("use", ["all", "fluid"])
def test_a_segment_says_which_equations_its_rows_feed(use: str) -> None:
    Experiment.from_dict(one({"kind": "hold"}, identify=use))


@pytest.mark.parametrize("use", ["mechanical", "FLUID", 1, None])
def test_an_unknown_identify_value_is_refused_naming_the_allowed_ones(use: object) -> None:
    with pytest.raises(
        ExperimentError, match=r"segment 0 .*identify must be one of \['all', 'fluid'\]"
    ):
        Experiment.from_dict(one({"kind": "hold"}, identify=use))
