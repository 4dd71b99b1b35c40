"""Bias-robust refinement of the batch estimate: instrumental variables built from the
identified model's own prediction (issue 14 item 2, issue 13 item 3; seed 003's DIDIM/IDIM-IV
family, `TUM-ICS/BIRDy` IDIM_IV).

Why. The fluid equations carry the measured pressure's *derivative* in the regressor (the
1/b column −ṗ·V). Differentiating a noisy pressure makes that column noisy, and least squares
with noise in the regressor (errors in variables) shrinks the coefficient towards zero: 1/b
measured −3 % at pressure noise ×10 and −28 % at ×34, whatever the amount of data.

What. For every sample the model is solved for the pressure rates it predicts from what is
*not* differentiated — the measured pressures themselves (through the orifice terms h(p)·u),
the piston velocity, the spool — with the current parameters θ:
    Φ(x, ṗ)θ = y  is affine in ṗ  →  ṗ̂ = the least-squares solution of C ṗ = −e₀ per sample,
and the instruments Z are the regressor evaluated with ṗ̂ in place of the measured ṗ (every
other column as measured). Then θ = (ZᵀΦ)⁻¹Zᵀy (IDIM-IV), and Z is rebuilt from the new θ
until the estimate settles. Z is uncorrelated with the noise that biases LS: the noise in ṗ̂
is the pressure noise itself (through h), the noise in the measured ṗ is its derivative, and
a stationary signal is uncorrelated with its own derivative at the same instant — which stays
true after the zero-phase (symmetric) filters and the decimation both go through. A wrong θ
in the prediction costs variance (weaker instruments), not bias: IV is consistent for any
instrument correlated with the regressor and not with the equation error.

Not a full DIDIM (closed-loop simulation with the control law): the pressure prediction is
one step ahead from measured pressures, not an open-loop simulation — the rig's pressure
simulation drifts wherever the valve sits at null (no restoring flow), and a simulation needs
every effect the model lacks; the one-step prediction needs neither.

Mechanical models the same way, for q̈: their regressor holds the angle's second derivative,
which carries the angle sensors' noise (on the 1-DOF profile least squares sits −0.13 % low on
M, z down to −3). Solved for the q̈ the model predicts from the measured force (the pressures,
whose noise is independent of the angles'), the instruments leave that noise out: M +0.014 %
mean over 10 recordings, every parameter within ±3σ. (`RATE_FIELDS`: what a model is solved
for; a model whose regressor depends on none has Z = Φ and is not refined.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol, TypeVar

import numpy as np

from estimator.models import LinearModel, Sample, evaluate

#: Stop iterating when no free parameter moved by more than this fraction of its σ …
SETTLE_SIGMA = 0.05
#: … or after this many IV solutions.
MAX_ITERATIONS = 8


class ModelFitLike(Protocol):
    """What `refine` needs of a fit (estimator.wls.ModelFit)."""

    name: str
    names: list[str]
    theta: np.ndarray
    cov: np.ndarray
    cov_plain: np.ndarray
    sigma_pct: np.ndarray
    identifiable: np.ndarray
    disagreement_z: np.ndarray
    iterations: int
    settled: bool


F = TypeVar("F", bound=ModelFitLike)


#: The differentiated signals a model is solved for to build its instruments: the pressure
#: rates (fluid models) and the joints' accelerations (mechanical models, whose q̈ is the
#: angle's second derivative and carries the angle sensors' noise).
RATE_FIELDS = ("pd_cap", "pd_rod", "qdd")


def rate_channels(model: LinearModel, x: Sample) -> list[tuple[str, int]]:
    """The rate signals (field, joint) of RATE_FIELDS the model's regressor depends on."""
    x0 = _with_rates(x, None)
    Phi0, y0 = evaluate(model, x0)
    out = []
    for field in RATE_FIELDS:
        for j in range(x.q.shape[1]):
            Phi1, y1 = evaluate(model, _with_rates(x0, (field, j)))
            if np.any(Phi1 != Phi0) or np.any(y1 != y0):
                out.append((field, j))
    return out


