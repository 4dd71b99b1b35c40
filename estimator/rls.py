"""Multi-output recursive least squares in Bierman's U-D form, with bounded forgetting.

Why U-D: the covariance is kept as `P = U·diag(d)·Uᵀ` with `U` unit upper triangular and
`d > 0`. Bierman's scalar update only ever multiplies `d_j` by `a_{j-1}/a_j` with
`a_j = a_{j-1} + f_j² d_j ≥ a_{j-1} > 0`, so `P` is symmetric positive definite *by construction*
after any number of updates, whatever the data — the conventional `P − PφφᵀP/(1+φᵀPφ)` loses
symmetry and definiteness after long runs of poorly exciting data.

Multi-output samples (`m` equations sharing one parameter vector) are processed as `m` scalar
updates after one forgetting step: this is exactly the stacked least-squares problem.

Forgetting `λ < 1` divides `d` by `λ` each sample — but only as far as `trace(P) ≤ trace_max`.
When excitation stops, `P` would otherwise grow as `λ⁻ᵏ` in the unexcited directions
("wind-up") and the next burst of data would throw the estimate around. With the bound the
effective forgetting factor is `max(λ, trace(P)/trace_max)`.

The residual bookkeeping gives Gautier et al. eq. 17–19 recursively: the (exponentially
weighted) least-squares cost obeys `J_k = λ J_{k−1} + e²/α` with `e` the a-priori error and
`α = 1 + φᵀPφ` (P after forgetting); with `r_k = λ r_{k−1} + 1` equations,
`σ² = J/(r − b)`, `Cov(θ) = σ² P` and `%σ_i = 100 σ_i/|θ_i|`.

Drift (issue 14, item 3): `diffuse(q)` is the prediction step of a Kalman filter whose state θ
follows a random walk, `P ← P + diag(q)`, applied for the rig time that passed (the caller
converts a drift rate per second into q). Unlike forgetting, which scales the whole of P and so
only widens what the data already resolve, the random walk adds the variance the parameter may
have gained since, so the reported σ includes the lag behind a drifting truth. U-D form: P + Q
is formed and re-factorised (`_ud_add_diag`), O(n³) once per call — the chain calls it once per
chunk of rows, not per sample.

The solver works in whatever units it is given; callers normalise parameters and equations
(`estimator.models` does) so that a diffuse prior `P0 = p0·I` is truly non-informative.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np


@numba.njit(cache=True, fastmath=False)
def _forget(U: np.ndarray, d: np.ndarray, stats: np.ndarray, lam: float, trace_max: float) -> None:
    """One forgetting step P ← P/λ_eff with λ_eff = max(λ, trace(P)/trace_max) (no wind-up);
    the residual statistics (stats[0], stats[1], stats[4:]) age with the same factor."""
    n = d.shape[0]
    tr = 0.0
    for j in range(n):
        col = 1.0
        for i in range(j):
            col += U[i, j] * U[i, j]
        tr += d[j] * col
    lam_eff = lam
    if tr / lam > trace_max:
        lam_eff = tr / trace_max if tr < trace_max else 1.0
    if lam_eff < 1.0:
        inv = 1.0 / lam_eff
        for j in range(n):
            d[j] *= inv
    stats[0] *= lam_eff
    stats[1] *= lam_eff
    for o in range(4, stats.shape[0]):
        stats[o] *= lam_eff


@numba.njit(cache=True, fastmath=False)
def _ud_update_block(
    x: np.ndarray,
    U: np.ndarray,
    d: np.ndarray,
    stats: np.ndarray,
    Phi: np.ndarray,
    y: np.ndarray,
    lam: float,
    trace_max: float,
    f: np.ndarray,
    g: np.ndarray,
    k: np.ndarray,
) -> None:
    """Samples `Phi (N, m, n)`, `y (N, m)`; updates `x, U, d` and `stats` in place.

    stats = [J (weighted SSE), r (equation count), samples, skipped, per-output SSE (m entries)].
    A sample with any non-finite entry is skipped (counted in stats[3]) rather than poisoning θ.
    `f, g, k` are caller-owned scratch vectors of length n (nothing allocated here).
    """
    N, m, n = Phi.shape
    for s in range(N):
        ok = True
        for o in range(m):
            if not np.isfinite(y[s, o]):
                ok = False
            for i in range(n):
                if not np.isfinite(Phi[s, o, i]):
                    ok = False
        if not ok:
            stats[3] += 1.0
            continue
        # --- forgetting, bounded so that trace(P) ≤ trace_max (no wind-up)
        if lam < 1.0:
            _forget(U, d, stats, lam, trace_max)
        # --- one Bierman scalar update per output equation
        for o in range(m):
            e = y[s, o]
            for i in range(n):
                e -= Phi[s, o, i] * x[i]
            # f = Uᵀφ, g = D f
            for j in range(n):
                acc = Phi[s, o, j]
                for i in range(j):
                    acc += U[i, j] * Phi[s, o, i]
                f[j] = acc
                g[j] = d[j] * acc
            a0 = 1.0
            for j in range(n):
                a1 = a0 + f[j] * g[j]
                d[j] *= a0 / a1
                p = -f[j] / a0
                for i in range(j):
                    uij = U[i, j]
                    U[i, j] = uij + k[i] * p
                    k[i] += uij * g[j]
                k[j] = g[j]
                a0 = a1
            scale = e / a0
            for i in range(n):
                x[i] += k[i] * scale
            inc = e * e / a0
            stats[0] += inc
            stats[1] += 1.0
            stats[4 + o] += inc
        stats[2] += 1.0


@numba.njit(cache=True, fastmath=False)
def _ud_add_diag(U: np.ndarray, d: np.ndarray, q: np.ndarray, P: np.ndarray) -> None:
    """U·diag(d)·Uᵀ ← U·diag(d)·Uᵀ + diag(q), q ≥ 0, re-factorised in place (Bierman's U-D
    factorisation of a symmetric positive definite matrix, upper form). P is n×n scratch."""
    n = d.shape[0]
    for i in range(n):
        for j in range(i, n):
            acc = 0.0
            for k in range(j, n):  # U unit upper: U[i,k] = 0 for k < i, U[j,k] = 0 for k < j
                acc += U[i, k] * d[k] * U[j, k]
            P[i, j] = acc
        P[i, i] += q[i]
    for j in range(n - 1, -1, -1):
        dj = P[j, j]
        d[j] = dj
        U[j, j] = 1.0
        for i in range(j):
            U[i, j] = P[i, j] / dj
        for i in range(j):
            for k in range(i + 1):
                P[k, i] -= U[k, j] * dj * U[i, j]
        for i in range(j + 1, n):
            U[i, j] = 0.0


@dataclass(frozen=True)
class RlsConfig:
    #: Exponential forgetting factor λ ∈ (0, 1]; 1 = ordinary (growing-window) least squares.
    forgetting: float = 1.0
    #: Initial covariance p0·I (in the caller's normalised units); large = diffuse start.
    p0: float = 1.0e8
    #: Upper bound on trace(P) while forgetting (wind-up guard); ignored when λ = 1.
    trace_max: float = 1.0e4

    def __post_init__(self) -> None:
        if not 0.0 < self.forgetting <= 1.0:
            raise ValueError(f"forgetting must be in (0, 1], got {self.forgetting}")
        if not self.p0 > 0.0:
            raise ValueError(f"p0 must be positive, got {self.p0}")
        if not self.trace_max > 0.0:
            raise ValueError(f"trace_max must be positive, got {self.trace_max}")


class Rls:
    """Recursive least squares for `y_k = Φ_k θ + e_k`, `Φ_k` of shape (m, n) per sample."""

    def __init__(
        self,
        n_params: int,
        n_outputs: int = 1,
        config: RlsConfig | None = None,
        theta0: np.ndarray | None = None,
        p0_diag: np.ndarray | None = None,
    ) -> None:
        if n_params < 1 or n_outputs < 1:
            raise ValueError(f"need n_params ≥ 1 and n_outputs ≥ 1, got {n_params}, {n_outputs}")
        self.n = n_params
        self.m = n_outputs
        self.config = config or RlsConfig()
        self.frozen = False
        self.theta = np.zeros(n_params)
        self.U = np.eye(n_params)
        self.d = np.zeros(n_params)
        self.stats = np.zeros(4 + n_outputs)
        self._f = np.zeros(n_params)
        self._g = np.zeros(n_params)
        self._k = np.zeros(n_params)
        self._P = np.zeros((n_params, n_params))
        self.reset(theta0, p0_diag)

    def reset(self, theta0: np.ndarray | None = None, p0_diag: np.ndarray | None = None) -> None:
        """Back to the prior: θ = theta0 (default 0), P = diag(p0_diag) (default p0·I)."""
        self.theta[:] = 0.0 if theta0 is None else _vec(theta0, self.n, "theta0")
        self.U[:] = np.eye(self.n)
        if p0_diag is None:
            self.d[:] = self.config.p0
        else:
            p = _vec(p0_diag, self.n, "p0_diag")
            if np.any(p <= 0.0):
                raise ValueError("p0_diag must be positive")
            self.d[:] = p
        self.stats[:] = 0.0

    def update(self, Phi: np.ndarray, y: np.ndarray) -> None:
        """Add samples: `Phi (N, m, n)`, `y (N, m)` (or one sample `(m, n)`, `(m,)`).

        Nothing happens while frozen. Samples with a non-finite entry are skipped and counted
        (`skipped`) rather than silently poisoning the estimate.
        """
        if self.frozen:
            return
        if Phi.ndim == 2:
            Phi = Phi[None]
            y = y[None]
        if Phi.shape[1:] != (self.m, self.n) or y.shape != Phi.shape[:2]:
            raise ValueError(
                f"expected Phi (N, {self.m}, {self.n}) and y (N, {self.m}); "
                f"got {Phi.shape} and {y.shape}"
            )
        _ud_update_block(
            self.theta,
            self.U,
            self.d,
            self.stats,
            np.ascontiguousarray(Phi, dtype=np.float64),
            np.ascontiguousarray(y, dtype=np.float64),
            self.config.forgetting,
            self.config.trace_max,
            self._f,
            self._g,
            self._k,
        )

    def forget(self, samples: int) -> None:
        """Age the estimate by `samples` sample periods without data: P ← P/λᵏ (bounded by
        trace_max like every step). Forgetting in *time* (issue 14, item 3): the chain calls
        this for every raw sample it did not pass to the RLS (rejected, filter warm-up), so
        λ is per sample period of rig time, not per accepted sample — a model that rejects
        most samples (the fluid model near the pressure bounds) no longer remembers longer."""
        if self.frozen or samples <= 0 or self.config.forgetting >= 1.0:
            return
        _forget(self.U, self.d, self.stats, self.config.forgetting**samples, self.config.trace_max)

    def diffuse(self, q: np.ndarray) -> None:
        """Random-walk prediction P ← P + diag(q) (q ≥ 0, in P's units: Cov/σ²). Nothing
        happens while frozen (a frozen estimate reports the σ it had)."""
        if self.frozen:
            return
        q = _vec(q, self.n, "q")
        if np.any(q < 0.0):
            raise ValueError("random-walk variances q must be ≥ 0")
        if np.any(q > 0.0):
            _ud_add_diag(self.U, self.d, q, self._P)

    # ------------------------------------------------------------------ read-outs
    @property
    def P(self) -> np.ndarray:
        """Covariance factor product U·D·Uᵀ (SPD by construction; symmetrised against the
        rounding of the product itself)."""
        P = (self.U * self.d) @ self.U.T
        return 0.5 * (P + P.T)

    @property
    def samples(self) -> int:
        return int(self.stats[2])

    @property
    def skipped(self) -> int:
        return int(self.stats[3])

    @property
    def equations(self) -> float:
        """Effective number of scalar equations r (exponentially weighted)."""
        return float(self.stats[1])

    def residual_variance(self) -> float:
        """σ² = J/(r − b) (Gautier eq. 17); NaN until there are more equations than unknowns."""
        dof = self.stats[1] - self.n
        return float(self.stats[0] / dof) if dof > 0.5 else float("nan")

    def output_residual_variance(self) -> np.ndarray:
        """Per-output residual variance (each output's share of the degrees of freedom)."""
        dof = self.stats[1] - self.n
        if dof <= 0.5:
            return np.full(self.m, np.nan)
        return self.stats[4:] / (dof / self.m)

    def covariance(self) -> np.ndarray:
        """Cov(θ̂) = σ² P (Gautier eq. 18)."""
        return self.residual_variance() * self.P

    def information_eigenvalues(self) -> np.ndarray:
        """Eigenvalues of P⁻¹ (ascending): the smallest says how well the data excite θ."""
        # P⁻¹ = U⁻ᵀ D⁻¹ U⁻¹; its eigenvalues are 1/eig(P).
        ev = np.linalg.eigvalsh(self.P)
        return np.sort(1.0 / ev)


def sigma_pct(theta: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """%σ_i = 100 σ_i/|θ_i| (Gautier eq. 19); inf where θ_i = 0."""
    sig = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 100.0 * sig / np.abs(theta)
    return np.where(np.abs(theta) > 0.0, out, np.inf)


def _vec(v: np.ndarray, n: int, what: str) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64).reshape(-1)
    if a.shape != (n,):
        raise ValueError(f"{what} must have {n} entries, got {a.shape[0]}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{what} must be finite")
    return a
