"""The pieces that made the batch (and online) inertial parameters accurate: the angle from the
potentiometer, five-point derivatives, the residual correlation factor of the batch covariance."""

from __future__ import annotations

import numpy as np
import pytest

from controller.plant.dynamics import cylinder, joint_from_piston
from daq.profile.plant import plant_params
from estimator.angles import AngleFusion
from estimator.batch import identify_run
from estimator.observation import derivative
from estimator.online import OnlineIdentifier
from estimator.wls import correlation_factor
from tests.conftest import PROFILES


@pytest.fixture(scope="module")
def params_2dof():
    from daq.profile import load_profile

    return plant_params(load_profile(PROFILES / "sim-2dof.toml"))


def test_joint_from_piston_inverts_the_cylinder_geometry(params_2dof) -> None:
    q = np.radians(np.stack([np.linspace(20, 60, 41), np.linspace(-4, 52, 41)], axis=1))
    s, _ = cylinder(params_2dof, q)
    np.testing.assert_allclose(joint_from_piston(params_2dof, s), q, atol=1e-12)


def test_fusion_keeps_the_resolver_offset_and_is_causal(params_2dof) -> None:
    rng = np.random.default_rng(3)
    q = np.radians([40.0, 30.0]) + 0.1 * np.sin(np.linspace(0, 20, 4000))[:, None]
    s, _ = cylinder(params_2dof, q)
    offset = np.array([0.01, -0.02])  # a resolver mounted off by 0.6° / -1.1°
    raw = np.zeros((4000, 10))
    raw[:, :2] = q + offset + rng.normal(0, 3.5e-4, q.shape)  # resolver
    raw[:, 2:4] = s + rng.normal(0, 5e-6, s.shape)  # potentiometer
    fusion = AngleFusion(params_2dof, 2)
    first = raw[:10].copy()
    fusion.apply(first)  # the first block only sees itself (10 samples: offset to ~1e-4)
    assert np.max(np.abs(first[:, :2] - q[:10] - offset)) < 6e-4
    for k in range(10, 4000, 500):
        fusion.apply(raw[k : k + 500])
    np.testing.assert_allclose(fusion.offset, offset, atol=2e-5)
    fused = raw[3000:, :2]
    # Far less noise than the resolver, centred on the resolver's zero.
    assert np.std(fused - q[3000:] - offset) < 1e-4
    with pytest.raises(ValueError, match="describe 2"):
        AngleFusion(params_2dof, 1)


def test_five_point_derivative_is_exact_at_the_hydraulic_resonance() -> None:
    fs, f = 1000.0, 16.0
    t = np.arange(2000) / fs
    x = np.sin(2 * np.pi * f * t)
    exact = 2 * np.pi * f * np.cos(2 * np.pi * f * t)
    d5 = derivative(x, 1 / fs)
    d3 = np.gradient(x, 1 / fs)
    inner = slice(2, -2)
    amp = 2 * np.pi * f
    assert np.max(np.abs(d5[inner] - exact[inner])) < 1e-5 * amp
    assert np.max(np.abs(d3[inner] - exact[inner])) > 1e-3 * amp  # the bias it removes


def test_correlation_factor_white_and_correlated() -> None:
    rng = np.random.default_rng(0)
    white = rng.normal(size=(20_000, 2))
    assert correlation_factor(white, 50) == pytest.approx(1.0, abs=0.25)
    rho = 0.8  # AR(1): long-run / short-run variance = (1 + ρ) / (1 − ρ) = 9
    e = np.zeros_like(white)
    for k in range(1, len(e)):
        e[k] = rho * e[k - 1] + white[k]
    assert correlation_factor(e, 200) == pytest.approx(9.0, rel=0.25)
    assert correlation_factor(e[:700], 100) == 1.0  # fewer than eight blocks


def test_potentiometer_angle_cuts_the_mechanical_residual(sim1dof_run) -> None:
    """The resolver's noise in q̈ dominates the mechanical equation error; without it the
    residual drops several-fold and the inertia is closer (batch and online alike)."""
    profile, layout, rows = sim1dof_run
    cols = {n: rows[:, i] for i, n in enumerate(layout.names)}
    params = plant_params(profile)
    fits = {
        fuse: identify_run(cols, params, profile=profile, fuse_angles=fuse).fits[0]
        for fuse in (False, True)
    }
    assert fits[True].equation_sigma[0] < 0.5 * fits[False].equation_sigma[0]
    assert fits[True].sigma_pct[0] < 0.5 * fits[False].sigma_pct[0]
    online = {}
    for fuse in (False, True):
        ident = OnlineIdentifier(profile, layout.names, fuse_angles=fuse)
        ident.update_rows(rows)
        online[fuse] = ident.estimate().models["mechanical"]["residual_var"]
    assert online[True] < 0.25 * online[False]
