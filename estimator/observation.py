"""The batch's observation of one model on a recorded run (Gautier et al. §II; steps 0–3 of
`estimator.batch`): the run's columns as signal arrays, their zero-phase conditioning, the
filtered and decimated regressor Φ and output y, and the instruments of the output-error
refinement.

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
     1 in n_d, which whitens the noise part of the residual (not the colored rest: see
     `estimator.wls`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from scipy.signal import butter, decimate, sosfiltfilt

from controller.plant.dynamics import cylinder
from controller.plant.params import PlantParams
from daq.profile.schema import Profile
from estimator.angles import AngleFusion
from estimator.chain import N_SIGNALS, TEMP_SLOT, sample_from, unmeasured_oil_c
from estimator.models import LinearModel, Sample, evaluate, static_sample
from estimator.online import ROLE_SLOT
from estimator.refine import predicted_rates, rate_channels


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


@functools.lru_cache(maxsize=64)
def lowpass(cutoff_hz: float, fs: float) -> np.ndarray:
    """The conditioning low-pass (4th-order Butterworth, second-order sections), designed once
    per corner: a structure search observes the same blocks a few hundred times (callers
    must not write to it)."""
    sos = butter(4, cutoff_hz, fs=fs, output="sos")
    return sos


def derivative(x: np.ndarray, dt: float) -> np.ndarray:
    """dx/dt along axis 0 by the five-point central difference (np.gradient at the two ends).

    Why not the three-point one: its gain sin(ωΔt)/(ωΔt) is 0.17 % low at the 16 Hz hydraulic
    resonance at 1 kHz, twice that for q̈ — a bias in the inertial columns that filtering
    keeps (it is in band); the five-point stencil's error is (ωΔt)⁴/30 ≈ 3e-6."""
    d = np.gradient(x, dt, axis=0)
    if x.shape[0] >= 5:
        d[2:-2] = (x[:-4] - 8.0 * x[1:-3] + 8.0 * x[3:-1] - x[4:]) / (12.0 * dt)
    return d


def conditioned(
    raw: np.ndarray, sos: np.ndarray, fs: float, nj: int, memo: ColumnMemo | None = None
) -> Sample:
    """The raw block low-passed by `sos` (zero phase) with its first two derivatives.
    `memo`: the signals of an earlier call on the same rows, column by column; a raw column
    equal to the one that went in then is not filtered again (the sensor-uncertainty refits
    move one channel at a time). Filter and derivatives treat each column on their own, so
    the numbers are the same."""
    if memo is None:
        xf = sosfiltfilt(sos, raw, axis=0)
        d1 = derivative(xf, 1.0 / fs)
        d2 = derivative(d1, 1.0 / fs)
        return sample_from(raw, nj, np.stack([xf, d1, d2], axis=1))
    if "input" in memo and memo["input"].shape == raw.shape:
        same = np.all(raw == memo["input"], axis=0)
    else:
        same = np.zeros(raw.shape[1], dtype=bool)
    out = np.empty((raw.shape[0], 3, raw.shape[1]))
    if not same.all():
        xf = sosfiltfilt(sos, raw[:, ~same], axis=0)
        d1 = derivative(xf, 1.0 / fs)
        d2 = derivative(d1, 1.0 / fs)
        out[:, :, ~same] = np.stack([xf, d1, d2], axis=1)
    if same.any():
        out[:, :, same] = memo["output"][:, :, same]
    memo.update(input=raw.copy(), output=out)
    return sample_from(raw, nj, out)


#: One block's instruments for a given θ (physical units): Z (r_j, m, n), conditioned as Φ.
Instruments = Callable[[np.ndarray], np.ndarray]


