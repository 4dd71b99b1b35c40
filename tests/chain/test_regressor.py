"""The chain's regressor (estimator.chain_regressor) against the plant's Newton–Euler torques,
and the base parameters / identifiability classes found from it (estimator.base_params)."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest

from controller.plant.chain.plant import ChainPlant, stroke_limits
from controller.plant.chain.profile import ChainProfile
from estimator.base_params import ALONE, COMBINATION, UNIDENTIFIABLE, identifiability
from estimator.chain_regressor import ChainRegressor


def _states(home: np.ndarray, k: int, seed: int):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    n = len(home)
    return (
        home + rng.uniform(-0.3, 0.3, (k, n)),
        rng.normal(0, 1, (k, n)),
        rng.normal(0, 2, (k, n)),
    )


def _q_range(profile: ChainProfile) -> np.ndarray:
    lim = stroke_limits(ChainPlant(profile.chain), profile.home)
    return np.where(np.isfinite(lim), lim, np.array([-np.pi, np.pi]))


@pytest.mark.parametrize("minor", [True, False])
def test_regressor_times_true_parameters_is_the_plants_torque(
    excavator: ChainProfile, minor: bool
) -> None:
    chain = excavator.chain if minor else excavator.chain.without_minor_links()
    reg = ChainRegressor(excavator.chain, minor=minor)
    plant = ChainPlant(chain)
    q, qd, qdd = _states(excavator.home, 30, 11)
    tau = reg.matrix(q, qd, qdd) @ reg.parameters(chain)
    ref = np.array([plant.inverse_dynamics(*s) for s in zip(q, qd, qdd, strict=True)])
    assert np.max(np.abs(tau - ref) / np.max(np.abs(ref), axis=0)) < 1e-9


def test_friction_armature_and_offsets_enter_as_the_plant_and_sensors_put_them(
    excavator: ChainProfile,
) -> None:
    """Viscous friction and armature as the plant's (τ −= f_v q̇, + I_a q̈ in rnea); an offset
    o on a chamber's transducer adds T·o to the torque the pressures give."""
    links = [
        dataclasses.replace(j, link=dataclasses.replace(j.link, viscous_friction=100.0 * (i + 1),
                                                       armature=3.0 * (i + 1)))
        for i, j in enumerate(excavator.chain.joints)
    ]  # fmt: skip
    chain = dataclasses.replace(excavator.chain, joints=tuple(links))
    reg = ChainRegressor(chain)
    plant = ChainPlant(chain)
    q, qd, qdd = _states(excavator.home, 10, 5)
    offsets = [(1e4 * (i + 1), -2e4 * (i + 1)) for i in range(chain.n)]
    pi = reg.parameters(offsets=offsets)
    tau = reg.matrix(q, qd, qdd) @ pi
    fv = np.array([100.0 * (i + 1) for i in range(chain.n)])
    rigid = np.array([plant.inverse_dynamics(*s) for s in zip(q, qd, qdd, strict=True)])
    tc, tr = reg.torque_per_pressure(q)
    o = np.array(offsets)
    expected = rigid + fv * qd + tc * o[:, 0] - tr * o[:, 1]
    assert np.max(np.abs(tau - expected) / np.max(np.abs(expected), axis=0)) < 1e-9


