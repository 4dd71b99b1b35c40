"""Offline identification of a recorded run: IDIM-LS and WLS (Gautier et al. §II).

    result = identify_run(columns, params_known, profile=profile)

`columns` maps sample-layout column names (`"t"`, `"eng.q_1"`, …) to arrays — e.g. from
`daq.recording.read_run(path)` via `{n: run.column(n) for n in run.meta["columns"]}` — and
`profile` says which channel is which (role, joint). `params_known` supplies the geometry.

Steps per model (Gautier §II; the same models as online, `estimator.models`):
  0. the joint angle q the regressors differentiate is the potentiometer's, through the cylinder
     geometry (`estimator.angles`: the resolver's noise in q̈ biased M1, M2, R12 by up to 4 %);
     the spool u the LVDT's below 2 Hz and the valve command's lag above (`estimator.spool`:
     the LVDT's noise biased every flow gain by −0.04 %, about one σ);
  1. zero-phase Butterworth low-pass (`sosfiltfilt`) of every measured signal, then five-point
     central differences for ṡ, ṗ, q̇, q̈ (no phase shift: exact alignment of all columns);
  2. the derivative-free part of Φ and y is evaluated on the raw samples and filtered with the
     same zero-phase filter (exact parallel filtering), the rest on the filtered signals;
  2b. samples where the model does not hold (`LinearModel.valid`, e.g. relief valve open) are
     dropped together with everything the filters smeared them into;
  3. parallel decimation: every column of Φ and y low-passed (0.8·f_s/(2·n_d)) and resampled
     1 in n_d, which whitens the noise part of the residual (not the colored rest: step 4);
  4. OLS (eq. 15), σ² (eq. 17), Cov (eq. 18), %σ (eq. 19); then WLS weighting each output
     equation by 1/σ_j from the OLS residuals of that equation (eq. 20–21), its covariance
     multiplied by the residual correlation factor κ ≥ 1 (`correlation_factor`, as online);
  5. identifiability against the noise (`fit_model`): a singular direction of the weighted
     observation matrix that the data resolve only to more than 5 % of a parameter's size
     (3σ), and the parameters of a joint that barely moved, are fixed at the prior (the
     profile's value) and flagged — never printed as measured; exact rank deficiency is one
     such case, not a crash;
  6. error bars: κσ²P, widened by a block jackknife over 16 stretches of the run and by any
     disagreement between output equations on a shared parameter (bias the data reveal);
     warnings when residuals are far from white or equations disagree (model mismatch).
Rows outside RUNNING or with a fault/interlock flag are left out and the run is cut into
blocks at every jump in `t` or `seq`; each block is filtered on its own (`estimator.datause`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.signal import butter, decimate, sosfiltfilt

from controller.plant.dynamics import cylinder
from controller.plant.params import PlantParams
from daq.profile.schema import Profile
from estimator.angles import AngleFusion
from estimator.chain import N_SIGNALS, TEMP_SLOT, sample_from, unmeasured_oil_c
from estimator.datause import STATE_RUNNING, DataUse, blocks, classify
from estimator.jackknife import inflate, jackknife_from_normal
from estimator.linkwise import LinkwiseFit, link_by_link
from estimator.models import LinearModel, Sample, evaluate, reference_models, static_sample
from estimator.online import ROLE_SLOT
from estimator.refine import choose, iv_solve, predicted_rates, rate_channels
from estimator.refine import refine as refine_fit
from estimator.repeats import PeriodicResult, find_repeats, periodic_fit
from estimator.rls import sigma_pct
from estimator.shape_search import choose as choose_shape
from estimator.shape_search import choose_switches
from estimator.spool import fuse_blocks


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
    #: Per parameter: disagreement between single-equation estimates in σ (batch.py).
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
    #: With the sensors' calibration uncertainty counted (estimator.sensor_sigma): the %σ from
    #: the noise alone (`sigma_pct` is then the total) and σ_cal per parameter (absolute).
    sigma_pct_noise: np.ndarray | None = None
    sigma_cal: np.ndarray | None = None


@dataclass
class BatchResult:
    fits: list[ModelFit]
    fs: float
    #: (cutoff Hz, decimation factor) used for each model, in `fits` order.
    conditioning: list[tuple[float, int]]
    #: Rows used and left out, and why (estimator.datause).
    data: DataUse = field(default_factory=DataUse)
    #: Everything the user must read before trusting the numbers (plain sentences).
    warnings: list[str] = field(default_factory=list)
    #: What was done that the user should know (e.g. which estimate is printed).
    notes: list[str] = field(default_factory=list)
    #: ML fits on the experiment's repeated periods (estimator.repeats), when asked for.
    periodic: list[PeriodicResult] = field(default_factory=list)
    #: Parameter name → the reference parameter it stands for (LinearModel.plant_names).
    plant_names: dict[str, str] = field(default_factory=dict)
    names: list[str] = field(init=False)
    identifiable: np.ndarray = field(init=False)
    theta: np.ndarray = field(init=False)
    sigma_pct: np.ndarray = field(init=False)
    truth: np.ndarray | None = field(init=False)
    #: Per parameter: which estimate `theta` is ("WLS" or "IV", ModelFit.method), and the
    #: plain WLS estimate and %σ beside it (the same as `theta` where WLS is printed).
    methods: list[str] = field(init=False)
    theta_wls: np.ndarray = field(init=False)
    sigma_pct_wls: np.ndarray = field(init=False)
    #: %σ from the noise alone where the sensors' uncertainty was counted (`sigma_pct` is the
    #: total), else None.
    sigma_pct_noise: np.ndarray | None = field(init=False)

    def __post_init__(self) -> None:
        noise = [f.sigma_pct if f.sigma_pct_noise is None else f.sigma_pct_noise for f in self.fits]
        counted = any(f.sigma_pct_noise is not None for f in self.fits)
        self.sigma_pct_noise = np.concatenate(noise) if counted else None
        self.methods = [f.method for f in self.fits for _ in f.names]
        self.theta_wls = np.concatenate(
            [f.theta if f.theta_wls is None else f.theta_wls for f in self.fits]
        )
        self.sigma_pct_wls = np.concatenate(
            [f.sigma_pct if f.sigma_pct_wls is None else f.sigma_pct_wls for f in self.fits]
        )
        self.names = [n for f in self.fits for n in f.names]
        self.theta = np.concatenate([f.theta for f in self.fits])
        self.sigma_pct = np.concatenate([f.sigma_pct for f in self.fits])
        self.identifiable = np.concatenate([f.identifiable for f in self.fits])
        truths = [f.truth for f in self.fits]
        self.truth = None if any(t is None for t in truths) else np.concatenate(truths)  # type: ignore[arg-type]


def signals_from_columns(
    columns: Mapping[str, np.ndarray],
    profile: Profile,
    params: PlantParams,
    *,
    fuse_angles: bool = True,
) -> np.ndarray:
    """(N, 6·nj) raw block `[q | s | p_cap | p_rod | u | temp]` from `eng.<channel>` columns
    (estimator.chain; temp from the profile's oil temperature channel where `[plant.oil]`
    declares a law to use it with, else `unmeasured_oil_c`).

    With potentiometers and `fuse_angles`, q is the potentiometer's angle with the resolver's
    mean offset (`estimator.angles`: 5–7× less noise in q̈ on the reference rig)."""
    nj = len(profile.joints)
    n = len(next(iter(columns.values())))
    raw = np.zeros((n, N_SIGNALS * nj))
    have_s = True
    for ji, j in enumerate(profile.joints):
        for role, slot in ROLE_SLOT.items():
            ch = profile.joint_channel(j.name, role)  # type: ignore[arg-type]
            if ch is None:
                if role == "potentiometer":
                    have_s = False
                continue
            name = f"eng.{ch.name}"
            if name not in columns:
                raise ValueError(f"recording has no column '{name}' ({role} of joint {j.name})")
            raw[:, slot * nj + ji] = np.asarray(columns[name], dtype=float)
    temp = raw[:, TEMP_SLOT * nj : (TEMP_SLOT + 1) * nj]
    # Read only where an oil law uses it ([plant.oil]): a broken temperature sensor must not
    # cost the rows of a model that never looks at it.
    oil = profile.oil_temperature if params.oil is not None else None
    if oil is None:
        temp[:] = unmeasured_oil_c(params)
    else:
        name = f"eng.{oil.name}"
        if name not in columns:
            raise ValueError(f"recording has no column '{name}' (the oil temperature)")
        temp[:] = np.asarray(columns[name], dtype=float)[:, None]
    if not have_s:
        raw[:, nj : 2 * nj] = cylinder(params, raw[:, :nj])[0]
    elif fuse_angles:
        AngleFusion(params, nj).apply(raw)
    return raw


def derivative(x: np.ndarray, dt: float) -> np.ndarray:
    """dx/dt along axis 0 by the five-point central difference (np.gradient at the two ends).

    Why not the three-point one: its gain sin(ωΔt)/(ωΔt) is 0.17 % low at the 16 Hz hydraulic
    resonance at 1 kHz, twice that for q̈ — a bias in the inertial columns that filtering
    keeps (it is in band); the five-point stencil's error is (ωΔt)⁴/30 ≈ 3e-6."""
    d = np.gradient(x, dt, axis=0)
    if x.shape[0] >= 5:
        d[2:-2] = (x[:-4] - 8.0 * x[1:-3] + 8.0 * x[3:-1] - x[4:]) / (12.0 * dt)
    return d


