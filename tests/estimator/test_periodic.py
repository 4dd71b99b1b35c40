"""Periodic averaging and ML weighting from the spread between repeats (estimator.periodic)."""

from __future__ import annotations

import numpy as np
import pytest

from estimator.periodic import average, periodic_wls, split_repeats

K, P = 6, 2000


def test_repeat_variance_matches_injected_noise() -> None:
    rng = np.random.default_rng(1)
    sigma = np.array([0.1, 2.0, 3e4])  # e.g. rad, V, Pa: per channel, very different
    t = np.arange(K * P) / 1000.0
    clean = np.column_stack([np.sin(2 * np.pi * 0.5 * t), np.cos(2 * np.pi * t), 1e6 + 0 * t])
    avg = average(clean + rng.normal(0.0, sigma, (K * P, 3)), P, K)
    # Relative standard error of the pooled variance: √(2 / (P (K − 1))) = 1.4 %; 5 % ≈ 3.5σ.
    np.testing.assert_allclose(avg.noise_var, sigma**2, rtol=0.05)
    np.testing.assert_allclose(avg.mean, clean[:P], atol=5 * np.max(sigma / np.sqrt(K)))


def test_split_repeats_refuses_short_data() -> None:
    with pytest.raises(ValueError, match="rows up to"):
        split_repeats(np.zeros((100, 2)), 30, 4)
    with pytest.raises(ValueError, match="2 repeats"):
        split_repeats(np.zeros((100, 2)), 30, 1)


def test_ml_weights_and_sigma_from_the_repeats() -> None:
    """Two equations with 1 : 50 noise: the fit learns the noise per equation from the repeats,
    weights by it, and its σ is right (truth inside ±3σ, σ matching the scatter of the
    estimate over independent runs)."""
    theta_true = np.array([2.0, -0.5, 0.1])
    noise = np.array([0.01, 0.5])
    t = np.arange(P) / 200.0
    base = np.stack([np.sin(t), np.cos(3 * t), np.ones_like(t)], axis=-1)
    Phi = np.stack([base, base * np.array([1.0, 2.0, 0.5])], axis=1)  # (P, 2, 3)
    Phi_k = np.broadcast_to(Phi, (K, P, 2, 3))
    est, sig = [], []
    for seed in range(30):
        rng = np.random.default_rng(seed)
        y_k = np.einsum("kpmn,n->kpm", Phi_k, theta_true) + rng.normal(0.0, noise, (K, P, 2))
        fit = periodic_wls(Phi_k, y_k)
        np.testing.assert_allclose(fit.noise_var, noise**2, rtol=0.1)
        est.append(fit.theta)
        sig.append(fit.sigma)
    est, sig = np.array(est), np.array(sig)
    assert np.mean(np.abs(est - theta_true) <= 3 * sig) >= 0.95
    np.testing.assert_allclose(est.std(axis=0, ddof=1), sig.mean(axis=0), rtol=0.35)
