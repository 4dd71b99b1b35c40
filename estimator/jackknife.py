"""Delete-one-group (block) jackknife of a least-squares estimate from per-group normal
equations, shared by the batch fit and the online chain (issue 13, item 3).

Groups are contiguous stretches of the run, so the scatter of the leave-one-out estimates
carries what the white-residual formula σ²P misses: correlated residuals, and bias that changes
along the run (one part of the trajectory disagreeing with another).
"""

from __future__ import annotations

import numpy as np

#: Fewer groups than this give no jackknife (too few to estimate a variance).
MIN_GROUPS = 8


def jackknife_from_normal(A: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """A (G, n, n), b (G, n): each group's WᵀW and WᵀY. Returns the jackknife variance of
    each parameter, or None (fewer than MIN_GROUPS groups, or a singular leave-one-out)."""
    G = A.shape[0]
    if G < MIN_GROUPS:
        return None
    At, bt = A.sum(axis=0), b.sum(axis=0)
    est = np.empty(b.shape)
    for g in range(G):
        try:
            est[g] = np.linalg.solve(At - A[g], bt - b[g])
        except np.linalg.LinAlgError:
            return None
    return (G - 1) / G * np.sum((est - est.mean(axis=0)) ** 2, axis=0)


def merge_groups(A: np.ndarray, b: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Sum consecutive groups into at most `groups` nearly equal ones (long stretches see slow
    bias drift that short ones average within themselves)."""
    G = A.shape[0]
    if G <= groups:
        return A, b
    edges = (np.arange(groups + 1) * G) // groups
    return (
        np.add.reduceat(A, edges[:-1], axis=0),
        np.add.reduceat(b, edges[:-1], axis=0),
    )


def inflate(cov: np.ndarray, var_jack: np.ndarray | None) -> np.ndarray:
    """cov with each parameter's variance raised to the jackknife's where that is larger
    (correlations kept)."""
    if var_jack is None:
        return cov
    infl = np.sqrt(np.maximum(1.0, var_jack / np.maximum(np.diag(cov), 1e-300)))
    return cov * np.outer(infl, infl)
