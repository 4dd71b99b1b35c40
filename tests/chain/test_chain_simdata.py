"""The excavator's offline identification run (`estimator.chain_simdata.run_experiment`):
tracked with the nominal chain's model feed-forward, the motion follows the plan closer than
with the velocity feed-forward, on a true chain that is not the nominal one."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from controller.chain_experiments import experiment_trajectory
from controller.experiment import Experiment
from controller.plant.chain.plant import ChainPlant
from controller.plant.chain.profile import load_chain_profile
from estimator.chain_simdata import (
    model_feedforward,
    noise_sigma,
    quantum,
    read_sensors,
    reread,
    run_experiment,
    tracking_gains,
)

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
    # The command is p · (planned − read angle) plus the *nominal* chain's feed-forward (the
    # engineer's model, not the simulator's truth).
    rq = run.reference
    gains = tracking_gains(nominal, ref.start(), 0.15)
    ff_nominal = model_feedforward(nominal, rq["q"], rq["qd"], rq["qdd"])
    np.testing.assert_allclose(
        run.channels["v"], gains.p * (rq["q"] - run.channels["q"]) + ff_nominal, atol=1e-9
    )
    # Without the option, the velocity feed-forward: the default.
    plain = run_experiment(truth, ref, prof.sensors["better"], nominal=nominal, fs=200.0,
                           nsub=5, bandwidth_hz=0.15)  # fmt: skip
    np.testing.assert_allclose(
        plain.channels["v"],
        gains.p * (rq["q"] - plain.channels["q"]) + gains.ff * rq["qd"],
        atol=1e-9,
    )


def test_readings_are_the_truth_plus_offset_and_uniform_noise_on_the_converter_grid() -> None:
    """`read_sensors`: mean = truth + the transducer's offset, spread = `noise_sigma` (uniform
    within ± the accuracy, with the quantisation), every reading a whole number of steps."""
    grade = load_chain_profile(ROOT / "hw_profiles" / "sim-excavator.toml").sensors["thesis"]
    rng = np.random.default_rng(11)
    n = 200_000
    q = np.full((n, 2), [0.3, -0.2])
    pc, pr = np.full((n, 2), [8.0e6, 12.0e6]), np.full((n, 2), [9.0e6, 3.0e6])
    offsets = [(2.0e5, -1.0e5), (-3.0e5, 4.0e5)]
    qm, pcm, prm = read_sensors(q, pc, pr, grade, rng, offsets)
    sq, sp = noise_sigma(grade)
    step_q, step_p = quantum(grade)
    assert step_q == pytest.approx(2 * np.pi / 2**14) and step_p == pytest.approx(
        5000.0 * 6894.757 / 2**12, rel=1e-6
    )
    for got, want, sigma, step in (
        (qm, q[0], sq, step_q),
        (pcm, pc[0] + [2.0e5, -3.0e5], sp, step_p),
        (prm, pr[0] + [-1.0e5, 4.0e5], sp, step_p),
    ):
        np.testing.assert_allclose(got.mean(axis=0), want, atol=4 * sigma / np.sqrt(n))
        np.testing.assert_allclose(got.std(axis=0), sigma, rtol=0.02)
        np.testing.assert_allclose(got / step, np.round(got / step), atol=1e-6)


def test_a_reread_keeps_the_given_angle_readings_and_draws_new_pressures() -> None:
    prof = load_chain_profile(ROOT / "hw_profiles" / "sim-excavator.toml")
    d = tomllib.loads((ROOT / "experiments" / "excavator-multisine.toml").read_text())
    d["segments"] = [dict(d["segments"][1], repeats=1, duration_s=1.0)]
    run = run_experiment(prof.chain, experiment_trajectory(Experiment.from_dict(d)),
                         prof.sensors["better"], fs=200.0, nsub=5, bandwidth_hz=0.15)  # fmt: skip
    again = reread(run, prof.sensors["better"], np.random.default_rng(3), q_read=run.channels["q"])
    np.testing.assert_array_equal(again.channels["q"], run.channels["q"])
    assert not np.array_equal(again.channels["p_cap"], run.channels["p_cap"])
    fresh = reread(run, prof.sensors["better"], np.random.default_rng(3))
    assert not np.array_equal(fresh.channels["q"], run.channels["q"])
    # The loop closed on the recorded angles: the same grid, within a step of the truth + noise.
    e_q = np.radians(prof.sensors["better"].resolver_accuracy_deg)
    assert (
        np.abs(run.channels["q"] - run.truth["q"]).max() <= e_q + quantum(prof.sensors["better"])[0]
    )


def test_the_tracking_gains_are_the_inverse_valve_velocity_gain() -> None:
    """ff = displacement per radian / (k_v · mean C_f · √(p_s/2)) per joint (the swing's motor
    through its gear, a jack joint's cap areas times their moment arms), p = 2π f · ff."""
    prof = load_chain_profile(ROOT / "hw_profiles" / "sim-excavator.toml")
    chain = prof.chain
    g = tracking_gains(chain, prof.home, bandwidth_hz=0.5)
    lev = ChainPlant(chain).jack_lengths(prof.home)
    jacks = chain.jacks()
    for i, joint in enumerate(chain.joints):
        v = joint.valve
        speed = v.gain * np.mean(v.flow_gains) * np.sqrt(chain.supply_pressure / 2)
        if i == 0:
            disp = joint.drive.displacement * joint.drive.gear_ratio
        else:
            disp = sum(jk.area_cap * lev[k, 1] for k, (ii, jk) in enumerate(jacks) if ii == i)
        assert g.ff[i] == pytest.approx(disp / speed, rel=1e-12), joint.link.name
    np.testing.assert_allclose(g.p, 2 * np.pi * 0.5 * g.ff, rtol=1e-12)
