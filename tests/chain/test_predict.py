"""The σ predicted before the rig moves (estimator.predict, `rigctl predict`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from controller.chain_experiments import chain_limits, experiment_dict, link_by_link
from controller.experiment import Experiment
from controller.plant.chain.profile import ChainProfile
from estimator.predict import predict_chain
from tests.chain.conftest import EXCAVATOR

ROOT = Path(__file__).resolve().parents[2]
#: A 12 s two-joint multisine about the 2-DOF rig's home (the service-rig predictions' plan).
SHORT_2DOF = (
    'name = "short"\nhome_deg = [40.0, 30.0]\n[[segments]]\nname = "ms"\nduration_s = 12.0\n'
    'controller = { kind = "pid" }\n[segments.trajectory]\nkind = "multisine"\n'
    "frequencies_hz = [[0.2, 1.1, 2.3], [0.25, 1.3, 2.5]]\n"
    "amplitudes_deg = [[4.0, 1.0, 0.3], [4.0, 1.0, 0.3]]\n"
)


def _bucket_only(excavator: ChainProfile) -> Experiment:
    """The bucket alone, three periods (34 s: the observation trims 8 s at each end)."""
    lims = chain_limits(excavator.chain, excavator.home)
    traj = link_by_link(excavator.home, lims, order=[3], repeats=1)
    _, a, b = traj.coefficients[0]
    return Experiment.from_dict(experiment_dict("b", "", excavator.home, [("b", a, b)], 0.1, 3))


@pytest.mark.slow
def test_sigma_follows_the_sensors_and_the_motion(excavator: ChainProfile) -> None:
    """σ² = σ²(angles) + σ²(pressures): five times better pressure transducers shrink the
    bucket friction's σ, by at most five (same draws: little sampling error between the
    two). The boom never moves in the plan: along it, its friction is not identified at all.
    (Along the simulated motion the boom sways a little as the bucket moves, and that run
    differs between the grades: the plan is the motion that isolates both claims.)"""
    exp = _bucket_only(excavator)
    thesis, better = (
        predict_chain(EXCAVATOR, exp, grade=g, minor=False, draws=40, motion="plan").models[0]
        for g in ("thesis", "better")
    )
    k = thesis.names.index("bucket.fv")
    ratio = thesis.sigma[k] / better.sigma[k]
    assert 1.2 < ratio < 5.0 * 1.05, ratio
    assert thesis.sigma[thesis.names.index("boom.fv")] > 1e3 * thesis.sigma[k]
    assert thesis.classes is not None and thesis.classes["swing.m"] == "unidentifiable"


@pytest.mark.slow
def test_rigctl_predict_on_the_2dof_rig_prints_every_parameter_of_both_models(
    tmp_path: Path,
) -> None:
    exp = tmp_path / "short.toml"
    exp.write_text(SHORT_2DOF)
    profile = ROOT / "hw_profiles/sim-2dof.toml"
    cmd = [sys.executable, "-m", "rigctl.main", "predict", "--profile", str(profile),
           "--experiment", str(exp), "--draws", "4", "--json"]  # fmt: skip
    # The shipped simulated profile declares no initial guesses: the plan needs a parameter
    # file (daq.param_set.planning_params), and is refused without one, naming why.
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 2 and "--params FILE" in out.stderr, out.stderr
    from tests.params.conftest import write_params

    plan = write_params(tmp_path / "plan.toml", "sim-2dof.toml", scale=1.2)
    out = subprocess.run(
        [*cmd, "--params", str(plan)], capture_output=True, text=True, timeout=900, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    models = {m["model"]: m for m in got["models"]}
    assert set(models) == {"mechanical", "fluid"}
    for m in models.values():
        for p in m["parameters"]:
            assert np.isfinite(p["sigma"]) and p["sigma"] > 0, p
            assert p["nominal"] != 0, p


def test_rigctl_predict_refuses_a_grade_the_profile_lacks(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rigctl.main", "predict", "--profile", str(EXCAVATOR),
         "--experiment", str(ROOT / "experiments/excavator-linkwise.toml"), "--sensors", "gold"],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 2
    assert "gold" in out.stderr and "better" in out.stderr


def test_rigctl_check_refuses_a_plan_outside_the_jack_strokes(tmp_path: Path) -> None:
    """A chain profile: check compares the plan with the windows
    the strokes allow. The link-by-link plan about a stick angle near its window's end runs
    the stick past it."""
    text = (ROOT / "experiments/excavator-linkwise.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(
        text.replace("home_deg = [0.0, 0.0, 0.0, 30.0]", "home_deg = [0.0, 0.0, 46.0, 30.0]")
    )
    out = subprocess.run(
        [sys.executable, "-m", "rigctl.main", "check", str(bad), "--profile", str(EXCAVATOR)],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    assert "stick: planned angle" in out.stderr and "jack strokes allow" in out.stderr


@pytest.mark.slow
def test_the_prediction_matches_the_scatter_of_the_estimates_over_noise_draws(
    excavator: ChainProfile,
) -> None:
    """The σ predicted before the rig moves against the spread of the estimates over ten
    draws of the sensors' noise on one simulated run of a chain that is not the profile's
    (heavier friction, transducer offsets): the median ratio over the excited base
    parameters within 0.8–1.25. Predicted along the plan itself (median ≈ 0.56) or with the
    model's θ on the noise's path instead of a fit's (≈ 1.4), it is not."""
    import dataclasses

    from controller.chain_experiments import experiment_trajectory
    from estimator.base_params import identifiability
    from estimator.chain_identify import Conditioning, joint_weights, observe, solve
    from estimator.chain_regressor import ChainRegressor
    from estimator.chain_simdata import (
        TRACKING_BANDWIDTH_HZ,
        TRACKING_SUBSTEPS,
        reread,
        run_experiment,
    )
    from estimator.predict import chain_q_range
    from rigctl.cmd_run import load_experiment

    exp = Experiment.from_dict(load_experiment(ROOT / "experiments/excavator-multisine.toml"))
    nominal, grade, fs = excavator.chain, excavator.sensors["better"], 200.0
    truth = dataclasses.replace(nominal, joints=tuple(
        dataclasses.replace(j, link=dataclasses.replace(j.link, viscous_friction=f))
        for j, f in zip(nominal.joints, (2.0e4, 3.0e4, 1.0e4, 2.0e3), strict=True)
    ))  # fmt: skip
    offsets = ((2.0e4, -1.5e4), (-1.0e4, 2.5e4), (1.5e4, 1.0e4), (-2.0e4, -1.0e4))
    run = run_experiment(
        truth, experiment_trajectory(exp), grade, nominal=nominal, fs=fs,
        nsub=TRACKING_SUBSTEPS, bandwidth_hz=TRACKING_BANDWIDTH_HZ, offsets=offsets, seed=0,
    )  # fmt: skip
    reg = ChainRegressor(nominal)
    bp = identifiability(reg.matrix, reg.names, chain_q_range(nominal, excavator.home))
    cond = Conditioning(fs)
    est = []
    for s in range(10):
        ch = reread(run, grade, np.random.default_rng(100 + s), offsets).channels
        obs = observe(reg, bp, ch["q"], ch["p_cap"], ch["p_rod"], cond)
        est.append(solve(obs.Phi, obs.y, joint_weights(reg, ch["q"], grade))[0])
    scatter = np.std(est, axis=0, ddof=1)
    pred = predict_chain(EXCAVATOR, exp, grade="better", fs=fs, draws=30, seed=1).models[0]
    assert pred.names == bp.base_names
    ok = np.isfinite(pred.sigma) & (scatter > 0)
    assert ok.sum() > 50
    ratio = float(np.median(pred.sigma[ok] / scatter[ok]))
    assert 0.8 < ratio < 1.25, ratio


