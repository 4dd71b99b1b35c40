"""The excavator's experiments (controller.chain_experiments): link by link from the end
effector inside every window, written as an experiment file that plays back the same motion;
the MFS optimiser follows a caller's cost."""

from __future__ import annotations

import math

import numpy as np

from controller.chain_experiments import (
    chain_limits,
    experiment_dict,
    experiment_trajectory,
    link_by_link,
    optimised_multisine,
)
from controller.experiment import Experiment
from controller.plant.chain.profile import ChainProfile


def test_link_by_link_moves_one_joint_at_a_time_from_the_end_effector_within_limits(
    excavator: ChainProfile,
) -> None:
    lims = chain_limits(excavator.chain, excavator.home)
    traj = link_by_link(excavator.home, lims, repeats=1)
    assert [j for j, _, _ in traj.coefficients] == [3, 2, 1, 0]
    t = np.arange(0.0, traj.duration, 0.01)
    q, qd, qdd = traj.sample(t)
    for k, (j, _, _) in enumerate(traj.coefficients):
        seg = (t >= 10.0 * k) & (t < 10.0 * (k + 1))
        moving = np.ptp(q[seg], axis=0) > 1e-9
        assert moving.tolist() == [i == j for i in range(4)], (k, moving)
    for i, lm in enumerate(lims):
        assert lm.position_min <= q[:, i].min() and q[:, i].max() <= lm.position_max
        assert np.abs(qd[:, i]).max() <= lm.max_velocity
        assert np.abs(qdd[:, i]).max() <= lm.max_acceleration
    # Each joint uses most of its room (the scale stops at the first limit it meets).
    for i, lm in enumerate(lims):
        room = [
            (q[:, i].max() - excavator.home[i]) / (lm.position_max - excavator.home[i]),
            (excavator.home[i] - q[:, i].min()) / (excavator.home[i] - lm.position_min),
            np.abs(qd[:, i]).max() / lm.max_velocity,
            np.abs(qdd[:, i]).max() / lm.max_acceleration,
        ]
        assert max(room) > 0.85, (i, room)


def test_the_experiment_file_plays_back_the_designed_motion(excavator: ChainProfile) -> None:
    lims = chain_limits(excavator.chain, excavator.home)
    traj = link_by_link(excavator.home, lims, repeats=2)
    names = excavator.chain.names
    d = experiment_dict(
        "x", "", excavator.home, [(names[j], a, b) for j, a, b in traj.coefficients], 0.1, 2
    )
    exp = Experiment.from_dict(d)
    played = experiment_trajectory(exp)
    assert math.isclose(played.duration, traj.duration + 4.0)  # plus the two 2 s holds
    t = np.arange(0.0, traj.duration, 0.05)
    q0, _, _ = traj.sample(t)
    q1, _, _ = played.sample(t + 2.0)
    assert np.abs(q1 - q0).max() < 1e-6  # degrees rounded to 6 decimals in the file


def test_the_multisine_optimiser_minimises_the_callers_cost(excavator: ChainProfile) -> None:
    """A cost that rewards the bucket's swing: the optimum uses the bucket's room."""
    lims = chain_limits(excavator.chain, excavator.home)

    def cost(t: np.ndarray, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> float:
        return -float(np.ptp(q[:, 3]))

    res = optimised_multisine(excavator.home, lims, cost, n_samples=60, maxiter=15)
    assert res.condition == cost(*(lambda t: (t, *res.trajectory.sample(t)))(
        np.linspace(0, 10, 60, endpoint=False)))  # fmt: skip
    span = lims[3].position_max - lims[3].position_min
    assert -res.condition > 0.2 * span