def _with_rates(x: Sample, unit: tuple[str, int] | None) -> Sample:
    """x with every rate of RATE_FIELDS zero, but 1 on `unit` (field, joint) if given."""
    z = np.zeros_like(x.p_cap)
    pd = {f: z.copy() for f in RATE_FIELDS}
    if unit is not None:
        pd[unit[0]][:, unit[1]] = 1.0
    return replace(x, **pd)


def predicted_rates(
    model: LinearModel,
    x: Sample,
    Phi_rest: np.ndarray,
    y_rest: np.ndarray,
    theta: np.ndarray,
    channels: list[tuple[str, int]],
) -> Sample:
    """x with the pressure rates the model predicts with θ (see the module doc).

    `Phi_rest` (N, m, n), `y_rest` (N, m): the part of the observation that is not
    `evaluate(model, x)` (the exactly filtered static part minus its conditioned twin).
    The equation error is affine in ṗ (each rate multiplies a volume or a coefficient):
    e(ṗ) = Φ(ṗ)θ − y(ṗ) = e₀ + C ṗ."""
    x0 = _with_rates(x, None)
    Phi0, y0 = evaluate(model, x0)
    e0 = (Phi_rest + Phi0) @ theta - (y_rest + y0)
    cols = []
    for c in channels:
        Phi1, y1 = evaluate(model, _with_rates(x0, c))
        cols.append((Phi1 - Phi0) @ theta - (y1 - y0))
    C = np.stack(cols, axis=2)
    # Per sample: min ‖C ṗ + e₀‖ (m equations, one rate per chamber); a ridge far below the
    # columns' size keeps a sample whose C is degenerate finite.
    CtC = np.einsum("nmi,nmj->nij", C, C)
    ridge = 1e-12 * np.maximum(np.trace(CtC, axis1=1, axis2=2), 1e-300)
    CtC = CtC + ridge[:, None, None] * np.eye(len(channels))[None]
    rates = np.linalg.solve(CtC, -np.einsum("nmi,nm->ni", C, e0)[..., None])[..., 0]
    new = {f: getattr(x, f).copy() for f in RATE_FIELDS}
    for k, (field, j) in enumerate(channels):
        new[field][:, j] = rates[:, k]
    return replace(x, **new)


