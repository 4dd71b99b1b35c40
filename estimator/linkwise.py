"""Lin's recursive link-by-link identification (seed 001; issue 14 item 4), as an option of the
batch identification beside the stacked estimate.

Lin identifies the outermost link first, from its own equation of motion, then each inner link
with the outer links' parameters fixed at their estimates — a sequence of small, well
conditioned problems instead of one stacked one. Here the same recording feeds both: for a
model with one equation per joint (the mechanical ones: torque i is equation i), equation
n, n−1, …, 1 in turn is fitted for the parameters it holds that are not yet fixed, with the
fixed ones' part moved to the left-hand side. What the sequence costs is propagated: the
covariance of a stage adds the fixed parameters' covariance carried through the stage's
least-squares map (the outer link's error does enter the inner link's estimate).

Works in the batch's normalised units (`estimator.observation.observation`); returns physical θ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class LinkwiseFit:
    names: list[str]
    theta: np.ndarray
    sigma_pct: np.ndarray
    #: Stage (1 = the outermost link's equation) at which each parameter was fitted; 0 =
    #: in no equation's support (left NaN).
    stage: np.ndarray


def link_by_link(
    Phi: np.ndarray,
    y: np.ndarray,
    names: list[str],
    param_scale: np.ndarray,
    kappa: float = 1.0,
) -> LinkwiseFit | None:
    """Φ (r, m, n), y (r, m) normalised; one equation per joint, joint order. None when the
    model has a single equation (nothing to sequence)."""
    r, m, n = Phi.shape
    if m < 2:
        return None
    theta = np.full(n, np.nan)
    cov = np.zeros((n, n))
    fixed = np.zeros(n, dtype=bool)
    stage = np.zeros(n, dtype=int)
    for k, j in enumerate(range(m - 1, -1, -1), start=1):
        W = Phi[:, j, :]
        norms = np.linalg.norm(W, axis=0)
        free = (~fixed) & (norms > 1e-9 * max(float(norms.max()), 1e-300))
        if not free.any():
            continue
        Wf, Wx = W[:, free], W[:, fixed]
        Y = y[:, j] - (Wx @ theta[fixed] if fixed.any() else 0.0)
        A = np.linalg.pinv(Wf)  # θ_free = A Y
        th = A @ Y
        res = Y - Wf @ th
        s2 = float(res @ res / max(r - int(free.sum()), 1))
        c = kappa * s2 * (A @ A.T)
        if fixed.any():
            B = A @ Wx  # how the fixed parameters' error moves this stage's estimate
            c = c + B @ cov[np.ix_(fixed, fixed)] @ B.T
        idx = np.flatnonzero(free)
        theta[idx] = th
        cov[np.ix_(idx, idx)] = c
        fixed |= free
        stage[idx] = k
    phys = theta * param_scale
    sig = np.sqrt(np.maximum(np.diag(cov), 0.0)) * param_scale
    with np.errstate(divide="ignore", invalid="ignore"):
        sp = 100.0 * sig / np.abs(phys)
    return LinkwiseFit(names=list(names), theta=phys, sigma_pct=sp, stage=stage)
