"""Base parameters of a regressor found numerically, and the identifiability of every physical
parameter (thesis §4.3.5, §4.4.2; Gautier's numerical method as BIRDy and SymPyBotics use it).

The regressor W (stacked over random states that span every joint's range, velocity and
acceleration) has rank r < p: some parameters never move the measured torques, others move
them only in fixed combinations. QR with column pivoting, W P = Q R, puts r independent columns
first; with R = [R₁ R₂] (R₁ r×r upper triangular) the remaining columns are W₂ = W₁ β with
β = R₁⁻¹ R₂, so

    W π = W₁ (π₁ + β π₂) = W₁ π_b

and the base parameters π_b = π₁ + β π₂ are the identifiable combinations, each written out
in terms of the physical parameters (`BaseParameters.definitions`). Columns are scaled to unit
norm before the decomposition so that the pivoting and the rank decision do not depend on the
parameters' units (kg against kg·m²).

Classes (the thesis's Table 13 marks), independent of which columns the pivoting picked:
  * unidentifiable: the parameter's column is zero — it never reaches a measured torque;
  * identifiable alone: e_k lies in the row space of W (W's null space has no component
    along it), so some combination of the measurements gives π_k by itself;
  * identifiable in combination: it moves the torques, but only together with others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg

UNIDENTIFIABLE = "unidentifiable"
COMBINATION = "in combination"
ALONE = "alone"
#: Relative tolerance of the rank decision (singular values / |R_ii| against the largest).
RANK_TOL = 1e-9


@dataclass(frozen=True)
class BaseParameters:
    names: tuple[str, ...]  # physical parameter names (p)
    independent: np.ndarray  # (r,) indices of the base columns, in pivot order
    dependent: np.ndarray  # (p − r,) the others
    beta: np.ndarray  # (r, p − r): π_b = π[independent] + β π[dependent]
    classes: tuple[str, ...]  # per physical parameter
    singular_values: np.ndarray  # of the column-normalised W, descending

    @property
    def rank(self) -> int:
        return len(self.independent)

    @property
    def base_names(self) -> list[str]:
        return [self.names[k] for k in self.independent]

    def matrix(self) -> np.ndarray:
        """(r, p) map K with π_b = K π."""
        k = np.zeros((self.rank, len(self.names)))
        k[np.arange(self.rank), self.independent] = 1.0
        k[:, self.dependent] = self.beta
        return k

    def reduce(self, W: np.ndarray) -> np.ndarray:
        """W's base columns (any leading shape, parameters last)."""
        return W[..., self.independent]

    def values(self, pi: np.ndarray) -> np.ndarray:
        return self.matrix() @ pi

    def definitions(self, tol: float = 1e-10) -> list[str]:
        """Each base parameter as a sum of physical ones (coefficients rounded to 6 digits,
        terms smaller than `tol` relative dropped)."""
        out = []
        K = self.matrix()
        for row, k in zip(K, self.independent, strict=True):
            big = np.max(np.abs(row))
            terms = [self.names[k]]
            for j in np.argsort(-np.abs(row)):
                if j == k or abs(row[j]) <= tol * big:
                    continue
                c = row[j]
                if abs(abs(c) - 1.0) < 1e-9:
                    terms.append(("− " if c < 0 else "+ ") + self.names[j])
                else:
                    terms.append(("− " if c < 0 else "+ ") + f"{abs(c):.6g}·{self.names[j]}")
            out.append(" ".join(terms))
        return out


def base_parameters(W: np.ndarray, names: Sequence[str], tol: float = RANK_TOL) -> BaseParameters:
    """Base parameters of a stacked regressor W (rows, p)."""
    W = np.asarray(W, dtype=float).reshape(-1, len(names))
    norms = np.linalg.norm(W, axis=0)
    # A column at rounding level (e.g. 1e-14 of the largest) is an exact zero of the physics
    # that arithmetic missed: normalised, it would become noise the pivoting picks up.
    zero = norms <= tol * norms.max()
    scale = np.where(zero, 1.0, norms)
    Ws = np.where(zero[None, :], 0.0, W) / scale
    _, R, piv = scipy.linalg.qr(Ws, mode="economic", pivoting=True)
    diag = np.abs(np.diag(R))
    r = int(np.count_nonzero(diag > tol * diag[0]))
    ind, dep = piv[:r], piv[r:]
    beta_s = scipy.linalg.solve_triangular(R[:r, :r], R[:r, r:])
    # Back to physical units: W₂ D₂⁻¹ = W₁ D₁⁻¹ β_s → W₂ = W₁ (D₁⁻¹ β_s D₂).
    beta = beta_s / scale[ind][:, None] * scale[dep][None, :]
    beta[np.abs(beta_s) < 1e-10] = 0.0
    sv = np.linalg.svd(Ws, compute_uv=False)
    # Null space of the column-normalised W: e_k is in the row space iff row k of it is 0.
    _, s_full, vt = np.linalg.svd(Ws, full_matrices=True)
    rank_sv = int(np.count_nonzero(s_full > tol * s_full[0]))
    null = vt[rank_sv:].T  # (p, p − r)
    classes = []
    for k in range(len(names)):
        if zero[k]:
            classes.append(UNIDENTIFIABLE)
        elif null.shape[1] == 0 or np.linalg.norm(null[k]) < 1e-6:
            classes.append(ALONE)
        else:
            classes.append(COMBINATION)
    return BaseParameters(tuple(names), ind, dep, beta, tuple(classes), sv)


def random_states(
    n: int,
    count: int,
    q_range: np.ndarray,
    *,
    velocity: float = 1.0,
    acceleration: float = 3.0,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`count` states with q uniform in q_range (n, 2), q̇ and q̈ normal (rad/s, rad/s²)."""
    rng = np.random.default_rng(seed)
    lo, hi = q_range[:, 0], q_range[:, 1]
    q = lo + (hi - lo) * rng.uniform(size=(count, n))
    return q, rng.normal(0.0, velocity, (count, n)), rng.normal(0.0, acceleration, (count, n))


def identifiability(
    regressor: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    names: Sequence[str],
    q_range: np.ndarray,
    count: int = 400,
    seed: int = 0,
) -> BaseParameters:
    """Base parameters of `regressor(q, q̇, q̈) -> (N, n, p)` on random states."""
    q, qd, qdd = random_states(q_range.shape[0], count, q_range, seed=seed)
    return base_parameters(regressor(q, qd, qdd), names)
