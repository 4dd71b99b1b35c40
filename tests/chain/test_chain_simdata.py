"""The excavator's offline identification run (`estimator.chain_simdata.run_experiment`):
tracked with the nominal chain's model feed-forward, the motion follows the plan closer than
with the velocity feed-forward, on a true chain that is not the nominal one."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np

from controller.chain_experiments import experiment_trajectory
from controller.experiment import Experiment
from controller.plant.chain.profile import load_chain_profile
from estimator.chain_simdata import run_experiment

ROOT = Path(__file__).resolve().parents[2]


def test_the_model_feed_forward_follows_the_plan_closer_on_an_unlike_plant() -> None:
    prof = load_chain_profile(ROOT / "hw_profiles" / "sim-excavator.toml")
    nominal = prof.chain
    # The true machine: every link 5 % heavier and viscous friction the profile lacks.
    truth = replace(nominal, joints=tuple(
        replace(j, link=replace(j.link, mass=1.05 * j.link.mass, viscous_friction=2.0e3))
        for j in nominal.joints
    ))  # fmt: skip
    d = tomllib.loads((ROOT / "experiments" / "excavator-multisine.toml").read_text())
    d["segments"] = [dict(d["segments"][1], repeats=1)]
    ref = experiment_trajectory(Experiment.from_dict(d))
    miss = {}
    for ff in (False, True):
        run = run_experiment(truth, ref, prof.sensors["better"], nominal=nominal, fs=200.0,
                             nsub=5, bandwidth_hz=0.15, feedforward=ff)  # fmt: skip
        e = run.truth["q"] - run.reference["q"]
        miss[ff] = np.degrees(np.sqrt(np.mean(e**2, axis=0)))
    assert np.all(miss[True] < 0.6 * miss[False]), miss
