"""Batch identification of a chain machine (a `[chain]` profile, docs/excavator.md) from a
recorded run: the base parameters of `estimator.chain_regressor` by weighted least squares on
the run's resolver angles and chamber pressures (`estimator.chain_identify`: zero-phase
low-pass, five-point differences, parallel decimation), each with the σ the run's own noise
gives it, and every one the run cannot support flagged in words.

Noise. A real rig's channels declare an accuracy (a calibration bias), not their noise, and
the thesis's grades are what a simulation draws. So the σ comes from the noise measured on the
run itself: per channel, the white noise of its 4th differences, Var(Δ⁴e) = 70 σ² for white e,
taken as a median absolute deviation so that a few steps do not count. The signal's own
contribution is negligible at the service's 1 kHz (a 20 Hz oil-column ringing of 1 MPa gives
Δ⁴ ≈ 0.25 kPa against a pressure noise of ~20 kPa). A channel quieter than its converter's step
is held at step/√12, the quantisation's own noise. That noise is then pushed through the same
pipeline (`chain_identify.propagated_sigma`, normal draws).

Flags. A number printed without one is a measurement within its ±3σ; the others are named:
  * "not excited": a direction of the regressor the run leaves below 1e-10 of the largest
    (`chain_identify.unexcited`; σ = ∞);
  * "not resolved": 3σ ≥ |θ̂|, the run cannot tell the parameter from zero. On the shipped
    excavator experiments most of the minor links' inertias end here: the regressor's
    column-normalised condition number along them is ~1e8 (docs/excavator.md).

For prediction. Least squares gives the unresolved combinations whatever fits the run's noise,
and those extrapolate: on another run the complete model predicted the actuator torques worse
than the reduced one, the opposite of the thesis's Figure 37. `theta_held` is the model a CAD
description completes: the bodies' base parameters the run does not resolve held at the
profile's values (`chain_identify.held_bodies`), everything else — resolved bodies, friction,
transducer offsets, the armatures — fitted around them (`chain_identify.solve_fixed`). Friction
and offsets are never held: no drawing gives them. The printed table stays the free fit's (its
±3σ is the promise); `theta_held` is what `torque_rms` also predicts with.

Truth. On the simulated backend the chain simulator's plant is the profile's chain
(daq/backends/sim/chain_backend.py), its pressure transducers offset by their `sim_error`: the
comparison column is the base parameters of that, as `rigctl identify` prints for every other
model family (estimator.sim_truth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from daq.profile.schema import Profile
from estimator.base_params import BaseParameters, identifiability
from estimator.chain_identify import (
    DEFAULT_CUTOFF_HZ,
    DEFAULT_PARALLEL_HZ,
    ChannelNoise,
    Conditioning,
    held_bodies,
    identify,
    observe,
    solve_fixed,
)
from estimator.chain_regressor import ChainRegressor
from estimator.report.runs import OpenedRun, ReportError, open_run

#: The roles the chain's observation reads, per joint.
ROLES = ("resolver", "pressure_cap", "pressure_rod")
#: Var(Δ⁴e) / σ² for white e: 1 + 16 + 36 + 16 + 1.
DIFF4_GAIN = 70.0
#: A median absolute deviation over σ for a normal variable.
MAD_SIGMA = 1.4826


@dataclass
class ChainRecording:
    """A chain machine's recorded run: the analysed segment's angle and pressure channels."""

    opened: OpenedRun
    fs: float
    q: np.ndarray  # (N, n) resolver angles, rad
    p_cap: np.ndarray  # (N, n) cap (motor port A) pressures, Pa
    p_rod: np.ndarray  # (N, n) rod (port B) pressures, Pa
    floor: ChannelNoise  # each channel's converter step / √12

    @property
    def profile(self) -> Profile:
        return self.opened.profile


def load_chain_run(path: str | Path, profile: Profile | str | Path | None = None) -> ChainRecording:
    """The run's chain channels over its analysed segment (`estimator.report.runs.open_run`);
    `ReportError` naming what is missing for a run that is not a chain machine's."""
    return chain_recording(open_run(path, profile))


