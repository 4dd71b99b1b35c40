"""Optimised excitation: inside the limits, at rest at both ends, and better conditioned than a
single sine of the same length within the same limits (MFS paper, Sec. 3)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.excitation import (
    condition_number,
    max_single_sine,
    observation_matrix,
    optimise_mfs,
    trajectory_condition,
)
from controller.limits import JointLimits
from controller.plant.params import PlantParams

HOME2 = np.radians([40.0, 30.0])


def _inside(
    traj: object, limits: list[JointLimits], period: float, fraction: float, margin: float
) -> None:
    t = np.linspace(0, period, 20001)
    q, qd, qdd = traj.sample(t)  # type: ignore[attr-defined]
    for j, lim in enumerate(limits):
        assert q[:, j].max() <= lim.position_max - margin + 1e-9
        assert q[:, j].min() >= lim.position_min + margin - 1e-9
        assert np.abs(qd[:, j]).max() <= fraction * lim.max_velocity * (1 + 1e-6)
        assert np.abs(qdd[:, j]).max() <= fraction * lim.max_acceleration * (1 + 1e-6)


@pytest.fixture(scope="module")
def mech2(params2: PlantParams, rig2: tuple) -> object:
    return optimise_mfs(
        HOME2,
        0.1,
        5,
        rig2[1],
        model="mechanical",
        params=params2,
        seed=2,
        n_samples=120,
        restarts=1,
        maxiter=40,
    )


def test_optimised_mfs_within_limits_and_at_rest(mech2: object, rig2: tuple) -> None:
    r = mech2
    _inside(r.trajectory, rig2[1], 10.0, 0.9, 0.02)  # type: ignore[attr-defined]
    q, qd, qdd = r.trajectory.sample(np.array([0.0, 10.0]))  # type: ignore[attr-defined]
    np.testing.assert_allclose(q, [HOME2, HOME2], atol=1e-9)
    np.testing.assert_allclose(qd, 0.0, atol=1e-9)
    np.testing.assert_allclose(qdd, 0.0, atol=1e-8)


def test_mfs_condition_at_least_5x_better_than_single_sine(
    mech2: object, params2: PlantParams, rig2: tuple
) -> None:
    sine = max_single_sine(HOME2, 0.1, rig2[1])
    _inside(sine, rig2[1], 10.0, 0.9, 0.02)
    c_sine = trajectory_condition(sine, "mechanical", params2)
    c_mfs = trajectory_condition(mech2.trajectory, "mechanical", params2)  # type: ignore[attr-defined]
    assert c_mfs * 5 <= c_sine, (c_mfs, c_sine)


def test_fluid_model_optimisation_one_joint(params1: PlantParams, rig1: tuple) -> None:
    home = np.radians([40.0])
    r = optimise_mfs(
        home,
        0.2,
        4,
        rig1[1],
        model="fluid",
        params=params1,
        seed=0,
        n_samples=100,
        restarts=1,
        maxiter=30,
        fraction=0.5,
    )
    _inside(r.trajectory, rig1[1], 5.0, 0.5, 0.02)
    assert np.isfinite(r.condition) and r.condition >= 1.0
    assert r.condition == pytest.approx(trajectory_condition(r.trajectory, "fluid", params1, 100))
    assert (
        r.condition
        <= trajectory_condition(max_single_sine(home, 0.2, rig1[1], 0.5), "fluid", params1, 100)
        * 1.0001
    )


def test_observation_matrix_shapes(params2: PlantParams) -> None:
    t = np.linspace(0, 1, 50)
    q = HOME2 + 0.1 * np.sin(2 * np.pi * np.outer(t, [1.0, 2.0]))
    qd = np.gradient(q, t, axis=0)
    qdd = np.gradient(qd, t, axis=0)
    assert observation_matrix("mechanical", t, q, qd, qdd).shape == (100, 7)
    assert observation_matrix("fluid", t, q, qd, qdd, params2).shape == (200, 9)
    assert condition_number(np.eye(3)) == 1.0
    assert condition_number(np.zeros((3, 2))) == np.inf
    with pytest.raises(ValueError, match="needs plant parameters"):
        observation_matrix("fluid", t, q, qd, qdd)
    with pytest.raises(ValueError, match="model must be"):
        observation_matrix("thermal", t, q, qd, qdd)


def test_bad_requests(rig2: tuple) -> None:
    with pytest.raises(ValueError, match="model must be one of"):
        optimise_mfs(HOME2, 0.1, 5, rig2[1], model="x")
    with pytest.raises(ValueError, match="outside its limits"):
        optimise_mfs(np.radians([80.0, 30.0]), 0.1, 5, rig2[1])
    with pytest.raises(ValueError, match="one JointLimits per joint"):
        optimise_mfs(HOME2, 0.1, 5, rig2[1][:1])


@settings(max_examples=8, deadline=None)
@given(
    lo=st.floats(10.0, 30.0),
    span=st.floats(10.0, 40.0),
    vmax=st.floats(10.0, 80.0),
    amax=st.floats(50.0, 800.0),
    base=st.floats(0.1, 0.5),
    seed=st.integers(0, 1000),
)
def test_any_optimised_mfs_respects_its_limits(
    params1: PlantParams, lo: float, span: float, vmax: float, amax: float, base: float, seed: int
) -> None:
    lim = [JointLimits.from_degrees(lo, lo + span, vmax, amax, 6.0)]
    center = [np.radians(lo + span / 2)]
    r = optimise_mfs(
        center,
        base,
        4,
        lim,
        model="mechanical",
        params=params1,
        seed=seed,
        n_samples=60,
        restarts=1,
        maxiter=8,
        fraction=0.8,
        position_margin=0.01,
    )
    _inside(r.trajectory, lim, 1.0 / base, 0.8, 0.01)
    q, qd, _ = r.trajectory.sample(np.array([0.0, 1.0 / base]))
    np.testing.assert_allclose(q[:, 0], center[0], atol=1e-9)
    np.testing.assert_allclose(qd, 0.0, atol=1e-9)