def observation(
    model: LinearModel,
    raw: np.ndarray,
    fs: float,
    nj: int,
    cutoff_hz: float,
    nd: int,
    trim: int,
    instruments: bool = False,
    cache: dict[Any, Any] | None = None,
    instrument_raw: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, Instruments | None]:
    """Normalised, filtered, decimated (Φ (r_j, m, n), y (r_j, m)) of one model, and with
    `instruments` the θ → Z map of the output-error refinement (`estimator.refine`): Φ with the
    pressure rates the model predicts with θ in place of the measured ones, through the same
    filters, decimation and row selection; None for a model with no pressure rate in its
    regressor. Everything in Z but the predicted rates is built here once: the refinement's
    iterations then redo only the prediction (`_instruments_of`).

    `cache`: a dict private to these rows of the run (`block_cache`), shared by the fits of a
    structure search (each candidate changes the regressor, never the filtered signals and
    `instrument_raw`: the rows the instruments are built from (same shape as `raw`; None =
    `raw`): the spool without the LVDT's noise (`estimator.spool.INSTRUMENT_CROSSOVER_HZ`).

    their derivatives) and by the sensor-uncertainty refits (each moves one channel, and only
    its conditioned signal is filtered again, `conditioned`). The raw block is compared, not
    trusted, so the numbers are those of a call without it.

    Φ is (N, m, n) with most columns zero in most rows (each joint's parameters in its own
    rows): the static part's filtering and the decimation run on the columns that are not
    zero throughout and are written into the others' zeros, not added to or scaled over the
    whole array (these arrays are the batch's largest; filters treat each column on its
    own, so the numbers are the same)."""
    sos = lowpass(cutoff_hz, fs)
    x, xs, xr = _conditioned_cached(raw, sos, fs, nj, cache, (raw.shape, cutoff_hz, fs))
    Phi, y = evaluate(model, x)
    if model.split_static:
        Phi0, y0 = evaluate(model, xs)
        Phis, ys = evaluate(model, xr)
        Phi = _plus_filtered(Phi - Phi0, Phis, lambda a: sosfiltfilt(sos, a, axis=0))
        y = y - y0 + sosfiltfilt(sos, ys, axis=0)
    keep = valid_rows(model, raw, nj, int(3 * fs / cutoff_hz) + 4 * nd)
    k = max(1, trim // max(nd, 1))
    keep = keep[::nd][k:-k]

    def condition(a: np.ndarray, scale: np.ndarray) -> np.ndarray:
        if nd > 1:
            a = _scaled_nonzero(lambda b: decimate(b, nd, axis=0, zero_phase=True), a, scale)
        else:
            a = a * scale
        return a[k:-k][keep]

    pscale = model.param_scale[None, None, :] / model.output_scale[None, :, None]
    Z = None
    if instruments:
        channels = rate_channels(model, x)
        if channels:
            source = raw if instrument_raw is None else instrument_raw
            predict = _instruments_of(model, source, fs, nj, cutoff_hz, channels)

            def Z(theta: np.ndarray) -> np.ndarray:
                return condition(predict(theta), pscale)

    return condition(Phi, pscale), condition(y, 1.0 / model.output_scale[None, :]), Z


#: What `conditioned` filtered last time on the same rows: the raw block as it went in and
#: its filtered signals and derivatives.
ColumnMemo = dict[str, np.ndarray]


def block_cache(cache: dict[Any, Any] | None, block: slice) -> dict[Any, Any] | None:
    """The part of a run-wide `cache` that belongs to the rows `block` (`observation`)."""
    if cache is None:
        return None
    return cache.setdefault(("block", block.start, block.stop), {})


def _conditioned_cached(
    raw: np.ndarray, sos: np.ndarray, fs: float, nj: int, cache: dict[Any, Any] | None, key: Any
) -> tuple[Sample, Sample, Sample]:
    """(conditioned, its static twin, the raw samples) of `raw`, from `cache` when the same raw
    block was conditioned before (compared, not trusted), else computed, with the columns
    that did not change since taken from the cache's column memo (`conditioned`)."""
    if cache is None:
        x = conditioned(raw, sos, fs, nj)
        return x, static_sample(x), sample_from(raw, nj)
    slot = cache.setdefault((key, "conditioned"), {})
    if "raw" not in slot or not np.array_equal(slot["raw"], raw):
        x = conditioned(raw, sos, fs, nj, slot.setdefault("columns", {}))
        # The raw samples view the cache's own copy: the caller's block may change later.
        kept = raw.copy()
        slot.update(raw=kept, x=(x, static_sample(x), sample_from(kept, nj)))
    return slot["x"]


def nonzero_columns(linear: Callable[[np.ndarray], np.ndarray], a: np.ndarray) -> np.ndarray:
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


def _plus_filtered(
    base: np.ndarray, a: np.ndarray, linear: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """base + nonzero_columns(linear, a) (same shapes, `linear` keeping the length), adding
    only into the columns that are not zero throughout: in place into `base` where it is a
    C-contiguous float array (the caller's temporary), which is returned."""
    out = np.ascontiguousarray(base, dtype=np.result_type(base, a))
    flat, src = out.reshape(out.shape[0], -1), a.reshape(a.shape[0], -1)
    cols = np.flatnonzero(np.any(src != 0.0, axis=0))
    if cols.size:
        flat[:, cols] += linear(src[:, cols])
    return out


def _scaled_nonzero(
    linear: Callable[[np.ndarray], np.ndarray], a: np.ndarray, scale: np.ndarray
) -> np.ndarray:
    """nonzero_columns(linear, a * scale) for a finite, nonzero `scale` (broadcast over a's
    trailing axes), scaling only the columns that are not zero throughout."""
    flat = a.reshape(a.shape[0], -1)
    factor = np.broadcast_to(scale, (1, *a.shape[1:])).reshape(-1)
    cols = np.flatnonzero(np.any(flat != 0.0, axis=0))
    got = linear(flat[:, cols] * factor[cols])
    out = np.zeros((got.shape[0], flat.shape[1]), dtype=got.dtype)
    out[:, cols] = got
    return out.reshape(got.shape[0], *a.shape[1:])


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
    channels: list[tuple[str, int]],
) -> Callable[[np.ndarray], np.ndarray]:
    """θ → Z (N, m, n) before normalisation: the regressor evaluated on the signals low-passed
    at INSTRUMENT_CORNER × the model's corner (static part filtered the same way), with the
    pressure rates the model predicts with θ from them in place of the measured ones. The
    filtered signals and the static part do not depend on θ: built once, here.

    Every column, not only the rate ones: the h·u columns of Φ carry the LVDT's noise, which
    biases the flow gains by ≈ −0.05 % (errors in variables again); from the lower corner
    their instruments do not (noise ×10: flow gains' common bias −0.06 % → −0.04 %)."""
    sos = lowpass(INSTRUMENT_CORNER * cutoff_hz, fs)
    xi = conditioned(raw, sos, fs, nj)
    Phi_i, y_i = evaluate(model, xi)
    rest_i = np.zeros_like(Phi_i)
    yrest_i = np.zeros_like(y_i)
    if model.split_static:
        Phi0, y0 = evaluate(model, static_sample(xi))
        Phis, ys = evaluate(model, sample_from(raw, nj))
        rest_i = sosfiltfilt(sos, Phis, axis=0) - Phi0
        yrest_i = sosfiltfilt(sos, ys, axis=0) - y0

    def instruments(theta: np.ndarray) -> np.ndarray:
        xp = predicted_rates(model, xi, rest_i, yrest_i, theta, channels)
        return rest_i + evaluate(model, xp)[0]

    return instruments


def valid_rows(model: LinearModel, raw: np.ndarray, nj: int, halfwidth: int) -> np.ndarray:
    """Rows with no invalid raw sample within ±halfwidth (the filters' reach)."""
    if model.valid is None:
        return np.ones(raw.shape[0], dtype=bool)
    bad = ~np.asarray(model.valid(sample_from(raw, nj)), dtype=bool)
    near = np.convolve(bad.astype(float), np.ones(2 * halfwidth + 1), mode="same")
    return near < 0.5