def _conditioned(raw: np.ndarray, sos: np.ndarray, fs: float, nj: int) -> Sample:
    xf = sosfiltfilt(sos, raw, axis=0)
    d1 = derivative(xf, 1.0 / fs)
    d2 = derivative(d1, 1.0 / fs)
    return sample_from(raw, nj, np.stack([xf, d1, d2], axis=1))


def observation(
    model: LinearModel,
    raw: np.ndarray,
    fs: float,
    nj: int,
    cutoff_hz: float,
    nd: int,
    trim: int,
    theta: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Normalised, filtered, decimated (Φ (r_j, m, n), y (r_j, m), Z) of one model.

    With `theta` (physical units), Z (r_j, m, n) are the instruments of the output-error
    refinement (`estimator.refine`): Φ with the pressure rates the model predicts with θ in
    place of the measured ones, through the same filters, decimation and row selection; None
    without `theta` or for a model with no pressure rate in its regressor."""
    sos = butter(4, cutoff_hz, fs=fs, output="sos")
    x = _conditioned(raw, sos, fs, nj)
    Phi, y = evaluate(model, x)
    if model.split_static:
        Phi0, y0 = evaluate(model, static_sample(x))
        Phis, ys = evaluate(model, sample_from(raw, nj))
        Phi = Phi - Phi0 + _nonzero_columns(lambda a: sosfiltfilt(sos, a, axis=0), Phis)
        y = y - y0 + sosfiltfilt(sos, ys, axis=0)
    Z = None
    if theta is not None:
        channels = rate_channels(model, x)
        if channels:
            Z = _instruments_of(model, raw, fs, nj, cutoff_hz, theta, channels)
    keep = _valid_rows(model, raw, nj, int(3 * fs / cutoff_hz) + 4 * nd)
    k = max(1, trim // max(nd, 1))
    keep = keep[::nd][k:-k]

    def condition(a: np.ndarray, scale: np.ndarray) -> np.ndarray:
        a = a * scale
        if nd > 1:
            a = _nonzero_columns(lambda b: decimate(b, nd, axis=0, zero_phase=True), a)
        return a[k:-k][keep]

    pscale = model.param_scale[None, None, :] / model.output_scale[None, :, None]
    return (
        condition(Phi, pscale),
        condition(y, 1.0 / model.output_scale[None, :]),
        None if Z is None else condition(Z, pscale),
    )


def _nonzero_columns(linear: Callable[[np.ndarray], np.ndarray], a: np.ndarray) -> np.ndarray:
    """`linear` (a filter along axis 0) applied to the columns of `a` that are not zero
    throughout; the others stay zero (a model with one row per joint or chamber holds each
    joint's columns in its own rows only: half of the 2-DOF fluid observation is zero)."""
    nz = np.any(a != 0.0, axis=0)
    if nz.all():
        return linear(a)
    got = linear(a[:, nz])
    out = np.zeros((got.shape[0], *a.shape[1:]), dtype=got.dtype)
    out[:, nz] = got
    return out


#: The instruments' signals go through a low-pass at this fraction of the model's corner.
#: Why: the predicted pressure rate is built from measured u, ṡ and p; at the model's own
#: corner their high-frequency noise is in Z and in the equation error at the same instant
#: (the LVDT noise in h·u above all), which biases IV. Measured on the standard run, fluid
#: model (40 Hz), 1/b error: noise ×10, 0.49 % at 40 Hz, 0.26 % at 20 Hz, 0.13 % at 10 Hz,
#: 1.1 % at 5 Hz (the prediction too smooth to follow the 16 Hz resonance: weak instruments
#: that pick up the equation's deterministic error); nominal noise +0.04 % at 10 Hz.
INSTRUMENT_CORNER = 0.25


def _instruments_of(
    model: LinearModel,
    raw: np.ndarray,
    fs: float,
    nj: int,
    cutoff_hz: float,
    theta: np.ndarray,
    channels: list[tuple[str, int]],
) -> np.ndarray:
    """Z (N, m, n) before normalisation: the regressor evaluated on the signals low-passed at
    INSTRUMENT_CORNER × the model's corner (static part filtered the same way), with the
    pressure rates the model predicts with θ from them in place of the measured ones.

    Every column, not only the rate ones: the h·u columns of Φ carry the LVDT's noise, which
    biases the flow gains by ≈ −0.05 % (errors in variables again); from the lower corner
    their instruments do not (noise ×10: flow gains' common bias −0.06 % → −0.04 %)."""
    sos = butter(4, INSTRUMENT_CORNER * cutoff_hz, fs=fs, output="sos")
    xi = _conditioned(raw, sos, fs, nj)
    Phi_i, y_i = evaluate(model, xi)
    rest_i = np.zeros_like(Phi_i)
    yrest_i = np.zeros_like(y_i)
    if model.split_static:
        Phi0, y0 = evaluate(model, static_sample(xi))
        Phis, ys = evaluate(model, sample_from(raw, nj))
        rest_i = sosfiltfilt(sos, Phis, axis=0) - Phi0
        yrest_i = sosfiltfilt(sos, ys, axis=0) - y0
    xp = predicted_rates(model, xi, rest_i, yrest_i, theta, channels)
    return rest_i + evaluate(model, xp)[0]


def _valid_rows(model: LinearModel, raw: np.ndarray, nj: int, halfwidth: int) -> np.ndarray:
    """Rows with no invalid raw sample within ±halfwidth (the filters' reach)."""
    if model.valid is None:
        return np.ones(raw.shape[0], dtype=bool)
    bad = ~np.asarray(model.valid(sample_from(raw, nj)), dtype=bool)
    near = np.convolve(bad.astype(float), np.ones(2 * halfwidth + 1), mode="same")
    return near < 0.5


def _ls(W: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    """Least squares that never raises on rank deficiency: minimum-norm solution, σ² with the
    rank's degrees of freedom, covariance from the pseudo-inverse (∞ along a null direction
    is not representable, so callers flag those parameters instead: `fit_model`)."""
    theta, _, rank, _ = np.linalg.lstsq(W, Y, rcond=None)
    res = Y - W @ theta
    dof = max(W.shape[0] - int(rank), 1)
    s2 = float(res @ res / dof)
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
    if r * m <= n:
        raise ValueError(f"model '{model.name}': {r * m} equations for {n} parameters")
    # Rows grouped by output equation (eq. 14): block j holds equation j of every sample.
    W = Phi.transpose(1, 0, 2).reshape(m * r, n)
    Y = y.T.reshape(m * r)
    G = None if groups is None else np.tile(np.asarray(groups), m)
    scale = np.asarray(model.param_scale, dtype=float)
    S = np.outer(scale, scale)
    Z = None if instruments is None else instruments.transpose(1, 0, 2).reshape(m * r, n)
    th_ls, s2, cov_ls = _ls(W, Y)
    # Weights from the equation errors: the LS residual understates them when the regressor
    # is noisy (LS fits part of the noise), the IV residual does not.
    th_0 = th_ls if Z is None else iv_solve(Z, W, Y)[0]
    res = (Y - W @ th_0).reshape(m, r)
    sig_j = np.sqrt(np.sum(res**2, axis=1) / max(r - n / m, 1.0))
    sig_j = np.where(sig_j > 0, sig_j, 1.0)
    w = np.repeat(1.0 / sig_j, r)
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
        disagreement_z=zscore,
        method="WLS" if Z is None else "IV",
        cov_plain=cov_plain,
    )


#: A joint whose filtered angle spans less than this (peak to peak) over the used data "barely
#: moved": its inertial, friction and flow-gain parameters are not excited (issue 13, item 2).
STILL_DEG = 1.0


def still_joints(raw: np.ndarray, nj: int, blocks_: Sequence[slice]) -> list[tuple[int, float]]:
    """(joint index, peak-to-peak angle in degrees) of every joint that barely moved."""
    out = []
    for j in range(nj):
        spans = [np.ptp(raw[b, j]) for b in blocks_ if b.stop > b.start]
        ptp = float(np.degrees(max(spans, default=0.0)))
        if ptp < STILL_DEG:
            out.append((j, ptp))
    return out


def joint_parameters(names: Sequence[str], joint: int, nj: int) -> list[str]:
    """The parameters that need joint `joint` (0-based) to move: those whose name ends in its
    number (M2, Fv2, Cf+-2; R12 needs both joints), all but gravity (W, excited statically),
    or every non-gravity one on a one-joint rig whose names carry no number."""
    digit = str(joint + 1)
    out = []
    for nm in names:
        if nm.startswith("W") or nm.startswith("1/b"):
            continue
        tail = nm.rstrip("0123456789")
        num = nm[len(tail) :]
        if (num and digit in num) or (not num and nj == 1):
            out.append(nm)
    return out


def identify_run(
    columns: Mapping[str, np.ndarray],
    params_known: PlantParams,
    *,
    profile: Profile,
    models: Sequence[LinearModel] | None = None,
    cutoff_hz: float | None = None,
    decimation: int | None = None,
    trim_s: float | None = None,
    rank_tol: float | None = None,
    fuse_angles: bool = True,
    fuse_spool: bool = True,
    block_s: float = 1.0,
    jackknife_groups: int = 16,
    running_only: bool | None = None,
    virtual_time: bool | None = None,
    segments: Sequence[slice] | None = None,
    refine: bool = True,
    linkwise: bool = False,
    repeat_period_s: float | None = None,
    sensor_uncertainty: Mapping[str, Any] | None = None,
) -> BatchResult:
    """IDIM-LS/WLS of every model on a recorded run (see the module docstring).

    `cutoff_hz` None = each model's own conditioning corner (as online); `decimation` None =
    the largest n_d whose decimation filter (0.8·f_s/(2 n_d), Gautier §II) keeps that corner.
    Rows outside RUNNING (`running_only`; None = only if the run has RUNNING rows), with a
    fault or interlock flag are left out, and the data is cut into blocks at every gap in `t`
    or `seq` (`estimator.datause`); each block is filtered on its own and trimmed by `trim_s`
    (None = 4/corner) at both ends, so no filter or derivative crosses a gap.
    `jackknife_groups`: equal stretches of the used data for the block jackknife (0 = none).
    `segments` (row slices): use only these rows; the rest count as outside the experiment.
    `refine`: the output-error (IV) refinement of every model whose regressor holds a pressure
    rate (`estimator.refine`); its estimate is the one returned (`ModelFit.method` "IV"), the
    WLS one kept beside it (`theta_wls`). `linkwise`: Lin's link-by-link estimate of every
    model with one equation per joint beside the stacked one (`ModelFit.linkwise`).
    `fuse_spool`: the spool u with the LVDT's noise replaced above 2 Hz by the valve command's
    lag (`estimator.spool`), where the recording has every joint's command.
    `repeat_period_s`: the experiment's repeated period (s); where the recorded reference
    repeats with it, every model is also fitted by ML on the averaged repeats
    (`estimator.repeats`, `BatchResult.periodic`), beside the printed estimate.
    `sensor_uncertainty` (channel → `estimator.sensor_sigma.ChannelUncertainty`): carry each
    channel's offset and gain σ into every parameter's σ by sensitivities; `sigma_pct` is then
    the total and `sigma_pct_noise` the σ from the noise alone.
    """
    fs = profile.rig.loop_rate_hz
    nj = len(profile.joints)
    if decimation is not None and decimation < 1:
        raise ValueError(f"decimation must be ≥ 1, got {decimation}")
    if cutoff_hz is not None and not 0.0 < cutoff_hz < fs / 2:
        raise ValueError(f"cutoff_hz must be in (0, {fs / 2}), got {cutoff_hz}")
    raw = signals_from_columns(columns, profile, params_known, fuse_angles=fuse_angles)
    if models is None:
        models = reference_models(params_known)
    if running_only is None:
        st = columns.get("state")
        running_only = st is not None and bool(np.any(np.asarray(st) == STATE_RUNNING))
    cls = classify(columns, 1.0 / fs, running_only=running_only)
    if segments is not None:
        inside = np.zeros(raw.shape[0], dtype=bool)
        for seg in segments:
            inside[seg] = True
        cls.not_running += int(np.count_nonzero(cls.good & ~inside))
        cls.breaks |= np.r_[False, ~inside[:-1]] & inside
        cls.good &= inside
    finite = np.all(np.isfinite(raw), axis=1)
    use = DataUse(
        rows=raw.shape[0],
        not_running=cls.not_running,
        faulted=cls.faulted,
        non_finite=int(np.count_nonzero(cls.good & ~finite)),
        gaps=cls.gaps,
        gap_s=cls.gap_s,
        virtual_time=virtual_time,
    )
    good = cls.good & finite
    all_blocks = blocks(good, cls.breaks | (np.r_[False, ~finite[:-1]] & good))
    # The spool with the LVDT's noise replaced above 2 Hz by the command's (estimator.spool).
    spool_fused = fuse_spool and fuse_blocks(raw, columns, profile, params_known, all_blocks)
    still = still_joints(raw, nj, all_blocks)
    if len(still) == nj:
        moved = ", ".join(f"joint {j + 1} {p:.2f}°" for j, p in still)
        raise ValueError(
            f"no joint moved more than {STILL_DEG:.0f}° in the usable data ({moved}): there is "
            "nothing to identify; run an experiment that moves the arm"
        )
    fits = []
    used: list[tuple[float, int]] = []
    warnings: list[str] = []
    notes: list[str] = []
    if fuse_spool and not spool_fused and any(m.name == "fluid" for m in models):
        notes.append(
            "no valve command recorded for every joint: the flow gains use the LVDT's spool "
            "alone, and its noise biases them low (estimator.spool)"
        )
    rows_used = np.zeros(raw.shape[0], dtype=bool)
    for mdl in models:
        fc = mdl.cutoff_hz if cutoff_hz is None else cutoff_hz
        if not 0.0 < fc < fs / 2:
            raise ValueError(f"model '{mdl.name}': cutoff {fc} Hz outside (0, {fs / 2})")
        nd = decimation if decimation is not None else max(1, int(0.4 * fs / fc))
        trim = int((4.0 / fc if trim_s is None else trim_s) * fs)
        blks = [b for b in all_blocks if b.stop - b.start > 2 * trim + 30 * nd]
        not_excited = [nm for j, _ in still for nm in joint_parameters(mdl.names, j, nj)]
        shape_value = None
        if mdl.shape is not None and blks:
            mdl, shape_value, note = _choose_shape(
                mdl, raw, blks, fs=fs, nj=nj, cutoff_hz=fc, nd=nd, trim=trim, rank_tol=rank_tol,
                still=not_excited,
            )  # fmt: skip
            notes.append(note)
        if mdl.switches is not None and blks:
            mdl, note = _choose_switches(
                mdl, raw, blks, fs=fs, nj=nj, cutoff_hz=fc, nd=nd, trim=trim, rank_tol=rank_tol,
                still=not_excited,
            )  # fmt: skip
            notes.append(note)
        got = fit_blocks(
            mdl,
            raw,
            blks,
            fs=fs,
            nj=nj,
            cutoff_hz=fc,
            nd=nd,
            trim=trim,
            rank_tol=rank_tol,
            block_s=block_s,
            jackknife_groups=jackknife_groups,
            still=not_excited,
            refine=refine,
            rows_used=rows_used,
            linkwise=linkwise,
        )
        if got is None:
            fits.append(_prior_fit(mdl, use.summary(1.0 / fs)))
            used.append((fc, nd))
            continue
        fit, notes_m = got
        fit.shape_value = shape_value
        notes += notes_m
        if sensor_uncertainty:
            from estimator.sensor_sigma import combine, propagate, used_channels

            def refit(
                cols: Mapping[str, np.ndarray], mdl: LinearModel = mdl, fc: float = fc,
                nd: int = nd, trim: int = trim, blks: list[slice] = blks,
                not_excited: list[str] = not_excited,
            ) -> np.ndarray | None:  # fmt: skip
                raw_p = signals_from_columns(cols, profile, params_known, fuse_angles=fuse_angles)
                if spool_fused:
                    fuse_blocks(raw_p, cols, profile, params_known, all_blocks)
                g = fit_blocks(
                    mdl, raw_p, blks, fs=fs, nj=nj, cutoff_hz=fc, nd=nd, trim=trim,
                    rank_tol=rank_tol, block_s=block_s, jackknife_groups=0, still=not_excited,
                    refine=False,
                )  # fmt: skip
                return None if g is None else g[0].theta

            prop = propagate(
                refit, columns, sensor_uncertainty, used_channels(profile, params_known)
            )
            if prop is not None:
                prior = np.asarray(mdl.prior, dtype=float) if mdl.prior is not None else None
                fit.warnings += combine(fit, prop, prior)
        fit.warnings += _fit_warnings(fit, still, nj)
        fits.append(fit)
        used.append((fc, nd))
    periodic = _periodic(
        columns, profile, raw, good, models, fs, nj, repeat_period_s, cutoff_hz, decimation
    )
    if repeat_period_s is not None and not periodic:
        notes.append(
            f"no repeated {repeat_period_s:g} s period found in the recorded reference: "
            "no periodic (ML) fit"
        )
    oil_note, oil_warning = _oil_temperature(profile, params_known, raw, rows_used, nj, models)
    notes += oil_note
    warnings += oil_warning
    use.used = int(np.count_nonzero(rows_used))
    use.short_block = int(np.count_nonzero(good & ~rows_used))
    warnings += use.warnings(1.0 / fs)
    for f in fits:
        warnings += f.warnings
    return BatchResult(
        fits=fits,
        fs=fs,
        conditioning=used,
        data=use,
        warnings=warnings,
        notes=notes,
        periodic=periodic,
    )


def _oil_temperature(
    profile: Profile,
    params: PlantParams,
    raw: np.ndarray,
    used: np.ndarray,
    nj: int,
    models: Sequence[LinearModel],
) -> tuple[list[str], list[str]]:
    """What the declared oil law (`[plant.oil]`) did to the models' referred parameters
    (LinearModel.referred): a note with the temperatures they were referred from, or a warning
    that nothing measured the oil."""
    referred = [nm for m in models for nm in m.referred]
    oil = params.oil
    if oil is None or not referred:
        return [], []
    if profile.oil_temperature is None:
        return [], [
            "[plant.oil] declares the oil's laws but the profile has no 'temperature' channel: "
            f"{', '.join(referred)} are the ones at the run's (unmeasured) oil temperature, "
            f"not referred to {oil.reference_c:g} °C"
        ]
    t = raw[used, TEMP_SLOT * nj]
    t = t[np.isfinite(t)]
    if t.size == 0:
        return [], []
    return [
        f"oil at {np.min(t):.1f}–{np.max(t):.1f} °C (mean {np.mean(t):.1f}, "
        f"'{profile.oil_temperature.name}') in the data used: {', '.join(referred)} "
        f"referred to {oil.reference_c:g} °C by the declared oil law "
        f"([plant.oil]: ν(40 °C) {float(oil.viscosity_cst(40.0)):.3g} cSt, "
        f"ν(100 °C) {float(oil.viscosity_cst(100.0)):.3g} cSt, b −{100 * oil.bulk_per_k:.2g} %/K)"
        + (
            "; the valve null offsets are the ones at the run's temperature (null shift with "
            "temperature not modelled)"
            if any(nm.startswith("Q0") for m in models for nm in m.names)
            else ""
        )
    ], []


#: The switch search's first (coarse) sweep scores on every COARSE_EVERY-th stretch of
#: COARSE_PIECE_S seconds of the used data: a third of the cost, the same kinds of motion.
COARSE_PIECE_S = 5.0
COARSE_EVERY = 3


def _choose_switches(
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

    def scored(on: Sequence[slice]) -> Callable[[np.ndarray], np.ndarray]:
        def cost(value: np.ndarray) -> np.ndarray:
            got = fit_blocks(sw.make(value), raw, on, jackknife_groups=0, refine=False, **kw)
            if got is None:
                return np.full(np.shape(value)[1], np.nan)
            var = np.asarray(got[0].equation_sigma, dtype=float) ** 2
            return var.reshape(-1, sw.per_joint).sum(axis=1)

        return cost

    choice = choose_switches(sw, scored(blks), scored(coarse) if coarse else None)
    made = replace(sw.make(choice.value), truth=mdl.truth, prior=mdl.prior, shape=mdl.shape)
    return made, choice.note(mdl.name, sw)


def _choose_shape(
    mdl: LinearModel, raw: np.ndarray, blks: Sequence[slice], **kw: Any
) -> tuple[LinearModel, float, str]:
    """The model with the shape constant the data support best (estimator.shape_search): each
    candidate is a plain WLS fit of the same rows (no refinement, no jackknife)."""
    shape = mdl.shape
    assert shape is not None

    def cost(value: float) -> float:
        got = fit_blocks(shape.make(value), raw, blks, jackknife_groups=0, refine=False, **kw)
        return float("nan") if got is None else got[0].residual_var

    choice = choose_shape(shape, cost)
    made = replace(shape.make(choice.value), truth=mdl.truth, prior=mdl.prior)
    note = choice.note(mdl.name, shape)
    if choice.at_edge:
        note += "; at the end of the searched range, so the data may want a value beyond it"
    return made, choice.value, note


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
) -> tuple[ModelFit, list[str]] | None:
    """One model on the blocks `blks` of `raw` (steps 1–6 of the module doc), then, with
    `refine`, the output-error refinement (estimator.refine) and the choice between it and
    WLS (`refine.choose`). Returns the fit and notes, or None when no block gave a row.
    `rows_used` (bool, len(raw)) is marked with the rows that went in. `linkwise`: also Lin's
    link-by-link estimate (`ModelFit.linkwise`) for a model with one equation per joint."""

    def stack(theta: np.ndarray | None) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        out = []
        for b in blks:
            obs = observation(mdl, raw[b], fs, nj, cutoff_hz, nd, trim, theta)
            if obs[0].shape[0] > 0:
                if rows_used is not None:
                    rows_used[b.start + trim : b.stop - trim] = True
                out.append(obs)
        return out

    parts = stack(None)
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
        refined = refine_fit(fit, lambda th: _instruments(stack(th)), fit_with)
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


def _periodic(
    columns: Mapping[str, np.ndarray],
    profile: Profile,
    raw: np.ndarray,
    good: np.ndarray,
    models: Sequence[LinearModel],
    fs: float,
    nj: int,
    period_s: float | None,
    cutoff_hz: float | None,
    decimation: int | None,
) -> list[PeriodicResult]:
    """ML fits on the repeated periods of the recorded reference (estimator.repeats)."""
    names = [f"ref.{j.name}" for j in profile.joints]
    if period_s is None or not all(n in columns for n in names):
        return []
    ref = np.column_stack([np.asarray(columns[n], dtype=float) for n in names])
    rep = find_repeats(ref, good, round(period_s * fs))
    if rep is None:
        return []
    out = []
    for mdl in models:
        fc = mdl.cutoff_hz if cutoff_hz is None else cutoff_hz
        nd = decimation if decimation is not None else max(1, int(0.4 * fs / fc))
        k = rep.period // nd
        reach = int(3 * fs / fc) + 4 * nd

        def observe(
            m: LinearModel, block: np.ndarray, trim: int, fc: float = fc, nd: int = nd
        ) -> tuple[np.ndarray, np.ndarray]:
            Phi, y, _ = observation(m, block, fs, nj, fc, nd, trim)
            return Phi, y

        def valid(
            m: LinearModel, block: np.ndarray, k: int = k, nd: int = nd, reach: int = reach
        ) -> np.ndarray:
            return _valid_rows(m, block, nj, reach)[::nd][k:-k]

        res = periodic_fit(mdl, raw, rep, observe, nd, valid)
        if res is not None:
            out.append(res)
    return out


def _instruments(
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]],
) -> np.ndarray | None:
    """The stacked instruments of `stack`'s blocks; None when the model has none."""
    zs = [p[2] for p in parts if p[2] is not None]
    return np.concatenate(zs) if len(zs) == len(parts) else None


