"""Least squares of one model's stacked observation, with honest error bars (Gautier et al. §II,
steps 4–6 of `estimator.batch`):

  4. OLS (eq. 15), σ² (eq. 17), Cov (eq. 18), %σ (eq. 19); then WLS weighting each output
     equation by 1/σ_j from the OLS residuals of that equation (eq. 20–21), its covariance
     multiplied by the residual correlation factor κ ≥ 1 (`correlation_factor`, as online);
  5. identifiability against the noise (`fit_model`): a singular direction of the weighted
     observation matrix that the data resolve only to more than 5 % of a parameter's size
     (3σ), and the parameters of a joint that barely moved, are fixed at the prior (the
     profile's value) and flagged — never printed as measured; exact rank deficiency is one
     such case, not a crash;
  6. error bars: κσ²P, widened by a block jackknife over 16 stretches of the run and by any
     disagreement between output equations on a shared parameter (bias the data reveal).
With instruments Z (the output-error refinement, `estimator.refine`) the same steps run on the
IV solution.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from estimator.jackknife import inflate, jackknife_from_normal
from estimator.linkwise import LinkwiseFit
from estimator.models import LinearModel
from estimator.refine import iv_solve
from estimator.rls import sigma_pct


@dataclass
class ModelFit:
    name: str
    names: list[str]
    theta_ls: np.ndarray
    theta: np.ndarray  # WLS
    cov: np.ndarray  # WLS
    sigma_pct: np.ndarray  # WLS
    sigma_pct_ls: np.ndarray
    residual_var: float  # OLS σ² in normalised equation units (eq. 17)
    equation_sigma: np.ndarray  # per output equation, normalised units (eq. 20)
    singular_values: np.ndarray
    condition: float
    unidentifiable: list[str]
    rows: int
    truth: np.ndarray | None = None
    #: κ ≥ 1 applied to the WLS covariance: residual correlation left after decimation.
    correlation: float = 1.0
    #: Per parameter: measured by this run (False: fixed at the prior, %σ NaN; see fit_model).
    identifiable: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    #: Sentences for the user (weak directions in words, model mismatch).
    warnings: list[str] = field(default_factory=list)
    #: κ of each output equation's residuals alone.
    output_correlation: list[float] = field(default_factory=list)
    #: Per output equation, the largest over the smallest σ its rows were weighted by (1 with
    #: one σ per equation; the speed octiles' spread with `LinearModel.speed_params`).
    row_sigma_spread: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: Per parameter: disagreement between single-equation estimates in σ (`equation_disagreement`).
    disagreement_z: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: `cov` before the widening by equation disagreement (κ and jackknife in): the variance
    #: the estimator's own scatter gives (the refinement's Hausman comparison uses it).
    cov_plain: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    #: Which estimate `theta` is: "WLS", or "IV" (output-error refinement, estimator.refine).
    method: str = "WLS"
    #: IV solutions until the estimate settled (0 for WLS), and whether it did.
    iterations: int = 0
    settled: bool = True
    #: The plain WLS estimate and %σ (flags and σ treatment as `theta`), for comparison when
    #: `theta` is the refined one; None otherwise.
    theta_wls: np.ndarray | None = None
    sigma_pct_wls: np.ndarray | None = None
    #: The refined (IV) estimate and %σ when the refinement ran, whichever is printed.
    theta_iv: np.ndarray | None = None
    sigma_pct_iv: np.ndarray | None = None
    #: Lin's link-by-link estimate of the same data (estimator.linkwise), when asked for.
    linkwise: LinkwiseFit | None = None
    #: The model's shape constant as the batch chose it (LinearModel.shape), if it has one.
    shape_value: float | None = None
    #: Its per-joint switching constants as the batch chose them (LinearModel.switches; the
    #: real-rig family's [b₀; d]), if it has them: what the online estimator takes
    #: (estimator.structure).
    switch_value: np.ndarray | None = None
    #: With the sensors' calibration uncertainty counted (estimator.sensor_sigma): the %σ from
    #: the noise alone (`sigma_pct` is then the total) and σ_cal per parameter (absolute).
    sigma_pct_noise: np.ndarray | None = None
    sigma_cal: np.ndarray | None = None


def _ls_solve(W: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    """(θ, σ², residual) of least squares that never raises on rank deficiency: minimum-norm
    solution, σ² with the rank's degrees of freedom."""
    theta, _, rank, _ = np.linalg.lstsq(W, Y, rcond=None)
    res = Y - W @ theta
    dof = max(W.shape[0] - int(rank), 1)
    return theta, float(res @ res / dof), res


