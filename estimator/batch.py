"""Offline identification of a recorded run: IDIM-LS and WLS (Gautier et al. §II).

    result = identify_run(columns, params_known, profile=profile)

`columns` maps sample-layout column names (`"t"`, `"eng.q_1"`, …) to arrays — e.g. from
`daq.recording.read_run(path)` via `{n: run.column(n) for n in run.meta["columns"]}` — and
`profile` says which channel is which (role, joint). `params_known` supplies the geometry.

Steps per model (Gautier §II; the same models as online, `estimator.models`):
  0. the joint angle q the regressors differentiate is the potentiometer's, through the cylinder
     geometry (`estimator.angles`: the resolver's noise in q̈ biased M1, M2, R12 by up to 4 %);
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
  5. identifiability by SVD of the observation matrix in normalised units (UBC thesis §4.3.5):
     singular values, condition number, and the parameter combinations of the directions whose
     singular value is below `rank_tol`·σ_max (unidentifiable).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.signal import butter, decimate, sosfiltfilt

from controller.plant.dynamics import cylinder
from controller.plant.params import PlantParams
from daq.profile.schema import Profile
from estimator.angles import AngleFusion
from estimator.chain import N_SIGNALS, sample_from
from estimator.models import LinearModel, Sample, evaluate, reference_models, static_sample
from estimator.online import ROLE_SLOT
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


@dataclass
class BatchResult:
    fits: list[ModelFit]
    fs: float
    #: (cutoff Hz, decimation factor) used for each model, in `fits` order.
    conditioning: list[tuple[float, int]]
    names: list[str] = field(init=False)
    theta: np.ndarray = field(init=False)
    sigma_pct: np.ndarray = field(init=False)
    truth: np.ndarray | None = field(init=False)

    def __post_init__(self) -> None:
        self.names = [n for f in self.fits for n in f.names]
        self.theta = np.concatenate([f.theta for f in self.fits])
        self.sigma_pct = np.concatenate([f.sigma_pct for f in self.fits])
        truths = [f.truth for f in self.fits]
        self.truth = None if any(t is None for t in truths) else np.concatenate(truths)  # type: ignore[arg-type]


def signals_from_columns(
    columns: Mapping[str, np.ndarray],
    profile: Profile,
    params: PlantParams,
    *,
    fuse_angles: bool = True,
) -> np.ndarray:
    """(N, 5·nj) raw block `[q | s | p_cap | p_rod | u]` from `eng.<channel>` columns.

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
    model: LinearModel, raw: np.ndarray, fs: float, nj: int, cutoff_hz: float, nd: int, trim: int
) -> tuple[np.ndarray, np.ndarray]:
    """Normalised, filtered, decimated (Φ (r_j, m, n), y (r_j, m)) of one model."""
    sos = butter(4, cutoff_hz, fs=fs, output="sos")
    x = _conditioned(raw, sos, fs, nj)
    Phi, y = evaluate(model, x)
    if model.split_static:
        Phi0, y0 = evaluate(model, static_sample(x))
        Phis, ys = evaluate(model, sample_from(raw, nj))
        Phi = Phi - Phi0 + sosfiltfilt(sos, Phis, axis=0)
        y = y - y0 + sosfiltfilt(sos, ys, axis=0)
    keep = _valid_rows(model, raw, nj, int(3 * fs / cutoff_hz) + 4 * nd)
    Phi = Phi * model.param_scale[None, None, :] / model.output_scale[None, :, None]
    y = y / model.output_scale[None, :]
    if nd > 1:
        Phi = decimate(Phi, nd, axis=0, zero_phase=True)
        y = decimate(y, nd, axis=0, zero_phase=True)
    k = max(1, trim // max(nd, 1))
    keep = keep[::nd][k:-k]
    return Phi[k:-k][keep], y[k:-k][keep]


def _valid_rows(model: LinearModel, raw: np.ndarray, nj: int, halfwidth: int) -> np.ndarray:
    """Rows with no invalid raw sample within ±halfwidth (the filters' reach)."""
    if model.valid is None:
        return np.ones(raw.shape[0], dtype=bool)
    bad = ~np.asarray(model.valid(sample_from(raw, nj)), dtype=bool)
    near = np.convolve(bad.astype(float), np.ones(2 * halfwidth + 1), mode="same")
    return near < 0.5


def _ls(W: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    theta, *_ = np.linalg.lstsq(W, Y, rcond=None)
    res = Y - W @ theta
    dof = W.shape[0] - W.shape[1]
    s2 = float(res @ res / dof)
    cov = s2 * np.linalg.inv(W.T @ W)
    return theta, s2, cov


def correlation_factor(res: np.ndarray, block: int) -> float:
    """κ = B·mean(block mean²)/mean(e²) ≥ 1 of normalised residuals `res` (r, m): how much
    their correlation inflates the variance of θ̂ over the white-residual formula (eq. 18).

    Decimation whitens the noise, not the colored part of the residual (equation error from
    sensor noise in the regressors, unmodelled dynamics), whose long-run variance is what the
    estimate feels. Same batch-means estimate as online (`estimator.chain`); 1 with fewer than
    eight blocks per equation. Never below 1: anti-correlated residuals are not credited."""
    nb = res.shape[0] // block
    if block < 1 or nb < 8:
        return 1.0
    full = res[: nb * block]
    means = full.reshape(nb, block, -1).mean(axis=1)
    var = float(np.mean(full**2))
    if var <= 0.0:
        return 1.0
    return max(1.0, block * float(np.mean(means**2)) / var)


def fit_model(
    model: LinearModel,
    Phi: np.ndarray,
    y: np.ndarray,
    rank_tol: float = 1e-6,
    block: int = 0,
) -> ModelFit:
    """OLS and WLS of one model on (Φ (r, m, n), y (r, m)); `block` rows per batch mean for
    the correlation factor κ (0 = none, white residuals assumed)."""
    r, m, n = Phi.shape
    if r * m <= n:
        raise ValueError(f"model '{model.name}': {r * m} equations for {n} parameters")
    # Rows grouped by output equation (eq. 14): block j holds equation j of every sample.
    W = Phi.transpose(1, 0, 2).reshape(m * r, n)
    Y = y.T.reshape(m * r)
    scale = np.asarray(model.param_scale, dtype=float)
    S = np.outer(scale, scale)
    th_ls, s2, cov_ls = _ls(W, Y)
    res = (Y - W @ th_ls).reshape(m, r)
    sig_j = np.sqrt(np.sum(res**2, axis=1) / max(r - n / m, 1.0))
    sig_j = np.where(sig_j > 0, sig_j, 1.0)
    w = np.repeat(1.0 / sig_j, r)
    th_w, _, cov_w = _ls(W * w[:, None], Y * w)
    kappa = correlation_factor(((Y - W @ th_w) * w).reshape(m, r).T, block)
    cov_w = kappa * cov_w
    # Identifiability (thesis §4.3.5): SVD of W in the model's normalised units (parameters
    # scaled by their typical magnitude). Not unit-norm columns: that would make a column of
    # 1e-20 (a joint that never accelerates) look as informative as any other.
    _, sv, Vt = np.linalg.svd(W, full_matrices=False)
    weak = []
    for s_i, v in zip(sv, Vt, strict=True):
        if s_i < rank_tol * sv[0]:
            terms = [
                f"{c:+.3f}·{nm}" for c, nm in zip(v, model.names, strict=True) if abs(c) > 0.05
            ]
            weak.append(" ".join(terms) + f" (σ = {s_i:.2e})")
    theta = th_w * scale
    cov = cov_w * S
    return ModelFit(
        name=model.name,
        names=list(model.names),
        theta_ls=th_ls * scale,
        theta=theta,
        cov=cov,
        sigma_pct=sigma_pct(theta, cov),
        sigma_pct_ls=sigma_pct(th_ls * scale, cov_ls * S),
        residual_var=s2,
        equation_sigma=sig_j,
        singular_values=sv,
        condition=float(sv[0] / sv[-1]) if sv[-1] > 0 else float("inf"),
        unidentifiable=weak,
        rows=m * r,
        truth=None if model.truth is None else np.asarray(model.truth),
        correlation=kappa,
    )


def identify_run(
    columns: Mapping[str, np.ndarray],
    params_known: PlantParams,
    *,
    profile: Profile,
    models: Sequence[LinearModel] | None = None,
    cutoff_hz: float | None = None,
    decimation: int | None = None,
    trim_s: float = 0.5,
    rank_tol: float = 1e-6,
    fuse_angles: bool = True,
    block_s: float = 1.0,
) -> BatchResult:
    """IDIM-LS/WLS of every model on a recorded run (see the module docstring).

    `cutoff_hz` None = each model's own conditioning corner (as online); `decimation` None =
    the largest n_d whose decimation filter (0.8·f_s/(2 n_d), Gautier §II) keeps that corner.
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
    trim = int(trim_s * fs)
    fits = []
    used: list[tuple[float, int]] = []
    for mdl in models:
        fc = mdl.cutoff_hz if cutoff_hz is None else cutoff_hz
        if not 0.0 < fc < fs / 2:
            raise ValueError(f"model '{mdl.name}': cutoff {fc} Hz outside (0, {fs / 2})")
        nd = decimation if decimation is not None else max(1, int(0.4 * fs / fc))
        if raw.shape[0] <= 4 * trim + 30 * nd:
            raise ValueError(f"run too short: {raw.shape[0]} samples")
        Phi, y = observation(mdl, raw, fs, nj, fc, nd, trim)
        fits.append(fit_model(mdl, Phi, y, rank_tol, block=max(1, round(block_s * fs / nd))))
        used.append((fc, nd))
    return BatchResult(fits=fits, fs=fs, conditioning=used)
