"""The experiment's repeated periods, found in the recording, averaged and fitted by maximum
likelihood (issue 14 item 2; seed 004; building blocks in `estimator.periodic`).

The standard experiment repeats its MFS period six times "so the estimator can average
periods". `find_repeats` finds them in the recorded reference (`ref.*` columns: exactly
periodic where the trajectory is), without trusting the experiment file's timing (the runner's
approach moves and settle segments shift the start). `periodic_fit` evaluates a model on each
repeat — the first dropped (transient) — and fits `estimator.periodic.periodic_wls` to them:
equations averaged over repeats (regressor noise variance ÷ K, so the errors-in-variables bias
÷ K too), weights and covariance from the equation errors' spread between repeats (the noise,
without a model of it; a periodic model error is the same in every repeat and cancels there).

Each repeat is conditioned as a periodic signal: tiled three times, filtered and
differentiated, the middle period kept — so no filter transient enters, and the decimated rows
of every repeat fall on the same phases.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from estimator.models import LinearModel
from estimator.periodic import periodic_wls
from estimator.rls import sigma_pct

#: Reference samples this close (rad) one period apart count as the same trajectory.
REF_TOL = 1.0e-9


@dataclass
class Repeats:
    start: int  # first row of the first repeat used (after the dropped one)
    period: int  # rows
    count: int  # repeats used


@dataclass
class PeriodicResult:
    name: str
    names: list[str]
    theta: np.ndarray
    sigma_pct: np.ndarray
    #: Per output equation: one repeat's equation-error variance (normalised units).
    noise_var: np.ndarray
    repeats: Repeats


def find_repeats(
    ref: np.ndarray, good: np.ndarray, period: int, drop_first: bool = True
) -> Repeats | None:
    """The longest stretch of usable rows (`good`) whose reference repeats itself every
    `period` rows; None if it holds fewer than 3 repeats (2 after dropping the first)."""
    if period < 2 or ref.shape[0] < 3 * period:
        return None
    same = np.all(np.abs(ref[period:] - ref[:-period]) <= REF_TOL, axis=1)
    same &= good[period:] & good[:-period]
    # Runs of True in `same`: row k and k+period agree for k in the run.
    edges = np.flatnonzero(np.diff(np.r_[0, same.astype(np.int8), 0]))
    if edges.size == 0:
        return None
    starts, stops = edges[0::2], edges[1::2]
    best = int(np.argmax(stops - starts))
    s0, length = int(starts[best]), int(stops[best] - starts[best])
    count = length // period + 1  # a run of L rows covers L + period rows of signal
    if drop_first:
        s0, count = s0 + period, count - 1
    if count < 2:
        return None
    return Repeats(start=s0, period=period, count=count)


def periodic_fit(
    model: LinearModel,
    raw: np.ndarray,
    rep: Repeats,
    observe: object,
    nd: int,
    valid_rows: object,
) -> PeriodicResult | None:
    """ML fit of `model` on the repeats `rep` of `raw`. `observe(model, raw_block, trim)` is
    the batch's observation (Φ, y) without row selection (`model.valid` None), `valid_rows(
    model, raw_block)` its row mask at the decimated rate; both from `estimator.batch`."""
    P = rep.period
    if P % nd:
        return None
    n_rows = P // nd
    phis, ys, keep = [], [], np.ones(n_rows, dtype=bool)
    plain = replace(model, valid=None)
    for k in range(rep.count):
        block = raw[rep.start + k * P : rep.start + (k + 1) * P]
        tiled = np.concatenate([block, block, block])
        Phi, y = observe(plain, tiled, P)  # type: ignore[operator]
        ok = valid_rows(model, tiled)  # type: ignore[operator]
        # Rows after the trim of P raw rows at each end: the middle period exactly.
        phis.append(Phi[:n_rows])
        ys.append(y[:n_rows])
        keep &= ok[:n_rows]
    if np.count_nonzero(keep) * model.n_outputs <= 2 * model.n_params:
        return None
    Phi_k = np.stack(phis)[:, keep]
    y_k = np.stack(ys)[:, keep]
    fit = periodic_wls(Phi_k, y_k)
    scale = np.asarray(model.param_scale, dtype=float)
    theta = fit.theta * scale
    cov = fit.cov * np.outer(scale, scale)
    return PeriodicResult(
        name=model.name,
        names=list(model.names),
        theta=theta,
        sigma_pct=sigma_pct(theta, cov),
        noise_var=fit.noise_var,
        repeats=rep,
    )