def _ls(W: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    """`_ls_solve`'s θ and σ², with the covariance from the pseudo-inverse (∞ along a null
    direction is not representable, so callers flag those parameters instead: `fit_model`)."""
    theta, s2, _ = _ls_solve(W, Y)
    cov = s2 * np.linalg.pinv(W.T @ W, hermitian=True)
    return theta, s2, cov


def correlation_factor(res: np.ndarray, block: int) -> float:
    """κ = B·mean(block mean²)/mean(e²) ≥ 1 of normalised residuals `res` (r, m): how much
    their correlation inflates the variance of θ̂ over the white-residual formula (eq. 18).

    Decimation whitens the noise, not the colored part of the residual (equation error from
    sensor noise in the regressors, unmodelled dynamics), whose long-run variance is what the
    estimate feels. Same batch-means estimate as online (`estimator.chain`); 1 with fewer than
    eight blocks per equation (or `block` < 1). Never below 1: anti-correlated residuals are
    not credited."""
    if block < 1:
        return 1.0
    nb = res.shape[0] // block
    if nb < 8:
        return 1.0
    full = res[: nb * block]
    means = full.reshape(nb, block, -1).mean(axis=1)
    var = float(np.mean(full**2))
    if var <= 0.0:
        return 1.0
    return max(1.0, block * float(np.mean(means**2)) / var)


def jackknife_variance(
    W: np.ndarray, Y: np.ndarray, groups: np.ndarray, Z: np.ndarray | None = None
) -> np.ndarray | None:
    """Block jackknife variance of the LS estimate of (W, Y) — the IV estimate with
    instruments Z if given — over the labelled `groups` (`estimator.jackknife`)."""
    Z = W if Z is None else Z
    labels = np.unique(groups)
    A = np.stack([Z[groups == g].T @ W[groups == g] for g in labels])
    b = np.stack([Z[groups == g].T @ Y[groups == g] for g in labels])
    return jackknife_from_normal(A, b)


def _solve(
    W: np.ndarray, Y: np.ndarray, Z: np.ndarray | None
) -> tuple[np.ndarray, float, np.ndarray]:
    """LS of (W, Y), or IV with instruments Z (estimator.refine.iv_solve)."""
    return _ls(W, Y) if Z is None else iv_solve(Z, W, Y)


def equation_disagreement(
    Ww: np.ndarray, Yw: np.ndarray, m: int, free: np.ndarray, Zw: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per parameter: the largest disagreement between its estimates from single output
    equations, and that disagreement in units of its own σ (0 where it is in < 2 equations).

    Independent equations sharing a parameter (1/b in every chamber's flow equation, R12 in
    both torque equations) must agree on it if the model holds; a gain error on one sensor
    makes them disagree — bias the data reveal (issue 13, item 3), which the pooled fit hides
    as a compromise with a small σ."""
    r = Ww.shape[0] // m
    n = Ww.shape[1]
    est: list[list[tuple[float, float]]] = [[] for _ in range(n)]
    for j in range(m):
        Wj, Yj = Ww[j * r : (j + 1) * r], Yw[j * r : (j + 1) * r]
        Zj = None if Zw is None else Zw[j * r : (j + 1) * r]
        norms = np.linalg.norm(Wj, axis=0)
        cols = np.flatnonzero(free & (norms > 1e-9 * max(float(norms.max()), 1e-300)))
        if cols.size == 0 or r <= cols.size:
            continue
        th, _, cov = _solve(Wj[:, cols], Yj, None if Zj is None else Zj[:, cols])
        for k, col in enumerate(cols):
            est[int(col)].append((float(th[k]), float(np.sqrt(max(cov[k, k], 0.0)))))
    spread = np.zeros(n)
    zscore = np.zeros(n)
    for c, e in enumerate(est):
        if len(e) < 2:
            continue
        vals = np.array([v for v, _ in e])
        sig = np.array([s for _, s in e])
        i, k = int(np.argmax(vals)), int(np.argmin(vals))
        spread[c] = vals[i] - vals[k]
        zscore[c] = spread[c] / max(float(np.hypot(sig[i], sig[k])), 1e-300)
    return spread, zscore


#: Equations disagreeing on a shared parameter by more than this many σ reveal a bias.
DISAGREEMENT_Z = 4.0


#: A parameter whose 3σ from the data alone exceeds this fraction of its size is not measured
#: by the run (issue 13, item 2): it is fixed at the prior and flagged.
RESOLVE_FRACTION = 0.05


def _stacked(model: LinearModel, Phi: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(W (m·r, n), Y (m·r)): rows grouped by output equation (eq. 14), block j holding
    equation j of every sample."""
    r, m, n = Phi.shape
    if r * m <= n:
        raise ValueError(f"model '{model.name}': {r * m} equations for {n} parameters")
    return Phi.transpose(1, 0, 2).reshape(m * r, n), y.T.reshape(m * r)


def _equation_sigma(res: np.ndarray, r: int, m: int, n: int) -> np.ndarray:
    """σ per output equation of the residual `res` (m·r), grouped as `_stacked` (1 where 0)."""
    sig_j = np.sqrt(np.sum(res.reshape(m, r) ** 2, axis=1) / max(r - n / m, 1.0))
    return np.where(sig_j > 0, sig_j, 1.0)


#: Speed bins per equation for `LinearModel.speed_params` (equal row counts: octiles).
SPEED_BINS = 8


def row_sigma(model: LinearModel, Phi: np.ndarray, res: np.ndarray) -> np.ndarray:
    """σ of every stacked row (grouped as `_stacked`) from the residual `res` (m·r): one per
    output equation (eq. 20), or, for a model with `speed_params`, one per equation and
    octile of the row's speed. Why: an equation's error need not be one σ. The friction
    family's mechanical rows err most where the piston is slowest (its stiction region seen
    through the velocity's low-pass): on the realistic plant about 80 % of the residual's
    energy lies in the quarter of rows with the lowest speed, 5–7× the RMS of the fastest.
    One σ there lets those rows set the inertias as much as the clean ones (M2, R12 3–4 % off
    at σ 2.5–3 %); weighting each by its own σ is WLS with the variance it has."""
    r, m, n = Phi.shape
    if not model.speed_params:
        return np.repeat(_equation_sigma(res, r, m, n), r)
    idx = {nm: k for k, nm in enumerate(model.names)}
    out = np.empty(m * r)
    e = res.reshape(m, r)
    for j, cols in enumerate(model.speed_params):
        speed = np.abs(Phi[:, j, [idx[c] for c in cols]]).sum(axis=1)
        order = np.argsort(speed, kind="stable")
        # No degrees-of-freedom factor: a factor common to every row cancels (the covariance
        # takes σ² from the weighted residual, `_ls_solve`).
        for part in np.array_split(order, min(SPEED_BINS, r)):
            s = np.sqrt(np.mean(e[j, part] ** 2))
            out[j * r + part] = s if s > 0 else 1.0
    return out


def ls_residuals(model: LinearModel, Phi: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """(`residual_var`, `equation_sigma`) that `fit_model` without instruments would return
    for (Φ, y), and nothing else: the OLS start's residual, the same numbers by the same
    operations. What a structure search scores a candidate by (estimator.model_fit): the
    weighting, identifiability and covariances of a full fit would be thrown away."""
    r, m, n = Phi.shape
    _, s2, res = _ls_solve(*_stacked(model, Phi, y))
    return s2, _equation_sigma(res, r, m, n)


def fit_model(
    model: LinearModel,
    Phi: np.ndarray,
    y: np.ndarray,
    rank_tol: float | None = None,
    block: int = 0,
    groups: np.ndarray | None = None,
    still: Sequence[str] = (),
    instruments: np.ndarray | None = None,
) -> ModelFit:
    """OLS and WLS (IV with `instruments` (r, m, n)) of one model on (Φ (r, m, n), y (r, m));
    `block` rows per batch mean for the correlation factor κ (0 = none, white residuals
    assumed); `groups` (r,) labels of contiguous stretches for the block jackknife (None =
    none); `still` = parameters a caller knows the run did not excite (a joint that did not
    move), with the reason.

    Identifiability (issue 13, item 2): a singular direction v_i of the weighted observation
    matrix is resolved to ±σ/s_i by the data (σ = 1 after weighting, times √κ); the direction
    is weak when that makes some parameter's 3σ larger than `RESOLVE_FRACTION` of its size
    (its prior value, else its estimate). `rank_tol` (relative to s_max), if given, also marks
    directions below it. The parameters a weak direction moves are fixed at the model's prior
    (`LinearModel.prior`, the profile's initial guesses; without them the least-squares
    value, still flagged) and the rest re-fitted; they are flagged
    (`identifiable` false, %σ NaN), never printed as measured. Exact rank deficiency is one
    such case, not a crash.

    With `instruments` (the output-error refinement, `estimator.refine`), every estimate after
    the OLS start is IDIM-IV: weights from the IV residuals, θ = (ZᵀWΦ)⁻¹ZᵀWy, its covariance
    σ²(ZᵀΦ)⁻¹ZᵀZ(ΦᵀZ)⁻¹, κ, the jackknife and the equation check all on IV estimates; the
    identifiability test stays on the measured Φ (what the data resolve)."""
    r, m, n = Phi.shape
    W, Y = _stacked(model, Phi, y)
    G = None if groups is None else np.tile(np.asarray(groups), m)
    scale = np.asarray(model.param_scale, dtype=float)
    S = np.outer(scale, scale)
    Z = None if instruments is None else instruments.transpose(1, 0, 2).reshape(m * r, n)
    th_ls, s2, cov_ls = _ls(W, Y)
    # Weights from the equation errors: the LS residual understates them when the regressor
    # is noisy (LS fits part of the noise), the IV residual does not.
    th_0 = th_ls if Z is None else iv_solve(Z, W, Y)[0]
    res_0 = Y - W @ th_0
    sig_j = _equation_sigma(res_0, r, m, n)
    row_s = row_sigma(model, Phi, res_0).reshape(m, r)
    w = 1.0 / row_s.reshape(-1)
    Ww, Yw = W * w[:, None], Y * w
    Zw = None if Z is None else Z * w[:, None]
    th_w, _, cov_w = _solve(Ww, Yw, Zw)
    res_w = (Yw - Ww @ th_w).reshape(m, r).T
    kappa = correlation_factor(res_w, block)
    kappa_j = [correlation_factor(res_w[:, j : j + 1], block) for j in range(m)]
    # --- identifiability against the noise (normalised units: θ_n = θ/scale)
    _, sv, Vt = np.linalg.svd(Ww, full_matrices=False)
    prior = None if model.prior is None else np.asarray(model.prior, dtype=float) / scale
    size = np.abs(prior) if prior is not None else np.abs(th_w)
    size = np.where(size > 0, size, 1.0)
    names = list(model.names)
    weak_dirs: list[str] = []
    weak = np.zeros(n, dtype=bool)
    for s_i, v in zip(sv, Vt, strict=True):
        spread = 3.0 * np.sqrt(kappa) * np.abs(v) / max(s_i, 1e-300)  # 3σ per parameter
        bad = (spread > RESOLVE_FRACTION * size) & (np.abs(v) > 0.1)
        if (rank_tol is not None and s_i < rank_tol * sv[0]) or s_i <= 1e-12 * sv[0]:
            bad |= np.abs(v) > 0.1
        if bad.any():
            weak |= bad
            terms = [f"{c:+.3f}·{nm}" for c, nm in zip(v, names, strict=True) if abs(c) > 0.05]
            weak_dirs.append(" ".join(terms) + f" (s = {s_i:.2e})")
    weak |= np.isin(names, list(still))
    free = ~weak
    theta_n = th_w.copy()
    cov_n = np.zeros((n, n))
    if weak.any():
        theta_n[weak] = prior[weak] if prior is not None else th_w[weak]
    # What the free parameters must explain: the fixed ones' part (at the prior) removed.
    Yf = Yw - Ww[:, weak] @ theta_n[weak]
    Zf = None if Zw is None else Zw[:, free]
    if free.any():
        th_f, _, cov_f = _solve(Ww[:, free], Yf, Zf)
        theta_n[free] = th_f
        # Weak parameters fixed at their own least-squares values (no prior) are not known,
        # only unresolved: the free parameters' σ must carry them (the marginal covariance
        # and jackknife of the whole fit, not the ones conditional on that arbitrary value).
        # On the real-rig family's in-family plant the conditional σ put the null offsets
        # Q0 17–27σ from the truth, their null-leakage twins QL fixed at noise.
        marginal = bool(weak.any()) and prior is None
        if marginal:
            cov_m = cov_w[np.ix_(free, free)]
            short = np.maximum(np.diag(cov_f) - np.diag(cov_m), 0.0)
            cov_f = cov_m + np.diag(short)
        cov_f = kappa * cov_f
        # Block jackknife: the data's own word on the scatter (correlated residuals, bias that
        # varies along the run); σ² is the larger of it and κσ²P (Gautier eq. 18 × κ).
        vj = None
        if G is not None:
            vj = jackknife_variance(Ww[:, free], Yf, G, Zf)
            if marginal and vj is not None:
                vj_all = jackknife_variance(Ww, Yw, G, Zw)
                vj = vj if vj_all is None else np.maximum(vj, vj_all[free])
        cov_f = inflate(cov_f, vj)
        idx = np.flatnonzero(free)
        cov_n[np.ix_(idx, idx)] = cov_f
    cov_plain_n = cov_n.copy()
    spread, zscore = equation_disagreement(Ww, Yf, m, free, Zw) if m > 1 else (np.zeros(n),) * 2
    revealed = zscore > DISAGREEMENT_Z
    if revealed.any():
        # Half the spread is the least bias one of the equations carries: into σ it goes, and
        # into every parameter fitted jointly with it, by how far the fit carries it along
        # (regression of θ_j on θ_c: Cov_jc/Var_c per unit of bias in θ_c).
        var = np.diag(cov_n).copy()
        extra = np.zeros(n)
        for c in np.flatnonzero(revealed):
            if var[c] <= 0.0:
                continue
            extra += (cov_n[:, c] / var[c] * 0.5 * spread[c]) ** 2
        cov_n = cov_n + np.diag(extra)
    theta = theta_n * scale
    cov = cov_n * S
    sp = sigma_pct(theta, cov)
    cov_plain = cov_plain_n * S
    sp[weak] = np.nan
    return ModelFit(
        name=model.name,
        names=names,
        theta_ls=th_ls * scale,
        theta=theta,
        cov=cov,
        sigma_pct=sp,
        sigma_pct_ls=sigma_pct(th_ls * scale, cov_ls * S),
        residual_var=s2,
        equation_sigma=sig_j,
        singular_values=sv,
        condition=float(sv[0] / sv[-1]) if sv[-1] > 0 else float("inf"),
        unidentifiable=weak_dirs,
        rows=m * r,
        truth=None if model.truth is None else np.asarray(model.truth),
        correlation=kappa,
        identifiable=free,
        output_correlation=kappa_j,
        row_sigma_spread=row_s.max(axis=1) / row_s.min(axis=1),
        disagreement_z=zscore,
        method="WLS" if Z is None else "IV",
        cov_plain=cov_plain,
    )
