"""`rigctl predict` and the bulk experiment plan with what the engineer knows (an earlier
identification, or the profile's initial guesses), never with a simulated rig's true plant
(daq.param_set.planning_params)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

from controller.experiment import Experiment
from daq.param_set import planning_params
from daq.profile import load_profile
from estimator.predict import predict_service_rig
from tests.conftest import PROFILES
from tests.params.conftest import write_params

ROOT = Path(__file__).resolve().parents[2]


def short_experiment() -> Experiment:
    """The standard experiment's settle and one MFS period: enough motion to plan, quick."""
    with (ROOT / "experiments" / "standard-2dof.toml").open("rb") as f:
        d = tomllib.load(f)
    mfs = next(s for s in d["segments"] if s["name"] == "mfs")
    d["segments"] = [d["segments"][0], {**mfs, "repeats": 1}]
    return Experiment.from_dict(d)


def with_other_truth(src: Path, dst: Path) -> Path:
    """The profile with the simulator's true plant changed (inertias doubled, first flow gains
    halved) and everything an engineer declares left as it is."""
    text = src.read_text()
    head, sep, truth = text.partition("[backend.sim.plant]")
    assert sep, "the profile has no simulator truth to change"
    truth = re.sub(
        r"inertia = ([0-9.e+-]+)", lambda m: f"inertia = {2 * float(m.group(1))!r}", truth
    )
    truth = re.sub(
        r"flow_gains = \[([0-9.e+-]+)", lambda m: f"flow_gains = [{float(m.group(1)) / 2!r}", truth
    )
    dst.write_text(head + sep + truth)
    assert (
        load_profile(dst).backend.sim.plant.joints[0].inertia
        != load_profile(src).backend.sim.plant.joints[0].inertia
    )
    return dst


def test_without_guesses_or_a_file_planning_is_refused_naming_what_is_missing() -> None:
    with pytest.raises(ValueError) as err:
        planning_params(load_profile(PROFILES / "sim-2dof.toml"))
    msg = str(err.value)
    for word in ("M1", "Cf++2", "1/b", "--params", "initial guesses"):
        assert word in msg


def test_a_bad_parameter_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "p.toml"
    bad.write_text("rig = [")
    with pytest.raises(ValueError, match=r"--params .*p\.toml: not valid TOML"):
        planning_params(load_profile(PROFILES / "sim-2dof.toml"), bad)


def test_the_prediction_follows_the_plan_and_never_the_simulators_truth(tmp_path: Path) -> None:
    profile = PROFILES / "sim-2dof.toml"
    other = with_other_truth(profile, tmp_path / "other-truth.toml")
    exp = short_experiment()
    plan = write_params(tmp_path / "plan.toml", "sim-2dof.toml")
    heavier = write_params(tmp_path / "heavier.toml", "sim-2dof.toml", scale=1.5)

    def sigmas(prof: Path, params: Path) -> np.ndarray:
        pred = predict_service_rig(prof, exp, draws=4, params_path=params)
        return np.concatenate([m.sigma for m in pred.models])

    base = sigmas(profile, plan)
    assert np.isfinite(base).all() and (base > 0).all()
    # Same plan, another true plant: the same prediction, to the bit.
    np.testing.assert_array_equal(sigmas(other, plan), base)
    # Another plan on the same rig: another prediction (the plan is what it uses).
    assert not np.allclose(sigmas(profile, heavier), base, rtol=1e-6)