def _prior_fit(model: LinearModel, why: str) -> ModelFit:
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


#: Residuals whose correlation factor κ exceeds this are "far from white": after decimation
#: the noise part is white (κ ≈ 1 measured on the nominal simulator), so what remains is a
#: model that does not explain the data — a gain error, a wrong sensor, unmodelled dynamics.
KAPPA_MISMATCH = 10.0


def output_labels(fit: ModelFit, nj: int) -> list[str]:
    """Names of a model's output equations (reference models; 'equation k' otherwise)."""
    m = len(fit.output_correlation)
    if fit.name == "mechanical" and m == nj:
        return [f"torque {j + 1}" for j in range(nj)]
    if fit.name == "fluid" and m == 2 * nj:
        return [f"{side} flow {j + 1}" for j in range(nj) for side in ("cap", "rod")]
    return [f"equation {k + 1}" for k in range(m)]


def _fit_warnings(fit: ModelFit, still: Sequence[tuple[int, float]], nj: int) -> list[str]:
    out = []
    labels = output_labels(fit, nj)
    bad = [
        f"{lab} (κ = {k:.0f})"
        for lab, k in zip(labels, fit.output_correlation, strict=True)
        if k > KAPPA_MISMATCH
    ]
    if bad:
        measured = [nm for nm, ok in zip(fit.names, fit.identifiable, strict=True) if ok]
        out.append(
            f"the {fit.name} model does not explain the data: residuals far from white on "
            f"{', '.join(bad)}; {', '.join(measured)} are conditional on the model (a sensor "
            "gain or offset error, or dynamics the model lacks, bias them beyond their σ)"
        )
    split = [
        f"{nm} ({z:.0f}σ)"
        for nm, z in zip(fit.names, fit.disagreement_z, strict=True)
        if z > DISAGREEMENT_Z
    ]
    if split:
        measured = [nm for nm, ok in zip(fit.names, fit.identifiable, strict=True) if ok]
        out.append(
            f"the {fit.name} model's output equations disagree on {', '.join(split)}: a "
            "sensor error (gain, offset) or a model error; its σ is widened by the "
            f"disagreement, and {', '.join(measured)} are conditional on the model"
        )
    flagged = [nm for nm, ok in zip(fit.names, fit.identifiable, strict=True) if not ok]
    if flagged:
        why = []
        if still:
            why.append(
                "; ".join(f"joint {j + 1} barely moved ({p:.2f}° peak to peak)" for j, p in still)
            )
        if fit.unidentifiable:
            why.append("weakly excited directions: " + "; ".join(fit.unidentifiable))
        out.append(
            f"{', '.join(flagged)} {'is' if len(flagged) == 1 else 'are'} not identifiable from "
            f"this run ({'; '.join(why) or 'not excited'}): fixed at the profile's value, "
            "not measured"
        )
    return out
