"""The compiled controller (`controller.compiled`) equals the Python classes it mirrors, bit for
bit: the PID with every limit, every trajectory kind, and every law through the runners, on
random measurements (NaN pressures included)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from controller import trajectories as tr
from controller.compiled.pid import pid_arrays, pid_enable, pid_update
from controller.compiled.runner import compile_runner
from controller.compiled.trajectories import compile_trajectory, traj_eval
from controller.experiment import Experiment
from controller.feedback import Feedback
from controller.limits import JointLimits
from controller.moves import sweep, trapezoid
from controller.pid import Pid, PidParams
from controller.plant.params import PlantParams
from controller.runner import ExperimentRunner, HoldRunner
from tests.loop.test_compiled_cycle import LAWS_EXPERIMENT


def test_pid_with_every_limit_equals_the_python_pid() -> None:
    rng = np.random.default_rng(3)
    params = PidParams(p=3.0, i=2.0, d=0.1, ff0=0.05, ff1=0.2, ff2=0.01, bias=0.02, deadband=1e-3,
                       max_output=0.6, max_error=0.2, max_error_i=0.05, max_error_d=2.0,
                       max_cmd_d=1.5, max_i=0.3, d_filter_hz=40.0)  # fmt: skip
    pid = Pid(params, 1e-3)
    par, st = pid_arrays([params], 1e-3)
    pid.enable(0.1, 0.05)
    pid_enable(st, 0, 0.1, 0.05)
    cmd = fb = 0.0
    for k in range(3000):
        cmd = 0.3 * math.sin(k * 0.01) + 0.2 * (rng.random() - 0.5)
        fb = cmd + 0.3 * (rng.random() - 0.5)
        assert pid_update(par, st, 0, cmd, fb) == pid.update(cmd, fb)
    assert st[0, 2] == pid.error_i and st[0, 10] == pid.saturated_count


@pytest.mark.parametrize(
    "traj",
    [
        tr.Hold([0.3, -0.2]),
        tr.sine([0.1, 0.2], [0.3, 0.1], [0.5, 1.5], [0.2, 0.0]),
        tr.multisine([0.0, 0.1], [[0.2, 0.7, 1.1], [0.3, 0.5, 0.9]], [[0.1, 0.05, 0.02]] * 2),
        tr.chirp([0.0, 0.4], [0.2, 0.1], 0.2, 2.0, 5.0),
        trapezoid([0.0, 0.5], [0.6, -0.2], [0.3, 0.4], [1.0, 2.0]),
        sweep([0.2, 0.3], 1, 0.0, 0.6, 0.2, 1.0, cycles=2, dwell=0.1),
    ],
    ids=["hold", "sine", "multisine", "chirp", "trapezoid", "sweep"],
)
def test_every_trajectory_kind_equals_its_python_eval(traj: tr.Trajectory) -> None:
    compiled = compile_trajectory(traj)
    assert compiled is not None
    kind, coef = compiled
    q, qd, qdd = np.zeros(2), np.zeros(2), np.zeros(2)
    q2, qd2, qdd2 = np.zeros(2), np.zeros(2), np.zeros(2)
    for t in np.linspace(-0.1, max(traj.duration, 1.0) + 0.5, 1777):
        traj.eval(float(t), q, qd, qdd)
        traj_eval(kind, coef, float(t), q2, qd2, qdd2)
        assert (q == q2).all() and (qd == qd2).all() and (qdd == qdd2).all(), t


def _drive(runner: object, twin: object, n: int, cycles: int, seed: int) -> None:
    """Both runners on the same random measurements; every output equal."""
    rng = np.random.default_rng(seed)
    fb = Feedback(n)
    fb.q[:] = np.radians([40.0, 30.0][:n]) + 0.01
    fb.p_cap[:], fb.p_rod[:] = 5e6, 3e6
    ref, volts = np.zeros(n), np.zeros(n)
    ref2, volts2 = np.zeros(n), np.zeros(n)
    runner.enable(fb)  # type: ignore[attr-defined]
    twin.enable(fb)  # type: ignore[attr-defined]
    for k in range(cycles):
        fb.q += 0.002 * (rng.random(n) - 0.5) + 0.5 * (ref - fb.q) * 0.01
        fb.p_cap[:] = np.nan if k % 97 == 5 else 5e6 + 1e5 * rng.random(n)
        fb.p_rod[:] = 3e6 + 1e5 * rng.random(n)
        a = runner.step(fb, ref, volts)  # type: ignore[attr-defined]
        b = twin.step(fb, ref2, volts2)  # type: ignore[attr-defined]
        assert a == b, k
        assert np.array_equal(ref, ref2, equal_nan=True), (k, ref, ref2)
        assert np.array_equal(volts, volts2, equal_nan=True), (k, volts, volts2)


@pytest.mark.parametrize("dp", [0.0, 0.15], ids=["no_dp", "dp"])
def test_every_law_through_the_experiment_runner_equals_python(
    params2: PlantParams, rig2: tuple[list[PidParams], list[JointLimits]], dp: float
) -> None:
    gains, limits = rig2
    gains = [g.replace(dp=dp, dp_hp_hz=1.0) for g in gains]  # ΔP feedback off and on
    exp = Experiment.from_dict(LAWS_EXPERIMENT)

    def runner() -> ExperimentRunner:
        return ExperimentRunner(exp, gains, limits, 1e-3, params2, check=False)

    # The twin drives its own Python runner (phase planning, progress): two of them.
    twin = compile_runner(runner())
    assert twin is not None
    _drive(runner(), twin, 2, round(exp.duration * 1000) + 3000, seed=1)
    py = twin.py
    assert isinstance(py, ExperimentRunner)
    assert py.finished and py.segment_name == "finished"


def test_coulomb_feedforward_and_valve_compensation_equal_python(
    params2: PlantParams, rig2: tuple[list[PidParams], list[JointLimits]]
) -> None:
    """The feed-forward's Coulomb term (a Lin-family parameter file), the valve's null and lap
    (an underlap on joint 1, an overlap on joint 2: both branches) and ΔP feedback on the
    force the model did not ask for, in both pressure sources."""
    import copy
    import dataclasses

    gains, limits = rig2
    gains = [g.replace(dp=0.15, dp_hp_hz=1.0) for g in gains]  # ΔP feedback on
    lin = np.array([[40.0, 35.0, 120.0, -90.0], [25.0, 30.0, 80.0, -70.0]])
    valve = np.array([[0.007, -0.007], [-0.006, 0.004]])  # (b₀, d) per joint, spool V
    params = dataclasses.replace(params2, friction_lin=lin, valve_structure=valve)
    spec = copy.deepcopy(LAWS_EXPERIMENT)
    ff = [s for s in spec["segments"] if s["controller"]["kind"] == "pid_ff"]
    assert len(ff) == 2
    spec["segments"] = ff
    for s in ff:
        s["controller"]["coulomb_ff"] = 1.0
        s["controller"]["valve_null"] = s["controller"]["valve_lap"] = True
    exp = Experiment.from_dict(spec)

    def runner() -> ExperimentRunner:
        return ExperimentRunner(exp, gains, limits, 1e-3, params, check=False)

    twin = compile_runner(runner())
    assert twin is not None
    _drive(runner(), twin, 2, round(exp.duration * 1000) + 500, seed=3)


def test_hold_runner_equals_python(rig2: tuple[list[PidParams], list[JointLimits]]) -> None:
    gains, limits = rig2
    twin = compile_runner(HoldRunner(gains, limits, 1e-3))
    assert twin is not None
    _drive(HoldRunner(gains, limits, 1e-3), twin, 2, 3000, seed=2)


def test_an_unknown_law_or_trajectory_has_no_twin(
    rig2: tuple[list[PidParams], list[JointLimits]],
) -> None:
    class Custom(tr.Hold):
        pass

    gains, limits = rig2
    exp = Experiment.from_dict(LAWS_EXPERIMENT | {"segments": LAWS_EXPERIMENT["segments"][2:3]})
    r = ExperimentRunner(exp, gains, limits, 1e-3, None, check=False)
    assert compile_runner(r) is not None
    r._planned[0].trajectory = Custom([0.0, 0.0])
    assert compile_runner(r) is None
    assert compile_runner(object()) is None
