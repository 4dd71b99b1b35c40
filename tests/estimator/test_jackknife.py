"""Block jackknife from per-group normal equations (estimator.jackknife), used online and batch."""

from __future__ import annotations

import numpy as np

from estimator.jackknife import inflate, jackknife_from_normal, merge_groups


def _groups(drift: float, G: int = 32, r: int = 200, seed: int = 1):
    rng = np.random.default_rng(seed)
    A, b, W_all, Y_all = [], [], [], []
    for g in range(G):
        W = rng.standard_normal((r, 2))
        theta = np.array([1.0 + drift * np.sin(2 * np.pi * g / G), -2.0])
        Y = W @ theta + 0.01 * rng.standard_normal(r)
        A.append(W.T @ W)
        b.append(W.T @ Y)
        W_all.append(W)
        Y_all.append(Y)
    return np.stack(A), np.stack(b), W_all, Y_all


def test_matches_explicit_leave_one_out() -> None:
    A, b, W, Y = _groups(drift=0.05)
    est = []
    for g in range(len(W)):
        Wg = np.concatenate([w for k, w in enumerate(W) if k != g])
        Yg = np.concatenate([y for k, y in enumerate(Y) if k != g])
        est.append(np.linalg.lstsq(Wg, Yg, rcond=None)[0])
    est = np.array(est)
    G = len(W)
    expected = (G - 1) / G * np.sum((est - est.mean(axis=0)) ** 2, axis=0)
    np.testing.assert_allclose(jackknife_from_normal(A, b), expected, rtol=1e-9)


def test_drift_raises_the_variance_and_inflate_uses_it() -> None:
    A0, b0, *_ = _groups(drift=0.0)
    A1, b1, *_ = _groups(drift=0.05)
    v0 = jackknife_from_normal(*merge_groups(A0, b0, 16))
    v1 = jackknife_from_normal(*merge_groups(A1, b1, 16))
    assert v0 is not None and v1 is not None
    assert v1[0] > 100 * v0[0] and v1[0] > 100 * v1[1]  # mostly the drifting parameter
    cov = np.diag([1e-8, 1e-8])
    out = inflate(cov, v1)
    np.testing.assert_allclose(np.diag(out), np.maximum(1e-8, v1), rtol=1e-12)
    assert inflate(cov, None) is cov


def test_too_few_groups_and_merging() -> None:
    A, b, *_ = _groups(drift=0.0, G=7)
    assert jackknife_from_normal(A, b) is None
    A, b, *_ = _groups(drift=0.0, G=40)
    Am, bm = merge_groups(A, b, 16)
    assert Am.shape[0] == 16 and np.allclose(Am.sum(axis=0), A.sum(axis=0))
    assert np.allclose(bm.sum(axis=0), b.sum(axis=0))
