"""The experiment that separates 1/b from the dead volumes (estimator.bulk_experiment)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from controller.checks import check_experiment
from controller.experiment import Experiment
from daq.profile import load_profile
from daq.profile.plant import plant_params
from daq.service.control_api import joint_limits
from estimator.bulk_experiment import chamber_condition, experiment_positions, stroke_holds
from rigctl.cmd_run import load_experiment

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "experiments" / "standard-bulk-2dof.toml"


def test_the_swept_volume_must_vary_to_separate_the_pair() -> None:
    """One position: the swept-volume and dead-volume columns are proportional (∞); the holds
    at both ends of the range make the pair well conditioned."""
    params = plant_params(load_profile(ROOT / "hw_profiles" / "sim-2dof.toml"))
    home = np.radians([[40.0, 30.0]])
    assert chamber_condition(params, home) == np.inf
    ends = np.radians(np.vstack([[40.0, 30.0], *stroke_holds([22.0, 0.0], [58.0, 48.0])]))
    assert chamber_condition(params, ends) < 12.0


@pytest.mark.parametrize("profile", ["sim-2dof.toml", "sim-2dof-realistic.toml"])
def test_the_shipped_experiment_is_within_the_limits(profile: str) -> None:
    prof = load_profile(ROOT / "hw_profiles" / profile)
    exp = Experiment.from_dict(load_experiment(SHIPPED))
    assert check_experiment(exp, joint_limits(prof), plant_params(prof)) == []
    assert sum(s.total for s in exp.segments) <= 120.0
    base = Experiment.from_dict(load_experiment(ROOT / "experiments" / "standard-2dof.toml"))
    params = plant_params(prof)
    worse = chamber_condition(params, experiment_positions(base))
    assert chamber_condition(params, experiment_positions(exp)) < worse


def _engineers_file(tmp_path: Path, profile: str) -> Path:
    """A parameter file with the profile's values (as an earlier identification would give)."""
    from estimator.paramfile import write_param_file

    prof = load_profile(ROOT / "hw_profiles" / profile)
    params = plant_params(prof)
    models = {
        kind: {
            "names": names,
            "theta": list(map(float, theta)),
            "sigma_pct": [1.0] * len(names),
            "cov_diag": [0.0] * len(names),
            "residual_var": 1.0,
        }
        for kind, names, theta in (
            ("mechanical", params.mech_names(), params.theta_mech()),
            ("fluid", params.fluid_names(), params.theta_fluid()),
        )
    }
    path = tmp_path / "params.toml"
    write_param_file(path, prof.rig.id, 1, models, params, source="test")
    return path


