"""`ChainOnlineIdentifier`: rig-estimator's running estimate of a chain machine's base
parameters (a `[chain]` profile, docs/excavator.md), with the interface of
`estimator.online.OnlineIdentifier` (rows in, `Estimate` out, no I/O).

It runs the batch's own observation (`estimator.chain_identify.observe`: the angles' 2 Hz
low-pass and differences, the 1 Hz parallel filter and decimation) on windows of the live
rows, and accumulates each window's weighted normal equations: the estimate after any row is
the weighted least squares of every decimated equation so far, as the batch's on the same
rows would be (`estimator.chain_batch`). The observation's zero-phase filters need the samples
on both sides of an equation: a window spans the observation's `trim` (its filters' start-up,
8 s at 1 Hz) at each end around `step_s` of new equations, and moves on by that step, so the
estimate runs `step_s` plus 8 s behind the rig. An RLS on a causal filter would not
lag, but its equations would not be the batch's, whose are the ones the σ was validated for.

Rows as in `OnlineIdentifier`: only RUNNING rows without a fault or interlock flag are used;
a gap in `t` or `seq`, or a left-out row, ends the continuous stretch (what it holds beyond the
last full window is lost: its equations would need the samples after it). Weights are each
joint's pressure noise measured on the first window (`chain_batch.measured_noise`), then kept
so that every equation is weighted alike.

σ: each joint's own weighted residual variance s²_j (the weights are the raw pressure noise's,
and after the filters each joint's equations keep a different share of that and of the angle
noise: the swing's residual was 3–7× the others' on an excavator run), in the sandwich
H (Σ_j s²_j Φ_jᵀWΦ_j) H with H = (ΦᵀWΦ)⁺, times the residuals' correlation factor
κ = 1 + 2 Σ_k ρ_k over 4 lags (at least 1). It is the online view; `rigctl identify` prints
the batch's noise-propagated σ beside it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from daq.profile.schema import Profile
from estimator.base_params import identifiability
from estimator.chain_batch import ChainRecording, converter_floor, flag_reasons, measured_noise
from estimator.chain_identify import (
    DEFAULT_CUTOFF_HZ,
    DEFAULT_PARALLEL_HZ,
    RCOND,
    Conditioning,
    joint_weights,
    observe,
)
from estimator.chain_regressor import ChainRegressor
from estimator.datause import DataUse, blocks, classify_stream
from estimator.online import HEADER_CHECKS, Estimate, column_names

#: The roles read per joint, in the buffer's column order (q, p⁺, p⁻ per joint).
ROLES = ("resolver", "pressure_cap", "pressure_rod")
#: Model name in the estimate and the parameter file.
MODEL = "chain"
#: Correlation lags counted in κ (decimated equations), over the last windows' residuals.
KAPPA_LAGS = 4
KAPPA_WINDOWS = 20


class ChainOnlineIdentifier:
    def __init__(
        self,
        profile: Profile,
        layout_columns: Sequence[Any],
        *,
        step_s: float = 10.0,
        running_only: bool = True,
        minor: bool = True,
    ) -> None:
        if profile.chain is None:
            raise ValueError(f"profile '{profile.rig.id}' has no [chain] section")
        if not step_s > 0.0:
            raise ValueError(f"step_s must be > 0 (s of rig time), got {step_s}")
        from estimator.predict import chain_q_range

        chain, home, _ = profile.chain_model()
        self.reg = ChainRegressor(chain, minor=minor)
        self.bp = identifiability(self.reg.matrix, self.reg.names, chain_q_range(chain, home))
        self.names = self.bp.base_names
        self.fs = profile.rig.loop_rate_hz
        self.cond = Conditioning(self.fs, DEFAULT_CUTOFF_HZ, parallel_hz=DEFAULT_PARALLEL_HZ)
        nd = self.cond.nd
        self._m = max(1, round(step_s * self.fs / nd))  # new equations per window
        self._step = self._m * nd
        self._window = (2 * self.cond.trim + self._m) * nd
        names = column_names(layout_columns)
        self.nj = len(profile.joints)
        idx = []
        for role in ROLES:
            for j in profile.joints:
                ch = profile.joint_channel(j.name, role)  # type: ignore[arg-type]
                col = None if ch is None else f"eng.{ch.name}"
                if col is None or col not in names:
                    raise ValueError(
                        f"the chain's online estimate needs a '{role}' channel on joint {j.name} "
                        f"in the telemetry layout ({col or 'none in the profile'})"
                    )
                idx.append(names.index(col))
        self._index = np.array(idx)
        #: Resolvers read through a wrapping converter: unwrapped per window (a 2π offset
        #: between windows is harmless, the regressor is periodic in q; a jump inside is not).
        self._wraps = np.array(
            [profile.joint_channel(j.name, "resolver").converter.wraps for j in profile.joints]  # type: ignore[union-attr]
        )
        self._header = {c: names.index(c) for c in HEADER_CHECKS if c in names}
        self._t_col = names.index("t")
        self._width = len(names)
        self.running_only = running_only
        self._floor = converter_floor(profile)
        r = self.bp.rank
        # The square-root information form: R (r, r) upper triangular and z with
        # ‖W^½(y − Φθ)‖² = ‖z − R D θ‖² + `_rss` over every equation so far, D a fixed column
        # scaling. The normal equations ΦᵀWΦ would square the regressor's condition number
        # (~1e8 on the excavator) past double precision.
        self._R = np.zeros((0, r))
        self._z = np.zeros(0)
        self._rss = 0.0
        self._D: np.ndarray | None = None
        self._equations = 0
        # The same square-root form per joint j (its own residual variance, and the σ's
        # sandwich without ever forming a normal matrix).
        self._Rj = [np.zeros((0, r)) for _ in range(self.nj)]
        self._zj = [np.zeros(0) for _ in range(self.nj)]
        self._rssj = np.zeros(self.nj)
        #: The last windows' weighted torque (m, n) and regressor (m, n, r), for κ.
        self._recent: deque[tuple[np.ndarray, np.ndarray]] = deque(maxlen=KAPPA_WINDOWS)
        self._w: np.ndarray | None = None
        self._buf = np.zeros((self._window + self._step, 3 * self.nj))
        self._n = 0
        self._prev = (np.nan, np.nan)
        self._continues = True
        self._frozen = False
        self.data = DataUse()
        self.rows = 0
        self.gaps = 0
        self.t = 0.0
        self.windows = 0
        self.warnings: list[str] = []
        self.structure = "the chain's base parameters (no structure to choose)"

    # ------------------------------------------------------------------ rows in

    def update_rows(self, rows: np.ndarray) -> int:
        """Telemetry rows (N, width) in seq order; returns the equations they completed."""
        rows = np.asarray(rows, dtype=np.float64)
        if rows.shape[0] == 0:
            return 0
        if rows.ndim != 2 or rows.shape[1] != self._width:
            raise ValueError(
                f"rows must have shape (N, {self._width}) (the layout's columns), got {rows.shape}"
            )
        cls, self._prev = classify_stream(
            rows, self._header, 1.0 / self.fs, self.data,
            running_only=self.running_only, previous=self._prev,
        )  # fmt: skip
        self.gaps += cls.gaps
        done = 0
        for blk in blocks(cls.good, cls.breaks):
            if cls.breaks[blk.start] or blk.start > 0 or not self._continues:
                self._n = 0  # a new stretch: the buffered one cannot be continued
            done += self._push(rows[blk][:, self._index])
            self._continues = True
        self._continues = bool(cls.good[-1])
        self.rows += rows.shape[0]
        self.t = float(rows[-1, self._t_col])
        return done

    def gap(self) -> None:
        """Samples were lost: the stretch ends (its filters cannot bridge the gap)."""
        self.gaps += 1
        self.data.gaps += 1
        self._n = 0
        self._prev = (np.nan, np.nan)

    def event(self, header: Mapping[str, Any]) -> None:
        """Service events: none changes what a chain's equations take."""

    def flush(self) -> int:
        """Nothing waits to be processed beyond what a window needs (see the module doc)."""
        return 0

    def freeze(self, frozen: bool = True) -> None:
        self._frozen = frozen

    def reset(self) -> None:
        """Forget every equation (the estimate restarts; the stretch buffered goes on)."""
        self._R = np.zeros((0, self.bp.rank))
        self._z = np.zeros(0)
        self._rss = 0.0
        self._equations = 0
        self._Rj = [np.zeros((0, self.bp.rank)) for _ in range(self.nj)]
        self._zj = [np.zeros(0) for _ in range(self.nj)]
        self._rssj[:] = 0.0
        self._recent.clear()

    def _push(self, x: np.ndarray) -> int:
        done = 0
        k = 0
        while k < x.shape[0]:
            take = min(x.shape[0] - k, self._buf.shape[0] - self._n)
            self._buf[self._n : self._n + take] = x[k : k + take]
            self._n += take
            k += take
            if self._n >= self._window:
                done += self._window_equations(self._buf[: self._window])
                keep = self._n - self._step
                self._buf[:keep] = self._buf[self._step : self._n]
                self._n = keep
        return done

    def _window_equations(self, x: np.ndarray) -> int:
        n = self.nj
        q, pc, pr = x[:, :n], x[:, n : 2 * n], x[:, 2 * n :]
        if self._wraps.any():
            q = np.where(self._wraps, np.unwrap(q, axis=0), q)
        if self._w is None:
            rec = ChainRecording(None, self.fs, q, pc, pr, self._floor)  # type: ignore[arg-type]
            self._w = joint_weights(self.reg, q, measured_noise(rec))
        obs = observe(self.reg, self.bp, q, pc, pr, self.cond)
        Phi, y = obs.Phi[: self._m], obs.y[: self._m]
        self.windows += 1
        if self._frozen:
            return 0
        s = np.sqrt(self._w)
        A = (Phi * s[None, :, None]).reshape(-1, Phi.shape[-1])
        b = (y * s).reshape(-1)
        if self._D is None:
            cs = np.linalg.norm(A, axis=0)
            self._D = np.where(cs > 0, cs, 1.0)
        self._R, self._z, rss = _qr_update(self._R, self._z, A / self._D, b)
        self._rss += rss
        self._equations += b.size
        Aj, yj = A.reshape(Phi.shape), y * s
        for j in range(self.nj):
            self._Rj[j], self._zj[j], rss = _qr_update(
                self._Rj[j], self._zj[j], Aj[:, j] / self._D, yj[:, j]
            )
            self._rssj[j] += rss
        self._recent.append((yj, Aj))
        return int(b.size)

    # ------------------------------------------------------------------ estimate out

    def _solve(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """θ, the pseudo-inverse P with θ = P z, and the parameters along a direction below
        the batch's RCOND (σ = ∞, as `chain_identify.unexcited`): R's columns normalised as
        the batch normalises the weighted regressor's (the same singular values)."""
        r = self.bp.rank
        if self._R.shape[0] == 0 or self._D is None:
            return np.zeros(r), np.zeros((r, 0)), np.ones(r, dtype=bool)
        cn = np.linalg.norm(self._R, axis=0)
        zero = cn == 0
        cn = np.where(zero, 1.0, cn)
        u, sv, vt = np.linalg.svd(self._R / cn, full_matrices=False)
        keep = sv > RCOND * sv[0]
        P = (vt[keep].T / sv[keep]) @ u[:, keep].T / (cn * self._D)[:, None]
        weak = zero | (np.abs(vt[~keep]).max(axis=0, initial=0.0) > 1e-6)
        return P @ self._z, P, weak

    def theta(self) -> np.ndarray:
        """The weighted least squares of every equation so far."""
        return self._solve()[0]

    def _covariance(self) -> tuple[np.ndarray, np.ndarray, float, float]:
        theta, P, weak = self._solve()
        r = self.bp.rank
        dof = self._equations - r
        if dof <= 0:
            return theta, np.full((r, r), np.inf), math.nan, math.nan
        # Each joint's residual variance (the weights are the raw pressure noise's; after the
        # filters each joint's equations keep a different share of it and of the angles'), and
        # the sandwich H (Σ_j s²_j Φ_jᵀWΦ_j) H, H = (ΦᵀWΦ)⁺ = P Pᵀ, as Σ_j (s_j P X_jᵀ)(…)ᵀ with
        # X_j = R_j R⁺ bounded (Σ_j X_jᵀX_j is a projection): positive whatever the conditioning.
        D = self._D
        assert D is not None  # there are equations
        scaled = D * theta
        s2 = (self._rss + float(np.sum((self._z - self._R @ scaled) ** 2))) / dof
        cov = np.zeros((r, r))
        for j in range(self.nj):
            rss_j = self._rssj[j] + float(np.sum((self._zj[j] - self._Rj[j] @ scaled) ** 2))
            # θ = P Qᵀ b and Q_j = (Φ_j/D) R⁻¹: joint j's share of Qᵀ Σ Q is s²_j X_jᵀX_j.
            Xj = self._Rj[j] @ (D[:, None] * P)
            Bj = math.sqrt(rss_j / (dof / self.nj)) * (P @ Xj.T)
            cov += Bj @ Bj.T
        e = [y - np.einsum("mnr,r->mn", A, theta) for y, A in self._recent]
        kappa = _kappa(np.concatenate(e)) if e else 1.0
        cov *= kappa
        cov[weak, :] = np.inf
        cov[:, weak] = np.inf
        return theta, cov, s2, kappa

    def estimate(self) -> Estimate:
        theta, cov, s2, kappa = self._covariance()
        sigma = np.sqrt(np.abs(np.diag(cov)))
        with np.errstate(divide="ignore", invalid="ignore"):
            sigma_pct = 100.0 * sigma / np.abs(theta)
        self.data.used = self._equations
        flags = flag_reasons(self.names, theta, sigma) if self._equations else {}
        warnings = list(self.warnings)
        if flags:
            warnings.append(
                f"{len(flags)} of {len(self.names)} base parameters not resolved online yet "
                f"(±3σ includes zero, or not excited): {', '.join(flags)}"
            )
        return Estimate(
            names=list(self.names),
            theta=theta,
            cov=cov,
            sigma_pct=sigma_pct,
            models={
                MODEL: {
                    "names": list(self.names),
                    "residual_var": s2,
                    "correlation_factor": kappa,
                    "samples": self._equations,
                    "windows": self.windows,
                    "frozen": self._frozen,
                }
            },
            samples=self._equations,
            gaps=self.gaps,
            t=self.t,
            data=self.data,
            structure=self.structure,
            warnings=warnings,
        )


def _qr_update(
    R: np.ndarray, z: np.ndarray, A: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """R, z of [R; A] θ ≈ [z; b] re-triangularised, and the residual no θ can reach that the
    new rows added (‖[z; b]‖² − ‖z′‖²)."""
    Q, R2 = np.linalg.qr(np.vstack([R, A]))
    rhs = np.concatenate([z, b])
    z2 = Q.T @ rhs
    return R2, z2, max(0.0, float(rhs @ rhs - z2 @ z2))


def _kappa(e: np.ndarray) -> float:
    """Σ_{|k| ≤ KAPPA_LAGS} ρ_k of the residuals (each joint's column, pooled), at least 1."""
    e = e - e.mean(axis=0)
    v = float(np.sum(e**2))
    if v <= 0 or e.shape[0] <= KAPPA_LAGS:
        return 1.0
    rho = [float(np.sum(e[k:] * e[:-k])) / v for k in range(1, KAPPA_LAGS + 1)]
    return max(1.0, 1.0 + 2.0 * sum(rho))