def chain_recording(o: OpenedRun) -> ChainRecording:
    """An opened run's chain channels (`load_chain_run`)."""
    prof = o.profile
    if prof.chain is None:
        raise ReportError(
            f"profile '{prof.rig.id}' ({o.profile_source}) has no [chain] section: "
            "not a chain machine's run"
        )
    cols = {n: i for i, n in enumerate(o.run.columns)}
    rows = o.run.data[o.segment]
    blocks: dict[str, np.ndarray] = {}
    for role in ROLES:
        vals = []
        for j in prof.joints:
            ch = prof.joint_channel(j.name, role)  # type: ignore[arg-type]
            if ch is None or f"eng.{ch.name}" not in cols:
                raise ReportError(
                    f"{o.path.name}: the chain's identification needs a '{role}' channel on "
                    f"joint {j.name} (resolver angle, cap and rod pressure on every joint)"
                )
            x = np.asarray(rows[:, cols[f"eng.{ch.name}"]], dtype=float)
            bad = np.flatnonzero(~np.isfinite(x))
            if bad.size:
                raise ReportError(
                    f"{o.path.name}: channel {ch.name} has {bad.size} non-finite reading(s) in "
                    f"the analysed rows (first at row {o.segment.start + int(bad[0])})"
                )
            # A resolver read through a wrapping converter jumps by 2π where the joint passes
            # its ends: the differences need the angle itself.
            vals.append(np.unwrap(x) if ch.converter.wraps else x)
        blocks[role] = np.stack(vals, axis=1)
    return ChainRecording(
        o, 1.0 / prof.period, blocks["resolver"], blocks["pressure_cap"], blocks["pressure_rod"],
        converter_floor(prof),
    )  # fmt: skip


def converter_floor(prof: Profile) -> ChannelNoise:
    """Each chain channel's converter step / √12 in engineering units, per joint: the noise a
    quantised reading has at least."""
    out = []
    for role in ROLES:
        step = []
        for j in prof.joints:
            ch = prof.joint_channel(j.name, role)  # type: ignore[arg-type]
            if ch is None:
                raise ValueError(f"joint {j.name} has no '{role}' channel")
            gain = abs(float(getattr(ch.scaling, "gain", 1.0)))
            step.append((ch.converter.max - ch.converter.min) / 2**ch.converter.bits * gain)
        out.append(np.asarray(step) / math.sqrt(12.0))
    return ChannelNoise(out[0], out[1], out[2])


def white_noise_sigma(x: np.ndarray) -> np.ndarray:
    """(n,) 1σ of the white noise on each column of x (N, n), from its 4th differences."""
    d4 = np.diff(np.asarray(x, dtype=float), 4, axis=0)
    mad = np.median(np.abs(d4 - np.median(d4, axis=0)), axis=0)
    return np.asarray(MAD_SIGMA * mad / math.sqrt(DIFF4_GAIN))


def measured_noise(rec: ChainRecording) -> ChannelNoise:
    """Each channel's white noise on the run, at least its converter's quantisation."""
    f = rec.floor
    return ChannelNoise(
        np.maximum(white_noise_sigma(rec.q), f.q),
        np.maximum(white_noise_sigma(rec.p_cap), f.p_cap),
        np.maximum(white_noise_sigma(rec.p_rod), f.p_rod),
    )


