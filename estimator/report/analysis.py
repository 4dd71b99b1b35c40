"""The numbers behind the report: batch and online identification of a run, the online
estimate's convergence, model validation, and the tables built from them.

Nothing here draws or writes files; `figures` and `html` turn a `ReportData` into the report.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from controller.plant.params import PlantEffects, PlantParams
from daq.profile.plant import known_params
from estimator.batch import BatchResult, identify_run
from estimator.closed_loop_choice import WINDOW_S, choose_closed_loop
from estimator.datause import STATE_RUNNING
from estimator.models import LinearModel, load_models
from estimator.models_lin import SMOOTH_SIGN_M_S, lin_plant
from estimator.online import Estimate, OnlineIdentifier
from estimator.report.runs import ReportError, RunData, measured, recorded_experiment
from estimator.segment_rows import fluid_only_rows, fluid_only_spans
from estimator.shape_search import with_configured_shape, with_configured_switches
from estimator.structure import Structure
from estimator.validation import ValidationResult, validate
from estimator.validation_closed_loop import (
    VELOCITY_FIT_S,
    ClosedLoopResult,
    control_setup,
    initial_velocity,
    validate_closed_loop,
)

log = logging.getLogger(__name__)

#: Units of the reference models' parameters, by name stem (DESIGN §2.1, §2.2).
_UNITS = {
    "M": "kg·m²",
    "R12": "kg·m²",
    "Fv": "N·m·s/rad",
    "W": "kg·m",
    "1/b": "1/Pa",
    "Cf": "m²/(s·V·√Pa)",
}
#: Validation outputs in display order: label → (title, unit, display scale).
OUTPUT_INFO = {
    "s": ("piston displacement", "mm", 1e3),
    "p_cap": ("cap-side pressure", "MPa", 1e-6),
    "p_rod": ("rod-side pressure", "MPa", 1e-6),
    "q": ("joint angle", "deg", 180.0 / np.pi),
    "u": ("spool (LVDT)", "V", 1.0),
}


def unit_of(name: str) -> str:
    for stem in ("R12", "1/b", "Fv", "Cf", "M", "W"):
        if name.startswith(stem):
            return _UNITS[stem]
    return ""


@dataclass
class Convergence:
    """The online estimate sampled while the run is replayed through the RLS."""

    names: list[str]
    t: np.ndarray  # (K,) rig time, s
    theta: np.ndarray  # (K, n)
    sigma: np.ndarray  # (K, n) standard deviation (same units as θ)


@dataclass
class ReportData:
    ident: RunData
    valid: RunData
    cross_validation: bool
    batch: BatchResult
    online: Estimate
    convergence: Convergence
    truth: np.ndarray | None  # simulator only
    #: Validation per parameter set: "batch", "online", and "truth" on the simulator.
    validation: dict[str, ValidationResult]
    notes: list[str] = field(default_factory=list)
    #: Closed-loop validation (DIDIM) per parameter set, where the run recorded its experiment.
    closed_loop: dict[str, ClosedLoopResult] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return self.batch.names


def online_replay(
    rd: RunData,
    sample_dt: float,
    on_chunk: Callable[[int, int], None] | None = None,
    structure: Structure | None = None,
) -> tuple[Estimate, Convergence]:
    """Feed the analysed rows through an `OnlineIdentifier` in chunks of `sample_dt` of rig
    time, as telemetry would, sampling θ and σ after each chunk (the convergence curve);
    `structure`: the batch's (estimator.structure) instead of the profile's. The segments the
    experiment gives to the fluid equations alone reach only the fluid models, as in the batch."""
    rows = rd.rows
    state = rd.run.columns.index("state")
    # A run recorded straight from a backend has no RUNNING rows: then every row is the data.
    running = bool(np.any(rows[:, state] == STATE_RUNNING))
    ident = OnlineIdentifier(
        rd.profile, rd.run.meta["columns"], running_only=running, structure=structure,
        fluid_only=fluid_only_spans(rd.run.events),
    )  # fmt: skip
    step = max(1, round(sample_dt / rd.period))
    ts, thetas, sigmas = [], [], []
    for k in range(0, len(rows), step):
        ident.update_rows(rows[k : k + step])
        est = ident.estimate()
        ts.append(est.t - rows[0, rd.run.columns.index("t")])
        thetas.append(est.theta)
        sigmas.append(np.sqrt(np.clip(np.diag(est.cov), 0.0, None)))
        if on_chunk is not None:
            on_chunk(min(k + step, len(rows)), len(rows))
    est = ident.estimate()
    conv = Convergence(list(est.names), np.array(ts), np.array(thetas), np.array(sigmas))
    return est, conv


def batch_identify(
    rd: RunData,
    *,
    refine: bool = True,
    repeat_period_s: float | None = None,
    linkwise: bool = False,
    sensor_sigma: bool = True,
) -> BatchResult:
    """Batch identification of a run with its profile's models; `refine`: the output-error
    refinement (estimator.refine), on by default; `repeat_period_s`: the experiment's repeated
    period, for the ML fit on the averaged repeats beside it (estimator.repeats); `linkwise`:
    Lin's link-by-link estimate beside the stacked one (estimator.linkwise); `sensor_sigma`:
    every parameter's σ includes the sensors' calibration uncertainty (the calibration in the
    run's header, else each channel's declared accuracy; estimator.sensor_sigma). The rows of
    segments the experiment gives to the fluid equations alone (`identify = "fluid"`) are left
    out of every other model (estimator.segment_rows)."""
    cfg = rd.profile.estimator
    # A user model kept beside its profile loads from there (no PYTHONPATH needed).
    source = Path(rd.profile_source)
    profile_dir = source.parent if source.is_file() else None
    try:
        models = load_models(
            None if cfg is None else cfg.model,
            rd.params,
            profile_dir,
            prior_params=known_params(rd.profile),
        )
        # The band and valve the online estimator ran are the batch's "own" values (its notes
        # compare).
        models = [with_configured_switches(with_configured_shape(m, cfg), cfg) for m in models]
    except ValueError as exc:
        raise ReportError(f"{rd.path.name}: {exc}") from None
    try:
        vt = rd.run.meta.get("virtual_time")
        result = identify_run(
            rd.columns,
            rd.params,
            profile=rd.profile,
            models=models,
            virtual_time=vt if isinstance(vt, bool) else None,
            refine=refine,
            repeat_period_s=repeat_period_s,
            linkwise=linkwise,
            sensor_uncertainty=_sensor_uncertainty(rd) if sensor_sigma else None,
            fluid_only=fluid_only_rows(rd.run.events, rd.columns["seq"]),
        )
    except ValueError as exc:
        raise ReportError(f"{rd.path.name}: batch identification failed: {exc}") from None
    for m in models:
        if m.plant_names is not None:
            if len(m.plant_names) != m.n_params:
                raise ReportError(
                    f"model '{m.name}': plant_names has {len(m.plant_names)} names for "
                    f"{m.n_params} parameters {m.names}"
                )
            result.plant_names.update(zip(m.names, m.plant_names, strict=True))
    if refine:
        choose_in_closed_loop(rd, result, models)
    return result


def choose_in_closed_loop(rd: RunData, result: BatchResult, models: Sequence[LinearModel]) -> None:
    """The parameters the models name `closed_loop` and the fit flagged, chosen by simulating
    the identified model in closed loop on the run (estimator.closed_loop_choice); the fits'
    values changed in place (their WLS values kept beside), a note says what was chosen. Where
    the run recorded no experiment, or the model cannot drive the physics, nothing changes
    and a note says why."""
    by_name = {f.name: f for f in result.fits}
    wanted = [(by_name[m.name], m) for m in models if m.closed_loop and m.name in by_name]
    candidates = [
        nm
        for f, m in wanted
        for nm in m.closed_loop
        if nm in f.names and not f.identifiable[f.names.index(nm)]
    ]
    if not candidates:
        return
    event = recorded_experiment(rd)
    if event is None:
        result.notes.append(
            f"{', '.join(candidates)}: the run recorded no experiment, so they are not chosen "
            "in closed loop (the equations' values kept)"
        )
        return
    scale = {nm: float(m.param_scale[m.names.index(nm)]) for _, m in wanted for nm in m.closed_loop}
    band = next((f.shape_value for f in result.fits if f.shape_value is not None), None)
    plant_names = [result.plant_names.get(n, n) for n in result.names]
    setup = control_setup(rd.profile, event["experiment"], event.get("gains"))
    m_all = measured(rd)
    rows = min(len(m_all.t), round(WINDOW_S / rd.period))
    window = m_all.head(rows)
    qd0 = _velocity_before(rd)
    # The plant at the window's own oil temperature (a run warms by kelvins, and the valve's
    # null moves ~0.7 mV per kelvin with it: the run's mean would put the window's null off).
    oil_c = rd.mean_oil_c(rows)
    if oil_c is None:  # no finite reading in the window: the run's
        oil_c = rd.oil_c
    why: list[str] = []

    def fits_of(theta: np.ndarray) -> dict[str, float]:
        plant, reason = identified_params(rd.params, plant_names, theta, band, oil_c)
        if plant is None:
            why.append(reason or "the parameters cannot drive the physics")
            return {}
        params, effects = plant
        with np.errstate(all="ignore"):  # a poor trial may diverge: its cost is ∞
            return validate_closed_loop(params, rd.period, window, setup, effects, None, qd0).fit

    try:
        choice = choose_closed_loop(result.names, result.theta, candidates, scale, fits_of)
    except (ValueError, TypeError, KeyError, FloatingPointError) as exc:
        result.notes.append(f"{', '.join(candidates)}: the closed-loop choice failed: {exc}")
        return
    if why:
        result.notes.append(f"{', '.join(candidates)}: not chosen in closed loop: {why[0]}")
        return
    for f, _ in wanted:
        if f.theta_wls is None:
            f.theta_wls = f.theta.copy()
        for nm, v in choice.values.items():
            if nm in f.names:
                f.theta[f.names.index(nm)] = v
    result.refresh()
    result.notes.append(f"{', '.join(candidates)}: {choice.note()}")


#: A parameter set validation simulates: the shared physics' parameters and, for a model family
#: beyond the reference one, the effects its extra parameters stand for.
Plant = tuple[PlantParams, PlantEffects | None]


def identified_params(
    known: PlantParams,
    names: Sequence[str],
    theta: np.ndarray,
    band_m_s: float | None = None,
    oil_c: float | None = None,
) -> tuple[Plant | None, str | None]:
    """`known` with the identified values substituted by name — the reference models, or the
    real-rig family (estimator.models_lin.lin_plant, with its effects; `band_m_s` the Coulomb
    band the estimate was made with, None = the family's own; `oil_c` the oil temperature to
    state its temperature-referred parameters at); (None, why) for any other
    model, whose parameters cannot drive the shared physics."""
    names = list(names)
    if not np.all(np.isfinite(theta)):
        return None, "the estimate has non-finite values"
    band = SMOOTH_SIGN_M_S if band_m_s is None else band_m_s
    lin = lin_plant(known, names, theta, band, oil_c)
    if lin is not None:
        return lin, None
    mech, fluid = known.mech_names(), known.fluid_names()
    have_m = all(n in names for n in mech)
    have_f = all(n in names for n in fluid)
    if not (have_m and have_f):
        return None, (
            "the identified models are not the reference mechanical + fluid models, so they "
            "cannot drive the shared physics: no model validation (a model whose parameters "
            "are the reference ones under other names declares them in LinearModel.plant_names)"
        )

    def pick(sel: list[str]) -> np.ndarray:
        return np.array([theta[names.index(n)] for n in sel])

    return (known.with_identified(theta_mech=pick(mech), theta_fluid=pick(fluid)), None), None


def run_validation(
    rd: RunData, plant: Plant, label: str, notes: list[str]
) -> ValidationResult | None:
    params, effects = plant
    try:
        with np.errstate(all="ignore"):  # a poor estimate may diverge: FIT shows it, no crash
            return validate(params, rd.period, measured(rd), effects=effects)
    except (ValueError, FloatingPointError) as exc:
        notes.append(f"validation with the {label} parameters failed: {exc}")
        return None


def _velocity_before(rd: RunData) -> np.ndarray | None:
    """The joints' velocity at the analysed segment's first row from the rows recorded before
    it (the arm held ARMED before `run`), where they are continuous; else None."""
    k0 = rd.segment.start
    k = round(VELOCITY_FIT_S / rd.period)
    if k0 + 1 < k or np.any(np.diff(rd.run.seq[k0 - k + 1 : k0 + 1]) != 1):
        return None
    chans = [rd.profile.joint_channel(j.name, "resolver") for j in rd.profile.joints]
    if any(c is None or f"eng.{c.name}" not in rd.run.columns for c in chans):
        return None
    q = np.stack([rd.run.column(f"eng.{c.name}")[: k0 + 1] for c in chans if c], axis=1)
    return initial_velocity(q, k0, rd.period)


def run_closed_loop_validation(
    rd: RunData, plant: Plant, label: str, notes: list[str], true_sensors: bool = False
) -> ClosedLoopResult | None:
    """Closed-loop validation (`estimator.validation_closed_loop`) of `plant` on the validation
    run, with the experiment and gains the run recorded; None (and a note) where it cannot.
    `true_sensors`: the plant is the simulator's own, read through its transducers' true errors
    and the run's calibration (`estimator.sim_truth.true_sensors`), from the true oil
    temperature, and with the run's own sensor noise where it can be regenerated
    (`sim_truth.noise_realization`): the check of the validation path. Its FIT without that
    noise, what a perfect model scores against the run's noise, is kept as `noise_free_fit`."""
    event = recorded_experiment(rd)
    if event is None:
        notes.append(
            f"{rd.path.name} recorded no experiment event: no closed-loop validation (runs "
            "recorded by an older service, or rows not driven by `run`)"
        )
        return None
    params, effects = plant
    m = measured(rd)
    temp = rd.profile.oil_temperature
    oil_c = None
    if effects is not None and effects.thermal and temp is not None:
        oil_c = float(rd.columns[f"eng.{temp.name}"][0])
    try:
        setup = control_setup(rd.profile, event["experiment"], event.get("gains"))
        noise = None
        if true_sensors:
            from estimator import sim_truth

            cal = rd.calibration
            frames = sim_truth.true_sensors(rd.profile, rd.columns, cal)
            setup = replace(setup, sensors=frames)
            raw = sim_truth.noise_realization(rd.profile, rd.columns)
            if raw is not None:
                noise = sim_truth.field_noise(rd.profile, raw)
            if oil_c is not None:
                oil_c = sim_truth.true_oil_c(rd.columns, rd.profile, 0, raw, cal)
        qd0 = _velocity_before(rd)
        with np.errstate(all="ignore"):  # a poor estimate may diverge: FIT shows it, no crash
            result = validate_closed_loop(
                params, rd.period, m, setup, effects, oil_c, qd0, sensor_noise=noise
            )
            if noise is not None:
                free = validate_closed_loop(params, rd.period, m, setup, effects, oil_c, qd0)
                result.noise_free_fit = free.fit
        return result
    except (ValueError, TypeError, KeyError, FloatingPointError) as exc:
        notes.append(f"closed-loop validation with the {label} parameters failed: {exc}")
        return None