def iv_solve(Z: np.ndarray, W: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    """IDIM-IV θ = (ZᵀW)⁻¹ZᵀY, σ² of the residual Y − Wθ (the measured equation error), and
    the IV covariance σ²(ZᵀW)⁻¹ZᵀZ(WᵀZ)⁻¹ (white residuals; the caller widens it as for LS)."""
    A = Z.T @ W
    theta = np.linalg.lstsq(A, Z.T @ Y, rcond=None)[0]
    res = Y - W @ theta
    rank = int(np.linalg.matrix_rank(A))
    s2 = float(res @ res / max(W.shape[0] - rank, 1))
    Ai = np.linalg.pinv(A)
    return theta, s2, s2 * Ai @ (Z.T @ Z) @ Ai.T


def settled(old: np.ndarray, new: np.ndarray, sigma: np.ndarray, free: np.ndarray) -> bool:
    """No free parameter moved by more than SETTLE_SIGMA of its σ."""
    d = np.abs(new - old)[free]
    s = sigma[free]
    return bool(np.all(d <= SETTLE_SIGMA * np.where(np.isfinite(s) & (s > 0), s, np.inf)))


def refine(
    start: F,
    instruments: Callable[[np.ndarray], np.ndarray | None],
    fit: Callable[[np.ndarray], F],
) -> F | None:
    """Iterate IV from the WLS fit `start`: Z = instruments(θ), θ ← fit(Z).θ, until no free
    parameter moves by more than SETTLE_SIGMA of its σ (or MAX_ITERATIONS). None when the
    model has nothing to refine (no pressure rate in its regressor: IV would be LS)."""
    theta = start.theta
    best = None
    for k in range(1, MAX_ITERATIONS + 1):
        Z = instruments(theta)
        if Z is None or not np.all(np.isfinite(Z)):
            return best
        new = fit(Z)
        if not np.all(np.isfinite(new.theta)):
            return best
        new.iterations = k
        sigma = np.abs(new.theta) * new.sigma_pct / 100.0
        new.settled = settled(theta, new.theta, sigma, new.identifiable)
        theta, best = new.theta, new
        if new.settled:
            break
    return best


#: A parameter whose 3σ exceeds this fraction of its value is not measured
#: (estimator.wls.RESOLVE_FRACTION, not imported: wls imports this module).
RESOLVE_FRACTION = 0.05
#: LS and IV differing by more than this many σ of their difference: LS is biased (Hausman).
HAUSMAN_Z = 3.0
#: Equations disagreeing by more than this many σ (estimator.wls.DISAGREEMENT_Z).
AGREEMENT_Z = 4.0
#: An untrusted refinement (its equations disagree, or it does not resolve every parameter)
#: that differs from least squares by more than this fraction of the value is a warning (the
#: parameters are conditional on the model); by less, a note. Why not a warning at any
#: difference: the max of the refinement's equations' z is a noisy statistic, and on the
#: exact-model nominal plant it crossed AGREEMENT_Z in about 1 run of 5 while LS and IV were
#: 0.2 % apart. (Until the instruments were built from the spool without the LVDT's noise,
#: `estimator.spool.INSTRUMENT_CROSSOVER_HZ`, this was also the bar for printing IV at all:
#: its own bias, +0.1…+0.3 % on the nominal 1/b and +1.1 % on the 1-DOF one, was as large as
#: what it removed.)
MATERIAL_FRACTION = 0.01


def hausman_z(wls: ModelFitLike, iv: ModelFitLike) -> np.ndarray:
    """Per parameter |θ_IV − θ_WLS| / σ_d, σ_d² = Var_IV − Var_WLS (Durbin–Wu–Hausman: under
    no bias WLS is the efficient one and the difference has that variance), floored at
    Var_IV/4 so that equally strong estimators do not make any difference significant.
    Variances without the equation-disagreement widening (`cov_plain`)."""
    v_iv = np.diag(iv.cov_plain)
    v_ls = np.diag(wls.cov_plain)
    var = np.maximum(v_iv - v_ls, 0.25 * v_iv)
    z = np.abs(iv.theta - wls.theta) / np.sqrt(np.maximum(var, 1e-300))
    return np.where(wls.identifiable & iv.identifiable, z, 0.0)


def choose(wls: F, iv: F) -> tuple[F, list[str], list[str]]:
    """Which estimate to print, with notes and warnings (plain sentences).

    The refined (IV) one when the Hausman test says LS is biased and IV's output equations
    agree on their shared parameters (an unbiased estimate of a model that holds makes them
    agree) and it resolves every parameter it measures; LS otherwise — where the two
    still differ beyond their σ, the difference is bias the data reveal and LS's σ is widened
    by half of it (as for disagreeing equations, estimator.wls.fit_model): with the truth
    anywhere between the two, LS's ±3σ then covers it. A note says so when both estimates are
    sound or differ immaterially; a warning names the parameters when they differ materially
    and the refinement is not trusted."""
    names = list(wls.names)
    z = hausman_z(wls, iv)
    biased = z > HAUSMAN_Z
    # Measured by the refinement: identifiable and resolved by its own σ as fit_model asks
    # of least squares (3σ within RESOLVE_FRACTION of the value).
    with np.errstate(invalid="ignore"):
        resolved = iv.identifiable & (3.0 * iv.sigma_pct <= 100.0 * RESOLVE_FRACTION)
    # Parameters the refinement measures and LS cannot (LS's σ too wide: its noisy regressor)
    gained = resolved & ~wls.identifiable
    iv_agree = float(np.max(iv.disagreement_z, initial=0.0))
    ls_agree = float(np.max(wls.disagreement_z, initial=0.0))
    acceptable = (
        iv.settled
        and not (iv.identifiable & ~resolved).any()
        and iv_agree <= max(ls_agree, AGREEMENT_Z)
    )

    def listing(fit: F, other: F) -> str:
        return ", ".join(
            f"{nm} {fmt(fit.theta[i])} vs {fmt(other.theta[i])} ({z[i]:.0f}σ)"
            for i, nm in enumerate(names)
            if biased[i]
        )

    with np.errstate(invalid="ignore", divide="ignore"):
        material = biased & (np.abs(iv.theta - wls.theta) > MATERIAL_FRACTION * np.abs(wls.theta))
    if acceptable and (biased.any() or gained.any()):
        why = []
        if biased.any():
            why.append(f"refined vs least squares: {listing(iv, wls)}")
        if gained.any():
            why.append(
                f"{', '.join(nm for i, nm in enumerate(names) if gained[i])} measured by the "
                "refinement only"
            )
        note = (
            f"the {wls.name} model's least-squares estimate is biased (errors in variables: "
            f"noisy signals in its regressor): output-error refinement (IV, {iv.iterations} "
            f"iterations) printed; {'; '.join(why)}"
        )
        return iv, [note], []
    if not iv.settled:
        # A refinement that keeps moving is not an estimate (on a plant far outside the model
        # family the prediction that builds the instruments degrades with every step).
        return (
            wls,
            [
                f"the {wls.name} model's output-error refinement did not settle in "
                f"{iv.iterations} iterations: least squares printed"
            ],
            [],
        )
    if not biased.any():
        return wls, [], []
    # LS kept: widen its σ by half the difference, carried into correlated parameters.
    _widen(wls, np.where(biased, iv.theta - wls.theta, 0.0), biased)
    if not material.any():
        # The refinement is not trusted but differs by less than MATERIAL_FRACTION: a note.
        # LS is printed with σ covering the difference, and LS's own equations and residuals
        # are judged by estimator.batch, which warns when they reveal a model error.
        note = (
            f"the {wls.name} model's refined (IV) estimate is not trusted here (its output "
            f"equations disagree up to {iv_agree:.0f}σ, or its σ does not resolve every "
            f"parameter) and differs from least squares by less than "
            f"{100 * MATERIAL_FRACTION:.0f} % ({listing(wls, iv)}): least squares printed, "
            "σ widened by half the difference"
        )
        return wls, [note], []
    warning = (
        f"the {wls.name} model's least-squares and output-error (IV) estimates disagree: "
        f"{listing(wls, iv)}; the refinement is not trusted here (its output equations "
        f"disagree up to {iv_agree:.0f}σ, or its σ does not resolve every parameter), so "
        "least squares is printed with σ widened by the difference; "
        f"{', '.join(nm for i, nm in enumerate(names) if biased[i])} "
        "conditional on the model"
    )
    return wls, [], [warning]


def _widen(wls: F, d: np.ndarray, biased: np.ndarray) -> None:
    """σ of `wls` widened by half the difference `d` on the biased parameters, carried into
    the parameters correlated with them."""
    var = np.diag(wls.cov).copy()
    extra = np.zeros_like(var)
    for c in np.flatnonzero(biased):
        if var[c] > 0:
            extra += (wls.cov[:, c] / var[c] * 0.5 * d[c]) ** 2
    wls.cov = wls.cov + np.diag(extra)
    sp = 100.0 * np.sqrt(np.diag(wls.cov)) / np.maximum(np.abs(wls.theta), 1e-300)
    wls.sigma_pct = np.where(wls.identifiable, sp, np.nan)


def fmt(v: float) -> str:
    return f"{v:.4g}"
