"""The experiment that separates 1/b from the dead volumes (estimator.bulk_experiment)."""

from __future__ import annotations

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
