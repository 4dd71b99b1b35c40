"""Periodic averaging over an experiment's repeats and maximum-likelihood weighting with the
noise variance the repeats reveal (seed 004; issue 14, item 2).

An excitation repeated K times (the standard experiment's MFS: 6 × 10 s) gives, at every phase
of the period, K samples of the same noise-free response plus independent noise. So

  * the mean over repeats has the noise variance divided by K (and any periodic model error
    unchanged: averaging cannot remove a bias, only the noise);
  * the spread between repeats estimates the noise variance itself, per channel and phase,
    without a model: s² = Σ_k (x_k − x̄)² / (K − 1);
  * in the regression, the equation error's spread between repeats (e_k = y_k − Φ_k θ at one
    phase) is the noise each averaged equation carries, so weighting it by K / s²_e is the
    maximum-likelihood (Gauss–Markov) weighting for independent Gaussian noise, and
    (Φᵀ W Φ)⁻¹ its covariance — no residual-based σ² needed.

Offline only: online, the RLS sees each sample once and cannot wait for the K-th repeat; it
keeps its per-equation residual weighting (estimator.rls).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def split_repeats(x: np.ndarray, period: int, repeats: int, start: int = 0) -> np.ndarray:
    """x (N, …) → (repeats, period, …): the repeats side by side, aligned on phase."""
    x = np.asarray(x)
    if period < 1 or repeats < 2:
        raise ValueError(f"need period ≥ 1 sample and ≥ 2 repeats, got {period}, {repeats}")
    end = start + period * repeats
    if start < 0 or end > x.shape[0]:
        raise ValueError(
            f"{repeats} repeats of {period} samples from row {start} need rows up to {end}, "
            f"the data has {x.shape[0]}"
        )
    return x[start:end].reshape(repeats, period, *x.shape[1:])


@dataclass(frozen=True)
class Averaged:
    mean: np.ndarray  # (period, …) mean over repeats
    var: np.ndarray  # (period, …) between-repeat variance of one repeat (ddof 1)
    repeats: int

    @property
    def noise_var(self) -> np.ndarray:
        """Per channel: the noise variance of one sample, pooled over the period."""
        return np.mean(self.var, axis=0)

    @property
    def mean_var(self) -> np.ndarray:
        """Variance of the averaged signal: noise_var / K."""
        return self.var / self.repeats


def average(x: np.ndarray, period: int, repeats: int, start: int = 0) -> Averaged:
    xs = split_repeats(x, period, repeats, start)
    return Averaged(xs.mean(axis=0), xs.var(axis=0, ddof=1), repeats)


@dataclass(frozen=True)
class PeriodicFit:
    theta: np.ndarray
    cov: np.ndarray  # (Φᵀ W Φ)⁻¹ with W = K / s²_e (maximum likelihood)
    noise_var: np.ndarray  # (m,) per equation: one repeat's equation-error variance, pooled
    sigma: np.ndarray


def periodic_wls(Phi_k: np.ndarray, y_k: np.ndarray, iterations: int = 2) -> PeriodicFit:
    """ML least squares on repeat-averaged equations. Phi_k (K, P, m, n), y_k (K, P, m): the
    model's regressor and output evaluated on each repeat (phase-aligned).

    Start: ordinary LS on the averages. Then, per equation j, the equation errors'
    between-repeat variance pooled over the period s²_j (the noise; a periodic model error is
    the same in every repeat and cancels in the spread), weights K / s²_j on the averaged
    equations, re-solve; `iterations` times (the weights depend on θ only through Φ's noise)."""
    K, P, m, n = Phi_k.shape
    if y_k.shape != (K, P, m):
        raise ValueError(f"y_k must be {(K, P, m)}, got {y_k.shape}")
    Phi = Phi_k.mean(axis=0).reshape(P * m, n)
    y = y_k.mean(axis=0).reshape(P * m)
    theta = np.linalg.lstsq(Phi, y, rcond=None)[0]
    s2 = np.ones(m)
    for _ in range(max(1, iterations)):
        e = y_k - np.einsum("kpmn,n->kpm", Phi_k, theta)
        s2 = np.maximum(np.mean(e.var(axis=0, ddof=1), axis=0), np.finfo(float).tiny)
        w = np.sqrt(np.tile(K / s2, P))
        theta = np.linalg.lstsq(Phi * w[:, None], y * w, rcond=None)[0]
    Ww = Phi * np.sqrt(np.tile(K / s2, P))[:, None]
    cov = np.linalg.pinv(Ww.T @ Ww, hermitian=True)
    return PeriodicFit(theta, cov, s2, np.sqrt(np.diag(cov)))