@pytest.mark.slow
def test_a_service_rig_prediction_weights_each_equation_as_the_batch_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch weights each output equation by 1/σ of its error (estimator.wls), so its
    estimate does not depend on the scale an equation is written in; nor may the predicted σ:
    with joint 2's torque equation's `output_scale` 100× smaller (its rows 100× larger) the
    prediction, from the same noise draws, is the same. Unweighted, that equation would
    dominate the fit (R12, W1 and M1's σ move by tens of per cent)."""
    import dataclasses
    import tomllib

    import estimator.models as models
    from estimator.predict import predict_service_rig
    from tests.params.conftest import write_params

    exp = Experiment.from_dict(tomllib.loads(SHORT_2DOF))
    plan = write_params(tmp_path / "plan.toml", "sim-2dof.toml")
    profile = ROOT / "hw_profiles/sim-2dof.toml"
    plain = predict_service_rig(profile, exp, draws=10, params_path=plan).models[0]
    real = models.load_models

    def rescaled(*a: object, **k: object) -> list[object]:
        out = []
        for m in real(*a, **k):  # type: ignore[arg-type]
            if m.name == "mechanical":
                s = np.array(m.output_scale, dtype=float)
                s[1] /= 100.0
                m = dataclasses.replace(m, output_scale=s)
            out.append(m)
        return out

    monkeypatch.setattr(models, "load_models", rescaled)
    scaled = predict_service_rig(profile, exp, draws=10, params_path=plan).models[0]
    assert plain.model == scaled.model == "mechanical"
    np.testing.assert_allclose(scaled.sigma, plain.sigma, rtol=1e-6)


@pytest.mark.slow
def test_a_service_rig_prediction_passes_the_lvdt_noise_through_the_spool_fusion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch's spool keeps the LVDT only below the fusion's 2 Hz crossover (estimator.spool):
    with a noisy LVDT (30 mV) the predicted σ of 1/b is well below what the raw LVDT noise would
    give — the prediction for a profile whose valve commands the batch cannot read."""
    import tomllib

    import estimator.spool as spool
    from estimator.predict import predict_service_rig
    from tests.params.conftest import write_params

    exp = Experiment.from_dict(tomllib.loads(SHORT_2DOF))
    plan = write_params(tmp_path / "plan.toml", "sim-2dof.toml")
    text = (ROOT / "hw_profiles/sim-2dof.toml").read_text()
    assert text.count("sim_noise = 1.0e-3") == 2  # the two LVDTs
    noisy = tmp_path / "noisy-lvdt.toml"
    noisy.write_text(text.replace("sim_noise = 1.0e-3", "sim_noise = 3.0e-2"))

    def inv_b_sigma() -> float:
        m = predict_service_rig(noisy, exp, draws=10, params_path=plan).models[1]
        assert m.model == "fluid"
        return float(m.sigma[list(m.names).index("1/b")])

    fused = inv_b_sigma()
    monkeypatch.setattr(spool, "valve_commands", lambda profile: None)
    raw = inv_b_sigma()
    assert fused < 0.8 * raw, (fused, raw)


VALVE_SINE = (
    '[[segments]]\nname = "vs"\nduration_s = 6.0\ntrajectory = { kind = "hold" }\n'
    'controller = { kind = "valve_sine", amplitude_v = [0.15, 0.15], frequency_hz = [1.0, 1.0], '
    "centering_v_per_rad = [1.0, 1.0] }\n"
)


def test_the_motion_predicted_along_is_the_closed_loop_simulated_with_the_plan(
    tmp_path: Path,
) -> None:
    """`simulated_motion`: the experiment run by the profile's controller on the planning
    parameters' plant, from rest at the first reference: it tracks the plan, not exactly (the
    tracking error is what the plan misses), and it moves in a
    valve-sine segment the plan has no angle for."""
    import tomllib

    from daq.param_set import planning_params
    from daq.profile import load_profile
    from estimator.predict import experiment_reference, simulated_motion
    from tests.params.conftest import write_params

    profile = load_profile(ROOT / "hw_profiles/sim-2dof.toml")
    params = planning_params(profile, write_params(tmp_path / "plan.toml", "sim-2dof.toml"))
    exp = Experiment.from_dict(tomllib.loads(SHORT_2DOF + VALVE_SINE))
    motion = simulated_motion(profile, params, exp, 1000.0)
    assert motion is not None
    q, s, p_cap, p_rod, u = motion
    assert q.shape == (18000, 2) and all(a.shape == q.shape for a in (s, p_cap, p_rod, u))
    _, plan, _, _, skipped = experiment_reference(exp, 1000.0)
    assert skipped == ["vs (valve_sine)"] and plan.shape == (12000, 2)
    rms = np.sqrt(np.mean((plan - plan.mean(axis=0)) ** 2, axis=0))
    miss = np.sqrt(np.mean((q[:12000] - plan) ** 2, axis=0))
    assert np.all(miss < 0.5 * rms) and np.all(miss > 1e-3 * rms), miss / rms
    assert np.all(np.ptp(q[12000:], axis=0) > np.radians(0.05))  # the valve sine moves it
    assert np.all(np.isfinite(p_cap)) and np.all(np.isfinite(p_rod))
    assert np.all(np.abs(u) <= 1.0)  # the spool's own travel, normalised


@pytest.mark.slow
def test_a_service_rig_prediction_counts_the_open_loop_segments_the_batch_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch fits every running row, a valve sine's too: predicted along the simulated
    closed loop, a valve-sine segment added to the experiment narrows the flow gains' σ. If the
    simulation diverges the prediction falls back to the plan, leaving the segment out, and
    says both."""
    import tomllib

    import estimator.predict as predict
    from tests.params.conftest import write_params

    plan = write_params(tmp_path / "plan.toml", "sim-2dof.toml")
    profile = ROOT / "hw_profiles/sim-2dof.toml"

    def fluid(text: str) -> tuple[np.ndarray, list[str]]:
        exp = Experiment.from_dict(tomllib.loads(text))
        p = predict.predict_service_rig(profile, exp, draws=10, params_path=plan)
        return p.models[1].sigma, p.notes

    alone, notes = fluid(SHORT_2DOF)
    with_sine, _ = fluid(SHORT_2DOF + VALVE_SINE)
    assert any("simulated in closed loop" in n for n in notes)
    assert np.all(with_sine[1:] < 0.9 * alone[1:]), with_sine / alone  # Cf of both joints
    monkeypatch.setattr(predict, "simulated_motion", lambda *a: None)
    planned, notes = fluid(SHORT_2DOF + VALVE_SINE)
    assert "segment left out (open loop): vs (valve_sine)" in notes
    assert any("diverged" in n for n in notes)
    assert np.all(planned[1:] > 1.2 * with_sine[1:]), planned / with_sine
