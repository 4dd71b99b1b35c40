"""One model on a run's blocks (steps 1–6 of `estimator.batch`, `fit_blocks`): the stacked
observation, the WLS fit, the output-error (IV) refinement and the choice between the two
(`estimator.refine`), Lin's link-by-link estimate beside it; and, for a model family with a
structure the data choose (the Coulomb band, the valve's null offset and lap), the search for
it by least residual (`estimator.shape_search`) over coarse pieces of the run first."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from estimator.linkwise import link_by_link
from estimator.models import LinearModel
from estimator.observation import Instruments, block_cache, observation
from estimator.refine import choose
from estimator.refine import refine as refine_fit
from estimator.shape_search import choose as choose_shape
from estimator.shape_search import choose_switches
from estimator.wls import ModelFit, fit_model, ls_residuals

#: The switch search's first (coarse) sweep scores on every COARSE_EVERY-th stretch of
#: COARSE_PIECE_S seconds of the used data: a third of the cost, the same kinds of motion.
COARSE_PIECE_S = 5.0
COARSE_EVERY = 3


def with_chosen_switches(
    mdl: LinearModel, raw: np.ndarray, blks: Sequence[slice], **kw: Any
) -> tuple[LinearModel, str]:
    """The model rebuilt with the per-joint switching constants that leave the least residual
    (estimator.shape_search.choose_switches; each candidate a plain WLS fit of the same rows,
    scored per joint by its own equations' residual variance)."""
    sw = mdl.switches
    assert sw is not None
    piece = int(COARSE_PIECE_S * kw["fs"])
    pieces = [slice(a, min(a + piece, b.stop)) for b in blks for a in range(b.start, b.stop, piece)]
    short = 2 * kw["trim"] + 30 * kw["nd"]
    coarse = [p for p in pieces[::COARSE_EVERY] if p.stop - p.start > short]

    cache: dict[Any, Any] = {}  # conditioned signals per block: the same for every candidate

    def scored(on: Sequence[slice]) -> Callable[[np.ndarray], np.ndarray]:
        def cost(value: np.ndarray) -> np.ndarray:
            got = candidate_residuals(sw.make(value), raw, on, cache=cache, **kw)
            if got is None:
                return np.full(np.shape(value)[1], np.nan)
            var = np.asarray(got[1], dtype=float) ** 2
            return var.reshape(-1, sw.per_joint).sum(axis=1)

        return cost

    choice = choose_switches(sw, scored(blks), scored(coarse) if coarse else None)
    made = replace(sw.make(choice.value), truth=mdl.truth, prior=mdl.prior, shape=mdl.shape)
    return made, choice.note(mdl.name, sw)


def with_chosen_shape(
    mdl: LinearModel, raw: np.ndarray, blks: Sequence[slice], **kw: Any
) -> tuple[LinearModel, float, str]:
    """The model with the shape constant the data support best (estimator.shape_search): each
    candidate is a plain WLS fit of the same rows (no refinement, no jackknife)."""
    shape = mdl.shape
    assert shape is not None

    cache: dict[Any, Any] = {}  # conditioned signals per block: the same for every candidate

    def cost(value: float) -> float:
        got = candidate_residuals(shape.make(value), raw, blks, cache=cache, **kw)
        return float("nan") if got is None else got[0]

    choice = choose_shape(shape, cost)
    made = replace(shape.make(choice.value), truth=mdl.truth, prior=mdl.prior)
    note = choice.note(mdl.name, shape)
    if choice.at_edge:
        note += "; at the end of the searched range, so the data may want a value beyond it"
    return made, choice.value, note


def candidate_residuals(
    mdl: LinearModel,
    raw: np.ndarray,
    blks: Sequence[slice],
    *,
    fs: float,
    nj: int,
    cutoff_hz: float,
    nd: int,
    trim: int,
    cache: dict[Any, Any] | None = None,
    **_: Any,
) -> tuple[float, np.ndarray] | None:
    """(`residual_var`, `equation_sigma`) of `fit_blocks(mdl, raw, blks, refine=False,
    jackknife_groups=0)`'s fit, the same numbers, without the rest of the fit (weights,
    identifiability, covariances: estimator.wls.ls_residuals): a structure candidate's score.
    None when no block gave a row."""
    parts = _observed(mdl, raw, blks, fs, nj, cutoff_hz, nd, trim, False, cache, None)
    if not parts:
        return None
    Phi = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    return ls_residuals(mdl, Phi, y)


def _observed(
    mdl: LinearModel,
    raw: np.ndarray,
    blks: Sequence[slice],
    fs: float,
    nj: int,
    cutoff_hz: float,
    nd: int,
    trim: int,
    instruments: bool,
    cache: dict[Any, Any] | None,
    rows_used: np.ndarray | None,
    instrument_raw: np.ndarray | None = None,
) -> list[tuple[np.ndarray, np.ndarray, Instruments | None]]:
    """The observation of every block that gave rows (estimator.observation)."""
    parts = []
    for b in blks:
        obs = observation(
            mdl, raw[b], fs, nj, cutoff_hz, nd, trim, instruments, block_cache(cache, b),
            None if instrument_raw is None else instrument_raw[b],
        )  # fmt: skip
        if obs[0].shape[0] > 0:
            if rows_used is not None:
                rows_used[b.start + trim : b.stop - trim] = True
            parts.append(obs)
    return parts


def fit_blocks(
    mdl: LinearModel,
    raw: np.ndarray,
    blks: Sequence[slice],
    *,
    fs: float,
    nj: int,
    cutoff_hz: float,
    nd: int,
    trim: int,
    rank_tol: float | None = None,
    block_s: float = 1.0,
    jackknife_groups: int = 16,
    still: Sequence[str] = (),
    refine: bool = True,
    rows_used: np.ndarray | None = None,
    linkwise: bool = False,
    cache: dict[Any, Any] | None = None,
    instrument_raw: np.ndarray | None = None,
) -> tuple[ModelFit, list[str]] | None:
    """One model on the blocks `blks` of `raw` (steps 1–6 of the module doc), then, with
    `refine`, the output-error refinement (estimator.refine) and the choice between it and
    WLS (`refine.choose`). Returns the fit and notes, or None when no block gave a row.
    `rows_used` (bool, len(raw)) is marked with the rows that went in. `linkwise`: also Lin's
    link-by-link estimate (`ModelFit.linkwise`) for a model with one equation per joint.
    `instrument_raw`: the rows the refinement's instruments are built from (None = `raw`)."""

    parts = _observed(
        mdl, raw, blks, fs, nj, cutoff_hz, nd, trim, refine, cache, rows_used, instrument_raw
    )
    if not parts:
        return None
    Phi = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    r = Phi.shape[0]
    groups = (np.arange(r) * jackknife_groups) // r if jackknife_groups > 0 else None

    def fit_with(Z: np.ndarray | None) -> ModelFit:
        return fit_model(
            mdl,
            Phi,
            y,
            rank_tol,
            block=max(1, round(block_s * fs / nd)),
            groups=groups,
            still=still,
            instruments=Z,
        )

    fit = fit_with(None)
    notes: list[str] = []
    if refine:
        refined = refine_fit(fit, lambda th: stacked_instruments(parts, th), fit_with)
        if refined is not None:
            chosen, notes, warns = choose(fit, refined)
            chosen.theta_wls, chosen.sigma_pct_wls = fit.theta, fit.sigma_pct
            chosen.theta_iv, chosen.sigma_pct_iv = refined.theta, refined.sigma_pct
            chosen.iterations = refined.iterations
            chosen.warnings += warns
            fit = chosen
    if linkwise and mdl.n_outputs == nj:
        fit.linkwise = link_by_link(
            Phi, y, list(mdl.names), np.asarray(mdl.param_scale), fit.correlation
        )
    return fit, notes


def stacked_instruments(
    parts: Sequence[tuple[np.ndarray, np.ndarray, Instruments | None]], theta: np.ndarray
) -> np.ndarray | None:
    """The stacked instruments of the blocks `parts` for θ; None when the model has none."""
    zs = [p[2](theta) for p in parts if p[2] is not None]
    return np.concatenate(zs) if len(zs) == len(parts) else None


def prior_fit(model: LinearModel, why: str) -> ModelFit:
    """A model the run gave no equation for: every parameter at the prior, flagged."""
    n = model.n_params
    theta = np.zeros(n) if model.prior is None else np.asarray(model.prior, dtype=float)
    fit = ModelFit(
        name=model.name,
        names=list(model.names),
        theta_ls=theta.copy(),
        theta=theta.copy(),
        cov=np.zeros((n, n)),
        sigma_pct=np.full(n, np.nan),
        sigma_pct_ls=np.full(n, np.nan),
        residual_var=float("nan"),
        equation_sigma=np.full(model.n_outputs, np.nan),
        singular_values=np.zeros(n),
        condition=float("inf"),
        unidentifiable=list(model.names),
        rows=0,
        truth=None if model.truth is None else np.asarray(model.truth),
        identifiable=np.zeros(n, dtype=bool),
        output_correlation=[1.0] * model.n_outputs,
        disagreement_z=np.zeros(n),
    )
    fit.warnings.append(
        f"the {model.name} model got no usable equation from this run (no stretch of data long "
        f"enough where it holds; {why}): {', '.join(model.names)} are the profile's values, "
        "not measured"
    )
    return fit