def test_the_sine_runs_at_half_the_oil_columns_lowest_frequency_and_the_largest_safe_amplitude(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With planning parameters the design chooses its sine: FREQUENCY_FRACTION of the lowest
    f_h over the holds (rounded down to 0.5 Hz), and the largest amplitude of the ladder the
    limit check passes — the next larger one would not."""
    from controller.hydraulic_linear import hydraulic_mode
    from daq.param_set import planning_params
    from estimator.bulk_experiment import AMPLITUDES_V, FREQUENCY_FRACTION, main, sine_frequency

    profile = ROOT / "hw_profiles" / "sim-2dof-realistic.toml"
    params_file = _engineers_file(tmp_path, "sim-2dof-realistic.toml")
    prof = load_profile(profile)
    planned = planning_params(prof, params_file)
    holds = stroke_holds(
        [j.limits.soft_min_deg for j in prof.joints], [j.limits.soft_max_deg for j in prof.joints]
    )
    f_h = min(hydraulic_mode(planned, j, np.radians(q))[0] for q in holds for j in range(2))
    f = sine_frequency(planned, holds)
    assert FREQUENCY_FRACTION * f_h - 0.5 < f <= FREQUENCY_FRACTION * f_h and f % 0.5 == 0
    assert 3.0 < f < 20.0  # the realistic rig's columns ring at 12–32 Hz
    out = tmp_path / "bulk.toml"
    assert main(["--profile", str(profile), "--params", str(params_file), "--out", str(out)]) == 0
    exp = load_experiment(out)
    holds_segs = [s for s in exp["segments"] if s["name"].startswith("stroke-end")]
    assert len(holds_segs) == 2 and all(s["identify"] == "fluid" for s in holds_segs)
    amp = holds_segs[0]["controller"]["amplitude_v"][0]
    assert holds_segs[0]["controller"]["frequency_hz"] == [f, f]
    assert f"{amp:g} V at {f:g} Hz" in capsys.readouterr().out
    k = AMPLITUDES_V.index(amp)
    assert k > 0  # at this frequency the standard 0.15 V breaks the acceleration limit
    larger = Experiment.from_dict(
        tomllib.loads(out.read_text().replace(f"amplitude_v = [{amp:g}, {amp:g}]",
                                              f"amplitude_v = [{AMPLITUDES_V[k - 1]:g}, "
                                              f"{AMPLITUDES_V[k - 1]:g}]"))
    )  # fmt: skip
    assert check_experiment(larger, joint_limits(prof), planned) != []
    assert check_experiment(Experiment.from_dict(exp), joint_limits(prof), planned) == []


def test_the_holds_put_each_joint_at_alternate_ends() -> None:
    """Joint 1 low with joint 2 high, then the other way; each end less the margin."""
    from estimator.bulk_experiment import MARGIN_DEG

    holds = stroke_holds([20.0, 0.0, 10.0], [60.0, 50.0, 30.0])
    m = MARGIN_DEG
    assert holds == [[20.0 + m, 50.0 - m, 10.0 + m], [60.0 - m, 0.0 + m, 30.0 - m]]


def test_the_pairs_condition_by_hand_and_the_designs_samples() -> None:
    """Two positions: √ of the eigenvalue ratio of XᵀX, X = [swept/V0, 1] per chamber (the cap
    side's swept volume grows with the piston, the rod side's shrinks), the worst chamber; the
    design sampled at `rate_hz` over every segment."""
    from controller.plant.dynamics import cylinder

    params = plant_params(load_profile(ROOT / "hw_profiles" / "sim-2dof.toml"))
    # across the range (a rod chamber the worst), and close together near the top of both
    # ranges (joint 2's cap chamber the worst)
    for deg in ([[30.0, 5.0], [50.0, 40.0]], [[55.0, 45.0], [58.0, 48.0]]):
        q = np.radians(deg)
        s, _ = cylinder(params, q)
        worst = 0.0
        for j in range(2):
            half = 0.5 * params.stroke[j]
            cap, rod = (half + s[:, j]) * params.area_cap[j], (half - s[:, j]) * params.area_rod[j]
            for x in (cap, rod):
                X = np.column_stack([x / params.dead_volume[j], np.ones(2)])
                ev = np.linalg.eigvalsh(X.T @ X)
                worst = max(worst, float(np.sqrt(ev[1] / ev[0])))
        assert chamber_condition(params, q) == pytest.approx(worst, rel=1e-12), deg
    exp = Experiment.from_dict(load_experiment(SHIPPED))
    pos = experiment_positions(exp, rate_hz=20.0)
    assert pos.shape == (sum(round(seg.total * 20.0) for seg in exp.segments), 2)


def test_without_parameters_the_design_is_the_standard_sine_and_its_refusal_is_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The realistic profile has no initial guesses: no f_h, so the standard 1 Hz, 0.15 V sine,
    checked by the centring bound, which refuses holds this near the soft limits (exit 1, each
    violation on stderr); `--out` is required."""
    from estimator.bulk_experiment import main

    profile = str(ROOT / "hw_profiles" / "sim-2dof-realistic.toml")
    out = tmp_path / "bulk.toml"
    assert main(["--profile", profile, "--out", str(out)]) == 1
    said = capsys.readouterr()
    assert "0.15 V at 1 Hz" in said.out
    assert "the standard 1 Hz sine, checked by the centring bound alone" in said.err
    assert said.err.count("limit: segment 'stroke-end-") == 4
    ctrl = load_experiment(out)["segments"][-1]["controller"]
    assert ctrl["amplitude_v"] == [0.15, 0.15] and ctrl["frequency_hz"] == [1.0, 1.0]
    with pytest.raises(SystemExit):
        main(["--profile", profile])