def parameter_table(data: ReportData) -> list[dict[str, Any]]:
    """One row per parameter (Sakai Table III form): batch and online estimate and %σ, and on
    the simulator the truth and each estimate's relative error in %."""
    b, o = data.batch, data.online
    rows = []
    for i, name in enumerate(b.names):
        j = o.names.index(name) if name in o.names else None
        row: dict[str, Any] = {
            "name": name,
            "unit": unit_of(name),
            "batch": float(b.theta[i]),
            "batch_sigma_pct": float(b.sigma_pct[i]),
            "online": None if j is None else float(o.theta[j]),
            "online_sigma_pct": None if j is None else float(o.sigma_pct[j]),
            "identifiable": bool(b.identifiable[i]),
        }
        if not row["identifiable"]:  # the prior in both columns (estimator.wls.fit_model)
            row["online"], row["online_sigma_pct"] = row["batch"], None
        if data.truth is not None:
            tr = float(data.truth[i])
            row["truth"] = tr
            row["batch_err_pct"] = 100.0 * (row["batch"] - tr) / tr if tr else None
            row["online_err_pct"] = (
                None if j is None or not tr else 100.0 * (row["online"] - tr) / tr
            )
        rows.append(row)
    return rows


def fit_table(data: ReportData) -> list[dict[str, Any]]:
    """One row per output (Sakai Table IV form): FIT in % per parameter set, then the RMS
    residual of each joint torque (N·m) from the inverse model."""
    sets = list(data.validation)
    keys: list[str] = []
    for r in data.validation.values():
        keys += [k for k in r.fit if k not in keys]
    order = {lab: i for i, lab in enumerate(OUTPUT_INFO)}
    keys.sort(key=lambda k: (order.get(k.rstrip("0123456789"), 99), k))
    rows: list[dict[str, Any]] = []
    for k in keys:
        row: dict[str, Any] = {"output": k, "kind": "FIT %"}
        for s in sets:
            row[s] = data.validation[s].fit.get(k)
        rows.append(row)
    closed: list[str] = []
    for cl in data.closed_loop.values():
        closed += [k for k in cl.fit if k not in closed]
    closed.sort(key=lambda k: (order.get(k.rstrip("0123456789"), 99), k))
    for k in closed:
        row = {"output": k, "kind": "FIT % closed loop"}
        for s in sets:
            found = data.closed_loop.get(s)
            row[s] = None if found is None else found.fit.get(k)
            if found is not None and found.noise_free_fit is not None:
                row[f"{s}_noise_free"] = found.noise_free_fit.get(k)
        rows.append(row)
    nj = len(data.valid.profile.joints)
    for i in range(nj):
        row = {"output": f"tau{i + 1}", "kind": "torque RMS N·m"}
        for s in sets:
            row[s] = data.validation[s].torque_rms[i]
        rows.append(row)
    return rows


def _sensor_uncertainty(rd: RunData) -> dict[str, Any]:
    """Each channel's offset and gain σ for the run: the calibration its header names, else
    the profile's declared accuracy classes."""
    from estimator.sensor_sigma import channel_uncertainty

    return dict(channel_uncertainty(rd.profile, rd.calibration))
