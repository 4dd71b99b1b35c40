"""Offline identification of a recorded run: IDIM-LS and WLS (Gautier et al. §II).

    result = identify_run(columns, params_known, profile=profile)

`columns` maps sample-layout column names (`"t"`, `"eng.q_1"`, …) to arrays — e.g. from
`daq.recording.read_run(path)` via `{n: run.column(n) for n in run.meta["columns"]}` — and
`profile` says which channel is which (role, joint). `params_known` supplies the geometry.

The steps, and where each lives:
  0–3. the observation of each model: the angle and spool signals the regressors use, zero-phase
     conditioning, exact parallel filtering, rows where the model holds, parallel decimation
     (`estimator.observation`);
  4–6. OLS, WLS, identifiability against the noise and honest error bars (`estimator.wls`);
  per model, the output-error (IV) refinement and the structure the data choose
     (`estimator.model_fit`); what the fit says in words (`estimator.fit_warnings`).
Rows outside RUNNING or with a fault/interlock flag are left out and the run is cut into
blocks at every jump in `t` or `seq`; each block is filtered on its own (`estimator.datause`).
This module runs the steps over a run's models and collects the result (`BatchResult`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller.plant.params import PlantParams
from daq.profile.schema import Profile
from estimator.blas import blas_limited
from estimator.datause import STATE_RUNNING, DataUse, blocks, classify
from estimator.fit_warnings import STILL_DEG, fit_warnings, still_joints
from estimator.model_fit import fit_blocks, prior_fit, with_chosen_shape, with_chosen_switches
from estimator.models import LinearModel, reference_models
from estimator.observation import observation, signals_from_columns, valid_rows
from estimator.oil_span import oil_span_warning, used_temperatures
from estimator.repeats import PeriodicResult, find_repeats, periodic_fit
from estimator.spool import INSTRUMENT_CROSSOVER_HZ, fuse_blocks
from estimator.wls import ModelFit


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
        self.refresh()

    def refresh(self) -> None:
        """The concatenated per-parameter arrays, again from `fits` (after a fit's values
        were changed in place, e.g. by estimator.closed_loop_choice)."""
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


@blas_limited()  # one BLAS thread unless $HYDRIG_BLAS_THREADS says otherwise (estimator.blas)
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
    fluid_only: Sequence[slice] = (),
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
    `fluid_only` (row slices): rows only the fluid models (`LinearModel.fluid`) use — the
    segments an experiment marks `identify = "fluid"` (estimator.segment_rows); every other
    model's blocks stop at them.
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
    breaks = cls.breaks | (np.r_[False, ~finite[:-1]] & good)
    all_blocks = blocks(good, breaks)
    not_fluid_blocks = all_blocks
    if fluid_only:
        shared = np.ones(raw.shape[0], dtype=bool)
        for sl in fluid_only:
            shared[sl] = False
        not_fluid_blocks = blocks(good & shared, breaks)
    # The spool with the LVDT's noise replaced above 2 Hz by the command's (estimator.spool);
    # the refinement's instruments from the command's almost alone (INSTRUMENT_CROSSOVER_HZ).
    instrument_raw = raw.copy() if fuse_spool and refine else None
    spool_fused = fuse_spool and fuse_blocks(raw, columns, profile, params_known, all_blocks)
    if spool_fused and instrument_raw is not None:
        fuse_blocks(
            instrument_raw, columns, profile, params_known, all_blocks, INSTRUMENT_CROSSOVER_HZ
        )
    else:
        instrument_raw = None
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
    if fluid_only:
        marked = sum(len(range(*sl.indices(raw.shape[0]))) for sl in fluid_only)
        fluid = [m.name for m in models if m.fluid]
        notes.append(
            f'{marked / fs:.1f} s of segments the experiment marks identify = "fluid" used by '
            f"{', '.join(fluid) or 'no model'} only"
        )
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
        # A block must outlast the filter's start-up at both ends and give 30 decimated rows.
        need = 2 * trim + 30 * nd
        candidates = all_blocks if mdl.fluid else not_fluid_blocks
        blks = [b for b in candidates if b.stop - b.start > need]
        not_excited = [nm for j, _ in still for nm in joint_parameters(mdl.names, j, nj)]
        shape_value = None
        if mdl.shape is not None and blks:
            mdl, shape_value, note = with_chosen_shape(
                mdl, raw, blks, fs=fs, nj=nj, cutoff_hz=fc, nd=nd, trim=trim, rank_tol=rank_tol,
                still=not_excited,
            )  # fmt: skip
            notes.append(note)
        if mdl.switches is not None and blks:
            mdl, note = with_chosen_switches(
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
            instrument_raw=instrument_raw,
        )
        if got is None:
            why = use.summary(1.0 / fs)
            if not blks:
                why += f"; {_too_short(candidates, need, fs)}"
            fits.append(prior_fit(mdl, why))
            used.append((fc, nd))
            continue
        fit, notes_m = got
        fit.shape_value = shape_value
        if mdl.switches is not None:
            fit.switch_value = np.array(mdl.switches.value, dtype=float)
        notes += notes_m
        if mdl.speed_params:
            spread = ", ".join(f"×{x:.0f}" for x in fit.row_sigma_spread)
            notes.append(
                f"{mdl.name}: each equation's rows weighted by the residual σ of their speed "
                f"octile (largest over smallest, per equation: {spread}; estimator.wls.row_sigma)"
            )
        if sensor_uncertainty:
            from estimator.sensor_sigma import (
                combine,
                null_position_shares,
                propagate,
                used_channels,
            )

            # Each refit moves one channel: the signals and regressor columns it does not
            # touch are filtered once, for the first (estimator.observation, `cache`).
            refit_cache: dict[Any, Any] = {}

            def refit(
                cols: Mapping[str, np.ndarray], mdl: LinearModel = mdl, fc: float = fc,
                nd: int = nd, trim: int = trim, blks: list[slice] = blks,
                not_excited: list[str] = not_excited,
                refit_cache: dict[Any, Any] = refit_cache,
            ) -> np.ndarray | None:  # fmt: skip
                raw_p = signals_from_columns(cols, profile, params_known, fuse_angles=fuse_angles)
                if spool_fused:
                    fuse_blocks(raw_p, cols, profile, params_known, all_blocks)
                g = fit_blocks(
                    mdl, raw_p, blks, fs=fs, nj=nj, cutoff_hz=fc, nd=nd, trim=trim,
                    rank_tol=rank_tol, block_s=block_s, jackknife_groups=0, still=not_excited,
                    refine=False, cache=refit_cache,
                )  # fmt: skip
                return None if g is None else g[0].theta

            prop = propagate(
                refit, columns, sensor_uncertainty, used_channels(profile, params_known)
            )
            if prop is not None:
                null_position_shares(prop, list(fit.names), fit.theta, profile, sensor_uncertainty)
                prior = np.asarray(mdl.prior, dtype=float) if mdl.prior is not None else None
                fit.warnings += combine(fit, prop, prior)
        fit.warnings += fit_warnings(fit, still, nj)
        fit.warnings += list(mdl.caveats)
        for nm in mdl.shapes:  # a shape, not a measurement: never printed as one
            fit.identifiable[list(fit.names).index(nm)] = False
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
    if params_known.oil is not None and profile.oil_temperature is not None:
        warnings += oil_span_warning(raw, rows_used, nj, models, fits, profile.oil_temperature.name)
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


def _too_short(candidates: Sequence[slice], need: int, fs: float) -> str:
    """Why no block served a model: its longest stretch of usable rows against the rows it
    needs (the filter's start-up trimmed at both ends and 30 decimated rows)."""
    longest = max((b.stop - b.start for b in candidates), default=0)
    return (
        f"its longest stretch of usable rows is {longest / fs:.2f} s and it needs more than "
        f"{need / fs:.2f} s (the filter's start-up at both ends and 30 decimated rows)"
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
    t = used_temperatures(raw, used, nj)
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
            and not any(nm.startswith("Qt") for m in models for nm in m.names)
            else ""
        )
    ], []


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
            return valid_rows(m, block, nj, reach)[::nd][k:-k]

        res = periodic_fit(mdl, raw, rep, observe, nd, valid)
        if res is not None:
            out.append(res)
    return out