@dataclass
class ChainBatch:
    """The base parameters of one model (complete or reduced) identified from one run."""

    model: str  # "complete" (with the jacks' cylinders and pistons) or "reduced"
    names: list[str]
    definitions: list[str]
    theta: np.ndarray
    sigma: np.ndarray  # 1σ from the run's measured noise; ∞ where not excited
    #: Parameter name → why the run does not measure it ("not excited", "not resolved …").
    flags: dict[str, str]
    nominal: np.ndarray  # the profile's values of the same base parameters
    truth: np.ndarray | None  # the simulator's (simulated backend only)
    noise: ChannelNoise
    cutoff_hz: float
    parallel_hz: float
    physical: int  # parameters of the model before reduction to the base ones
    classes: dict[str, str]  # physical parameter → identifiability class (base_params)
    rms_residual: np.ndarray  # per joint, of the decimated torque equations
    #: The unresolved bodies at the profile's values, the rest refitted (module docstring).
    theta_held: np.ndarray
    held: list[str]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: What fitted it, for predicting another run's torques (`torque_rms`).
    regressor: ChainRegressor | None = field(default=None, repr=False)
    base: BaseParameters | None = field(default=None, repr=False)
    conditioning: Conditioning | None = field(default=None, repr=False)

    @property
    def measured(self) -> np.ndarray:
        return np.array([n not in self.flags for n in self.names], dtype=bool)

    @property
    def sigma_pct(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(100.0 * self.sigma / np.abs(self.theta))


def sigma_bound(draws: int) -> float:
    """The factor from the σ estimated by `draws` noise draws to its upper 95 % bound: the
    estimate's relative standard error is 1/√(2(draws − 1)), and a σ printed as drawn would
    be too small for about half the parameters. On five service runs of the excavator the
    estimates' scatter was 1.22× the 30-draw σ with the observation's ends trimmed by 4/f
    (median over the base parameters) and 0.85× with the 8/f it trims now."""
    return 1.0 + 2.0 / math.sqrt(2.0 * (draws - 1))


def flag_reasons(names: list[str], theta: np.ndarray, sigma: np.ndarray) -> dict[str, str]:
    """The module docstring's two flags, per parameter name."""
    out: dict[str, str] = {}
    for name, th, s in zip(names, theta, sigma, strict=True):
        if not math.isfinite(s):
            out[name] = "not excited by this run"
        elif 3.0 * s >= abs(th):
            out[name] = f"not resolved: ±3σ ({3.0 * s:.3g}) includes zero"
    return out


def simulated_truth(prof: Profile, reg: ChainRegressor, bp: BaseParameters) -> np.ndarray | None:
    """The simulator's base parameters (module docstring), None off the simulated backend."""
    if prof.backend.kind != "sim":
        return None
    chain, _, _ = prof.chain_model()
    offsets = []
    for j in prof.joints:
        pair = []
        for role in ("pressure_cap", "pressure_rod"):
            ch = prof.joint_channel(j.name, role)
            err = None if ch is None else ch.sim_error
            pair.append(0.0 if err is None else float(err.offset))
        offsets.append((pair[0], pair[1]))
    return np.asarray(bp.values(reg.parameters(chain, offsets=offsets)))


def identify_chain(
    rec: ChainRecording,
    *,
    minor: bool = True,
    cutoff_hz: float = DEFAULT_CUTOFF_HZ,
    parallel_hz: float | None = DEFAULT_PARALLEL_HZ,
    draws: int = 40,
    seed: int = 0,
) -> ChainBatch:
    """The run's base parameters (complete model with the jacks' bodies, or `minor=False`:
    the reduced one), σ and flags (module docstring)."""
    from estimator.predict import chain_q_range

    prof = rec.profile
    chain, home, _ = prof.chain_model()
    reg = ChainRegressor(chain, minor=minor)
    bp = identifiability(reg.matrix, reg.names, chain_q_range(chain, home))
    cond = Conditioning(rec.fs, cutoff_hz, parallel_hz=parallel_hz)
    n_dec = rec.q.shape[0] // cond.nd - 2 * cond.trim
    if n_dec * rec.q.shape[1] < 2 * bp.rank:
        raise ReportError(
            f"{rec.opened.path.name}: {rec.q.shape[0] / rec.fs:.1f} s of running data give "
            f"{max(n_dec, 0)} decimated samples per joint after the filters' start-up at both "
            f"ends ({cond.trim / rec.fs * cond.nd:.1f} s each); "
            f"{bp.rank} base parameters need at least "
            f"{math.ceil(2 * bp.rank / rec.q.shape[1]) + 2 * cond.trim} decimated samples"
        )
    noise = measured_noise(rec)
    fit = identify(
        reg, bp, {"q": rec.q, "p_cap": rec.p_cap, "p_rod": rec.p_rod}, noise, cond,
        draws=draws, seed=seed,
    )  # fmt: skip
    sigma = fit.sigma * sigma_bound(draws)
    flags = flag_reasons(fit.names, fit.theta, sigma)
    nominal = np.asarray(bp.values(reg.parameters()))
    held = held_bodies(reg, bp, flags)
    assert fit.observation is not None and fit.weights is not None
    theta_held = solve_fixed(fit.observation.Phi, fit.observation.y, fit.weights, nominal, held)
    model = "complete" if minor else "reduced"
    notes = [
        *rec.opened.notes,
        f"{model} model: {bp.rank} base parameters of {reg.p} physical ones; least squares "
        f"weighted by each joint's pressure noise; angles low-passed at {cond.cutoff_hz:g} Hz "
        f"before the differences, regressor and torque alike at {cond.f_p:g} Hz by the 1:{cond.nd} "
        "decimation (zero-phase)",
        "noise measured on the run (1σ): angles "
        + ", ".join(f"{math.degrees(s):.3g}°" for s in noise.q)
        + "; pressures "
        + ", ".join(
            f"{a / 1e3:.3g}/{b / 1e3:.3g} kPa"
            for a, b in zip(noise.p_cap, noise.p_rod, strict=True)
        )
        + f"; σ from {draws} draws of it through the same pipeline, printed at the upper "
        f"95 % bound of that estimate (×{sigma_bound(draws):.2f})",
    ]
    if held.any():
        notes.append(
            f"for prediction (theta_held, the torque comparisons): {int(held.sum())} unresolved "
            "bodies' base parameters held at the profile's values, the other "
            f"{bp.rank - int(held.sum())} refitted around them"
        )
    warnings = []
    if flags:
        groups = {
            why: [n for n, r in flags.items() if r.startswith(why)]
            for why in ("not excited", "not resolved")
        }
        warnings.append(
            f"{len(flags)} of {bp.rank} base parameters are not measured by this run (flagged, "
            "not measured; each one's reason and ±3σ in --json): "
            + "; ".join(
                f"{why}{' (±3σ includes zero)' if why == 'not resolved' else ''}: "
                + ", ".join(names)
                for why, names in groups.items()
                if names
            )
        )
    return ChainBatch(
        model=model,
        names=fit.names,
        definitions=fit.definitions,
        theta=fit.theta,
        sigma=sigma,
        flags=flags,
        nominal=nominal,
        truth=simulated_truth(prof, reg, bp),
        noise=noise,
        cutoff_hz=cond.cutoff_hz,
        parallel_hz=cond.f_p,
        physical=reg.p,
        classes=dict(zip(reg.names, bp.classes, strict=True)),
        rms_residual=fit.rms_residual,
        theta_held=theta_held,
        held=[n for n, h in zip(fit.names, held, strict=True) if h],
        notes=notes,
        warnings=warnings,
        regressor=reg,
        base=bp,
        conditioning=cond,
    )


def torque_rms(rec: ChainRecording, b: ChainBatch) -> dict[str, dict[str, float]]:
    """Another run's measured actuator torques predicted by the identified base parameters
    ("identified"; "held": `theta_held`) and by the profile's nominal ones, observed as `b`
    was: per joint, the RMS of each model's error and of the torque itself ("measured"; N·m, a
    jack joint's torque about its axis)."""
    assert b.regressor is not None and b.base is not None and b.conditioning is not None
    obs = observe(b.regressor, b.base, rec.q, rec.p_cap, rec.p_rod, b.conditioning)
    names = [j.name for j in rec.profile.joints]

    def rms(x: np.ndarray) -> dict[str, float]:
        return {n: float(v) for n, v in zip(names, np.sqrt(np.mean(x**2, axis=0)), strict=True)}

    return {
        "identified": rms(obs.y - np.einsum("mnr,r->mn", obs.Phi, b.theta)),
        "held": rms(obs.y - np.einsum("mnr,r->mn", obs.Phi, b.theta_held)),
        "nominal": rms(obs.y - np.einsum("mnr,r->mn", obs.Phi, b.nominal)),
        "measured": rms(obs.y),
    }


def as_dict(b: ChainBatch) -> dict[str, Any]:
    """JSON-ready (`rigctl identify --json`'s `chain`)."""
    return {
        "model": b.model,
        "cutoff_hz": b.cutoff_hz,
        "parallel_hz": b.parallel_hz,
        "physical_parameters": b.physical,
        "base_parameters": [
            {
                "name": n,
                "definition": d,
                "theta": float(t),
                "sigma": float(s),
                "nominal": float(nom),
                "theta_held": float(b.theta_held[i]),
                "held": n in b.held,
                "truth": None if b.truth is None else float(b.truth[i]),
                "flag": b.flags.get(n),
            }
            for i, (n, d, t, s, nom) in enumerate(
                zip(b.names, b.definitions, b.theta, b.sigma, b.nominal, strict=True)
            )
        ],
        "classes": b.classes,
        "noise": {
            "q_rad": b.noise.q.tolist(),
            "p_cap_pa": b.noise.p_cap.tolist(),
            "p_rod_pa": b.noise.p_rod.tolist(),
        },
        "rms_residual": b.rms_residual.tolist(),
    }
