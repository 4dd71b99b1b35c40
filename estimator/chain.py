"""One model's chain: raw per-joint signals → causal conditioning → Φ, y → normalised RLS.

Raw blocks are (N, 6·nj) arrays laid out `[q | s | p_cap | p_rod | u | temp]` (nj columns
each; the oil temperature repeated per joint, so every signal has the same layout).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from controller.plant.params import NOMINAL_OIL_C, PlantParams
from estimator.conditioning import Conditioner
from estimator.jackknife import inflate, jackknife_from_normal, merge_groups
from estimator.models import LinearModel, Sample, evaluate, static_sample
from estimator.rls import Rls, RlsConfig, sigma_pct

N_SIGNALS = 6
#: Slot of the oil temperature in a raw block (estimator.models.SIGNALS).
TEMP_SLOT = 5
#: Stretches of the run the online block jackknife compares (as batch: estimator.batch).
JACKKNIFE_GROUPS = 16


def unmeasured_oil_c(params: PlantParams) -> float:
    """What the temperature slot holds without a temperature channel: the oil law's reference
    temperature, where its scale factors are 1 (parameters then are the ones at whatever
    temperature the oil had)."""
    return params.oil.reference_c if params.oil is not None else NOMINAL_OIL_C


def sample_from(block: np.ndarray, nj: int, derivs: np.ndarray | None = None) -> Sample:
    """A `Sample` viewing a raw block (derivatives zero) or conditioned output (N, 3, 6·nj)."""
    if derivs is None:
        v = block
        z = np.zeros((block.shape[0], nj))
        d1 = d2 = None
    else:
        v, d1, d2 = derivs[:, 0], derivs[:, 1], derivs[:, 2]
        z = np.zeros((0, 0))

    def sig(a: np.ndarray | None, k: int) -> np.ndarray:
        return z if a is None else a[:, k * nj : (k + 1) * nj]

    return Sample(
        q=sig(v, 0),
        qd=sig(d1, 0),
        qdd=sig(d2, 0),
        s=sig(v, 1),
        sd=sig(d1, 1),
        p_cap=sig(v, 2),
        pd_cap=sig(d1, 2),
        p_rod=sig(v, 3),
        pd_rod=sig(d1, 3),
        u=sig(v, 4),
        temp=sig(v, TEMP_SLOT),
    )


#: Prior variance (normalised units, as the RLS's P) of a held parameter: the information of
#: any run's rows is many orders below its inverse, so the RLS leaves it where it was put.
HELD_VARIANCE = 1.0e-12


class ModelChain:
    def __init__(
        self,
        model: LinearModel,
        fs: float,
        n_joints: int,
        rls_config: RlsConfig | None = None,
        theta0: np.ndarray | None = None,
        cov0: np.ndarray | None = None,
        block: int | None = None,
        random_walk: np.ndarray | None = None,
    ) -> None:
        self.model = model
        self.fs = fs
        self.nj = n_joints
        m, n = model.n_outputs, model.n_params
        self.cond = Conditioner(N_SIGNALS * n_joints, fs, model.cutoff_hz, model.taps, 3)
        self.static = Conditioner(m * n + m, fs, model.cutoff_hz, model.taps, 1)
        self.scale = np.asarray(model.param_scale, dtype=float)
        self.weight = 1.0 / np.asarray(model.output_scale, dtype=float)
        self.rls = Rls(n, m, rls_config)
        #: Random walk per parameter: 1σ relative change per √s of rig time (0: constant).
        rw = np.zeros(n) if random_walk is None else np.asarray(random_walk, dtype=float)
        if rw.shape != (n,) or np.any(rw < 0.0) or not np.all(np.isfinite(rw)):
            raise ValueError(
                f"model '{model.name}': random_walk must be {n} finite numbers ≥ 0, got {rw}"
            )
        self.random_walk = rw
        self.set_prior(theta0, cov0)
        self.rejected = 0
        # Batch means of the residuals (blocks of `block` samples) → correlation factor κ.
        self.block = block or 4 * self.cond.length
        self._carry = np.zeros((0, m))
        self._bm = np.zeros(4)  # [Σ block-mean², block means (blocks × outputs), Σ e², residuals]
        self._seen = 0  # raw rows since the last continuity reset
        self._last_bad = -(10**12)  # index (in that count) of the last invalid raw row
        # Block jackknife (estimator.jackknife): normal equations per `fs` samples (1 s) of
        # regression data, merged into JACKKNIFE_GROUPS stretches when read.
        self._group_rows = max(1, round(fs))
        self._A: list[np.ndarray] = []
        self._b: list[np.ndarray] = []
        self._in_group = 0
        self._out = np.zeros((0, 3, N_SIGNALS * n_joints))
        self._sout = np.zeros((0, 1, m * n + m))
        #: Parameters held at a given value (`hold`): not estimated, %σ NaN.
        self.held = np.zeros(n, dtype=bool)

    @property
    def delay(self) -> int:
        """Samples from a raw row to the instant its regression equation describes."""
        return self.cond.delay

    def set_prior(self, theta0: np.ndarray | None, cov0: np.ndarray | None) -> None:
        """Start from θ0 with covariance diag(cov0) (physical units), or diffuse if None."""
        t = None if theta0 is None else np.asarray(theta0, dtype=float) / self.scale
        p = None
        if cov0 is not None:
            p = np.asarray(cov0, dtype=float) / self.scale**2
            # cov0 is in σ² units; RLS's P is Cov/σ²: σ² is unknown at start, take 1 (the
            # normalised equations have unit scale), so a prior is as strong as its variance.
        self.rls.reset(t, p)
        self._prior = (t, p)

    def hold(self, values: Mapping[str, float]) -> list[str]:
        """Hold this model's parameters named in `values` at those values (SI units) from now
        on — the ones the batch flagged, with the values it used (estimator.structure) — by a
        prior variance no run's rows can move (`HELD_VARIANCE`); the others keep their prior.
        Their %σ is NaN (not measured), their random walk is off, and the jackknife solves for
        the others alone. (With forgetting, λ < 1, their variance grows as every other's does
        and the hold loosens in time.) Returns the names held."""
        n = self.model.n_params
        held = np.array([nm in values for nm in self.model.names])
        if not held.any():
            return []
        t, p = self._prior
        t = np.zeros(n) if t is None else t.copy()
        p = np.full(n, self.rls.config.p0) if p is None else p.copy()
        for k in np.flatnonzero(held):
            t[k] = values[self.model.names[k]] / self.scale[k]
            p[k] = HELD_VARIANCE
        self.held = held
        self.random_walk = np.where(held, 0.0, self.random_walk)
        self.rls.reset(t, p)
        self._prior = (t, p)
        return [nm for nm, h in zip(self.model.names, held, strict=True) if h]

    def reset_to_prior(self) -> None:
        self.rls.reset(*self._prior)
        self._bm[:] = 0.0
        self._carry = self._carry[:0]
        self._A, self._b, self._in_group = [], [], 0

    def reset_continuity(self) -> None:
        """A gap in the data: the filters restart; the estimate is kept."""
        self.cond.reset()
        self.static.reset()
        self._seen = 0
        self._last_bad = -(10**12)

    def push(self, raw: np.ndarray) -> int:
        """Feed raw rows (N, 5·nj); returns how many regression samples reached the RLS."""
        N = raw.shape[0]
        m, n = self.model.n_outputs, self.model.n_params
        if self._out.shape[0] < N:
            self._out = np.zeros((N, 3, raw.shape[1]))
            self._sout = np.zeros((N, 1, m * n + m))
        out = self._out[:N]
        first = self.cond.push(raw, out)
        if self.model.split_static:
            Phi_s, y_s = evaluate(self.model, sample_from(raw, self.nj))
            flat = np.concatenate([Phi_s.reshape(N, m * n), y_s], axis=1)
            sout = self._sout[:N]
            self.static.push(flat, sout)
        ok = self._valid_mask(raw)
        self.age(N / self.fs)  # random walk over the rig time these rows span
        if first >= N:
            self.rls.forget(N)  # forgetting in time: every raw row ages the estimate
            return 0
        x = sample_from(raw[first:], self.nj, out[first:])
        Phi, y = evaluate(self.model, x)
        if self.model.split_static:
            Phi0, y0 = evaluate(self.model, static_sample(x))
            sf = self._sout[first:N, 0]
            Phi = Phi - Phi0 + sf[:, : m * n].reshape(-1, m, n)
            y = y - y0 + sf[:, m * n :]
        if ok is not None:
            keep = ok[first:]
            self.rejected += int(keep.size - np.count_nonzero(keep))
            Phi, y = Phi[keep], y[keep]
        # Rows the RLS will not see (filter warm-up, outside the model's domain) still age
        # it: λ is per sample period of rig time (RLS.forget).
        self.rls.forget(N - Phi.shape[0])
        if Phi.shape[0] == 0:
            return 0
        Phi_n = Phi * self.scale[None, None, :] * self.weight[None, :, None]
        y_n = y * self.weight[None, :]
        self.rls.update(Phi_n, y_n)
        self._batch_means(y_n - Phi_n @ self.rls.theta)
        self._jackknife_groups(Phi_n, y_n)
        return int(Phi_n.shape[0])

    def age(self, seconds: float) -> None:
        """Random-walk prediction for `seconds` of rig time (issue 14, item 3): each
        parameter's variance grows by (w_i·|θ̂_i|)²·t, w_i = `random_walk` (relative 1σ per
        √s). In RLS units P = Cov/(κσ²) (the covariance read-out), so the increment is divided
        by κσ²; before σ² is known P is still the diffuse prior and nothing is added."""
        if seconds <= 0.0 or not np.any(self.random_walk > 0.0):
            return
        s2 = self.rls.residual_variance() * self.correlation()
        if not np.isfinite(s2) or s2 <= 0.0:
            return
        q = (self.random_walk * self.rls.theta) ** 2 * (seconds / s2)
        self.rls.diffuse(q)

    @property
    def drifting(self) -> bool:
        """Whether the estimate tracks drift (forgetting or a random walk): then it is not the
        pooled least squares of the whole run that the block jackknife describes."""
        return self.rls.config.forgetting < 1.0 or bool(np.any(self.random_walk > 0.0))

    def _batch_means(self, e: np.ndarray) -> None:
        """Accumulate residual statistics for the correlation factor (see `correlation`)."""
        if self.rls.frozen:
            return
        e = np.concatenate([self._carry, e]) if self._carry.shape[0] else e
        nb = e.shape[0] // self.block
        if nb:
            full = e[: nb * self.block]
            means = full.reshape(nb, self.block, -1).mean(axis=1)
            self._bm += (np.sum(means**2), means.size, np.sum(full**2), full.size)
        self._carry = e[nb * self.block :].copy()

    def _jackknife_groups(self, Phi: np.ndarray, y: np.ndarray) -> None:
        """Add samples to the current group's normal equations (constant parameters only: with
        forgetting or a random walk the estimate is not the pooled LS the jackknife describes)."""
        if self.rls.frozen or self.drifting:
            return
        ok = np.all(np.isfinite(Phi), axis=(1, 2)) & np.all(np.isfinite(y), axis=1)
        if not ok.all():
            Phi, y = Phi[ok], y[ok]
        if not self._A or self._in_group >= self._group_rows:
            n = Phi.shape[2]
            self._A.append(np.zeros((n, n)))
            self._b.append(np.zeros(n))
            self._in_group = 0
        self._A[-1] += np.einsum("kmi,kmj->ij", Phi, Phi)
        self._b[-1] += np.einsum("kmi,km->i", Phi, y)
        self._in_group += Phi.shape[0]

    def jackknife_variance(self) -> np.ndarray | None:
        """Block-jackknife variance of θ in normalised units (None: too few groups)."""
        if len(self._A) < JACKKNIFE_GROUPS:
            return None
        A, b = merge_groups(np.stack(self._A), np.stack(self._b), JACKKNIFE_GROUPS)
        if not self.held.any():
            return jackknife_from_normal(A, b)
        # The held parameters are known, not estimated: each group's equations for the others
        # with the held columns' share moved to the right-hand side.
        f, h = ~self.held, self.held
        th = self.rls.theta[h]
        var = jackknife_from_normal(A[:, f][:, :, f], b[:, f] - A[:, f][:, :, h] @ th)
        if var is None:
            return None
        out = np.zeros(self.model.n_params)
        out[f] = var
        return out

    def correlation(self) -> float:
        """κ = B·Var(block means)/Var(residual) ≥ 1: how much the residuals' correlation
        (1 kHz samples, filtered, colored model error) inflates the variance of θ̂ over the
        white-residual formula σ²P. Batch-means estimate of the long-run variance; 1 until
        eight block means have been counted (one per output equation per block, so a model
        with m outputs gets there after ⌈8/m⌉ blocks)."""
        if self._bm[1] < 8 or self._bm[2] <= 0:
            return 1.0
        k = self.block * (self._bm[0] / self._bm[1]) / (self._bm[2] / self._bm[3])
        return float(max(k, 1.0))

    def _valid_mask(self, raw: np.ndarray) -> np.ndarray | None:
        """Per row: no invalid raw sample among the last L (the FIR history it depends on)."""
        if self.model.valid is None:
            self._seen += raw.shape[0]
            return None
        N = raw.shape[0]
        bad = ~np.asarray(self.model.valid(sample_from(raw, self.nj)), dtype=bool)
        idx = np.arange(self._seen, self._seen + N)
        last = np.maximum.accumulate(np.where(bad, idx, self._last_bad))
        self._last_bad = int(last[-1])
        self._seen += N
        return (idx - last) >= self.cond.length

    # ------------------------------------------------------------------ read-outs
    def theta(self) -> np.ndarray:
        return self.rls.theta * self.scale

    def covariance(self) -> np.ndarray:
        """κ σ² P in physical units (Gautier eq. 18 with the correlation factor), each variance
        raised to the block jackknife's where that is larger (estimator.jackknife)."""
        cov = inflate(self.correlation() * self.rls.covariance(), self.jackknife_variance())
        return cov * np.outer(self.scale, self.scale)

    def sigma_pct(self) -> np.ndarray:
        return np.where(self.held, np.nan, sigma_pct(self.theta(), self.covariance()))

    def excitation(self) -> tuple[float, float]:
        """(smallest eigenvalue, condition number) of the normalised information matrix."""
        ev = self.rls.information_eigenvalues()
        return float(ev[0]), float(ev[-1] / ev[0])