def test_base_parameters_reproduce_the_torques_and_classes_follow_the_rank(
    excavator: ChainProfile,
) -> None:
    reg = ChainRegressor(excavator.chain)
    bp = identifiability(reg.matrix, reg.names, _q_range(excavator), count=300)
    q, qd, qdd = _states(excavator.home, 40, 2)
    Y = reg.matrix(q, qd, qdd)
    pi = reg.parameters()
    # W π = W_b π_b on states the decomposition never saw.
    np.testing.assert_allclose(
        bp.reduce(Y) @ bp.values(pi), Y @ pi, rtol=0, atol=1e-7 * np.abs(Y @ pi).max()
    )
    Wb = bp.reduce(Y.reshape(-1, reg.p))
    Wb = Wb / np.linalg.norm(Wb, axis=0)  # units apart (kg against kg·m²)
    assert np.linalg.matrix_rank(Wb, tol=1e-9 * np.linalg.norm(Wb, 2)) == bp.rank
    cls = dict(zip(reg.names, bp.classes, strict=True))
    # Thesis §4.4.2: the swing turns only about z, under gravity along z: its mass, first
    # moment along z and inertias about x, y never reach a torque.
    for p in (
        "swing.m",
        "swing.mx",
        "swing.mz",
        "swing.Ixx",
        "swing.Iyy",
        "swing.Ixy",
        "swing.Iyz",
    ):
        assert cls[p] == UNIDENTIFIABLE, p
    # Two identical boom jacks in parallel: only the sum of their friction is seen; the
    # offsets of a jack's two chambers only in the combination A⁺o⁺ − A⁻o⁻.
    assert cls["boom.jack0.fva"] == cls["boom.jack1.fva"] == COMBINATION
    assert cls["stick.o_cap"] == COMBINATION
    assert cls["bucket.fv"] == cls["stick.Ia"] == ALONE
    counts = collections.Counter(bp.classes)
    assert counts[ALONE] + counts[COMBINATION] + counts[UNIDENTIFIABLE] == reg.p
    # Every parameter in a combination appears in some base parameter's definition.
    used = set(bp.base_names) | {reg.names[k] for k in np.nonzero(np.any(bp.beta, axis=0))[0]
                                 for k in [bp.dependent[k]]}  # fmt: skip
    for nm, c in cls.items():
        assert (nm in used) == (c != UNIDENTIFIABLE), nm


def test_body_rows_mark_the_base_parameters_a_cad_model_gives(excavator: ChainProfile) -> None:
    """`body_rows`: a base parameter made of the bodies' barycentric parameters only; friction
    and transducer offsets (which combine with nothing) are not."""
    from estimator.chain_identify import body_rows

    reg = ChainRegressor(excavator.chain)
    bp = identifiability(reg.matrix, reg.names, _q_range(excavator), count=300)
    from estimator.chain_regressor import BODY_PARAMS, EXTRA_MEANING

    rows = body_rows(reg, bp)
    k = bp.matrix()
    for i, (name, body) in enumerate(zip(bp.base_names, rows, strict=True)):
        parts = {reg.names[c].rsplit(".", 1)[1] for c in np.flatnonzero(k[i])}
        if body:
            assert parts <= set(BODY_PARAMS), (name, parts)
        else:
            assert parts & set(EXTRA_MEANING), (name, parts)
    assert 0 < rows.sum() < bp.rank
    assert not rows[bp.base_names.index("stick.fv")] and rows[bp.base_names.index("bucket.mx")]
    # Held for prediction: a bodies-only one the run flagged, never a friction.
    from estimator.chain_identify import held_bodies

    np.testing.assert_array_equal(held_bodies(reg, bp, bp.base_names), rows)
    held = held_bodies(reg, bp, {"stick.fv", "bucket.mx"})
    assert list(np.flatnonzero(held)) == [bp.base_names.index("bucket.mx")]
    assert not held_bodies(reg, bp, ()).any()


def test_a_constrained_fit_holds_its_fixed_parameters_and_fits_the_rest() -> None:
    """`solve_fixed`: the held parameters stay at the prior; with the prior right the others
    come out exact; with it wrong they absorb what they can of its error (not left alone)."""
    from estimator.chain_identify import solve, solve_fixed

    rng = np.random.default_rng(3)
    phi = rng.normal(size=(200, 2, 5))
    theta = np.array([2.0, -1.0, 0.5, 3.0, 0.1])
    y = np.einsum("mnr,r->mn", phi, theta)
    w = np.array([1.0, 4.0])
    fixed = np.array([False, True, False, False, True])
    prior = np.where(fixed, theta, 0.0)
    got = solve_fixed(phi, y, w, prior, fixed)
    np.testing.assert_allclose(got, theta, rtol=1e-12, atol=1e-12)
    wrong = prior + np.where(fixed, 0.5, 0.0)
    got = solve_fixed(phi, y, w, wrong, fixed)
    assert np.array_equal(got[fixed], wrong[fixed])
    rest = y - np.einsum("mnr,r->mn", phi[..., fixed], wrong[fixed])
    np.testing.assert_allclose(got[~fixed], solve(phi[..., ~fixed], rest, w)[0], rtol=1e-12)
    assert not np.allclose(got[~fixed], theta[~fixed], atol=1e-3)
