"""The σ every identified parameter will have, predicted before the rig moves, from the
sensors' declared noise and the experiment's planned reference (`rigctl predict`).

The estimate of a linear-in-parameters model is θ̂ = (ΦᵀWΦ)⁻¹ΦᵀW y: ΦᵀWΦ is the Fisher
information of the regressor along the trajectory, and the sensors' noise reaches y and Φ
through the same filters, differences and decimation the batch applies. The prediction takes
the motion the experiment will make (below), the engineer's nominal parameters as θ (the
simulator's truth is never read), and pushes independent draws of the declared noise through
the linearised pipeline: the spread of the resulting δθ is the predicted σ. Being linear in
the noise, the draws only estimate a covariance: with `draws` of them the σ figures carry a
relative sampling error of about 1/√(2·draws) (10 % at 50).

Two kinds of rig:
  * a chain (`hw_profiles/sim-excavator.toml`, read by `controller.plant.chain.profile`): the
    base parameters of `estimator.chain_regressor` (complete or reduced model) under a sensor
    grade of the profile (`estimator.chain_identify.propagated_sigma`);
    The motion: the chain tracking the plan in simulation (`predict_chain`'s `motion`);
  * a 1-/2-DOF service profile: the profile's own models (`estimator.models.load_models`) on
    the batch's own observation (`estimator.observation.observation`), each channel's declared
    σ (`sim_noise`, and its converter's quantisation) drawn into the raw block. The motion,
    pressures and spool: the experiment run by the profile's controller on the planning
    parameters' plant (`simulated_motion`), every segment, open-loop ones included; where that
    diverges, the planned reference with the plant's steady response along it
    (`controller.excitation.predicted_fluid_signals`), the open-loop segments left out and
    named in `notes`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.experiment import Experiment

if TYPE_CHECKING:
    from controller.plant.params import PlantParams
    from estimator.models import LinearModel

#: Controller kinds that drive the valve open loop (no planned angle to predict along).
OPEN_LOOP = ("valve_sine",)


@dataclass
class ModelPrediction:
    model: str
    names: list[str]
    nominal: np.ndarray
    sigma: np.ndarray
    definitions: list[str] | None = None
    classes: dict[str, str] | None = None

    @property
    def sigma_pct(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return 100.0 * self.sigma / np.abs(self.nominal)


@dataclass
class Prediction:
    rig: str
    experiment: str
    sensors: str
    models: list[ModelPrediction]
    seconds: float  # planned motion used
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "rig": self.rig,
            "experiment": self.experiment,
            "sensors": self.sensors,
            "seconds": self.seconds,
            "notes": self.notes,
            "models": [
                {
                    "model": m.model,
                    "parameters": [
                        {
                            "name": n,
                            "nominal": float(v),
                            "sigma": float(s),
                            **({"definition": m.definitions[k]} if m.definitions else {}),
                        }
                        for k, (n, v, s) in enumerate(zip(m.names, m.nominal, m.sigma, strict=True))
                    ],
                    **({"classes": m.classes} if m.classes else {}),
                }
                for m in self.models
            ],
        }


def experiment_reference(
    exp: Experiment, fs: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(t, q, q̇, q̈) of the experiment's closed-loop segments back to back at rate fs, and the
    names of the segments left out (open loop)."""
    qs: list[np.ndarray] = []
    qds: list[np.ndarray] = []
    qdds: list[np.ndarray] = []
    skipped = []
    for seg in exp.segments:
        if seg.controller.get("kind") in OPEN_LOOP:
            skipped.append(f"{seg.name} ({seg.controller.get('kind')})")
            continue
        t = np.arange(round(seg.duration * fs)) / fs
        q, qd, qdd = seg.trajectory.sample(t)
        for _ in range(seg.repeats):
            qs.append(q)
            qds.append(qd)
            qdds.append(qdd)
    if not qs:
        raise ValueError(f"experiment {exp.name!r} has no closed-loop segment to predict from")
    q = np.concatenate(qs)
    return np.arange(len(q)) / fs, q, np.concatenate(qds), np.concatenate(qdds), skipped


# ----------------------------------------------------------------------------- chains


def chain_q_range(chain: object, home: np.ndarray) -> np.ndarray:
    """Each joint's angle window for the random states of the base-parameter search: the jack
    strokes' range (a motor: ±π)."""
    from controller.plant.chain.plant import ChainPlant, stroke_limits

    lim = stroke_limits(ChainPlant(chain), home)  # type: ignore[arg-type]
    return np.where(np.isfinite(lim), lim, np.array([-np.pi, np.pi]))


def planned_pressures(
    tau: np.ndarray, tc: np.ndarray, tr: np.ndarray, p_low: float, p_max: float
) -> tuple[np.ndarray, np.ndarray]:
    """Chamber pressures giving τ = T⁺p⁺ − T⁻p⁻ with the lower side at p_low (as
    `controller.plant.chain.plant.equilibrium_state` holds the arm), clipped to [0, p_max]."""
    with np.errstate(divide="ignore", invalid="ignore"):
        pc = np.where(tc != 0, (tau + tr * p_low) / tc, 0.0)
        pr = np.full_like(tau, p_low)
        low = pc < p_low
        pr = np.where(low & (tr != 0), (tc * p_low - tau) / tr, pr)
        pc = np.where(low, p_low, pc)
    return np.clip(pc, 0.0, p_max), np.clip(pr, 0.0, p_max)


def predict_chain(
    profile_path: str | Path,
    exp: Experiment,
    *,
    grade: str = "thesis",
    minor: bool = True,
    fs: float = 200.0,
    cutoff_hz: float | None = None,
    parallel_hz: float | None = None,
    draws: int = 50,
    seed: int = 0,
    p_low: float = 3.0e6,
    motion: str = "simulated",
) -> Prediction:
    """Predicted σ of every base parameter of a chain profile's model along `exp`.

    `motion`: "simulated" (default) propagates the noise along the motion the identification
    run will make — the profile's own chain tracking the plan under the run's loop
    (`estimator.chain_simdata.run_experiment`, its tracking gains from that same chain) and
    read once by the grade's sensors, as the batch will see it; "plan" along the planned
    reference itself, with steady-state pressures. The plan alone underestimates the scatter
    of the estimates about twofold on the excavator (median σ / scatter 0.56 over 20 seeds):
    the tracked motion, its lag and the oil columns' ringing, and the noise the filtered
    readings keep all widen δΦ·θ's path, which the plan's smooth q, q̇, q̈ do not have."""
    if motion not in ("simulated", "plan"):
        raise ValueError(f"motion must be 'simulated' or 'plan', got {motion!r}")
    from controller.chain_experiments import experiment_trajectory
    from controller.plant.chain.profile import load_chain_profile
    from estimator.base_params import identifiability
    from estimator.chain_identify import (
        DEFAULT_CUTOFF_HZ,
        DEFAULT_PARALLEL_HZ,
        Conditioning,
        joint_weights,
        observe,
        propagated_sigma,
        solve,
    )
    from estimator.chain_regressor import ChainRegressor
    from estimator.chain_simdata import TRACKING_BANDWIDTH_HZ, TRACKING_SUBSTEPS, run_experiment

    prof = load_chain_profile(profile_path)
    if grade not in prof.sensors:
        raise ValueError(
            f"sensor grade {grade!r} not in {profile_path} (has {sorted(prof.sensors)})"
        )
    if exp.n_joints != prof.chain.n:
        raise ValueError(
            f"experiment {exp.name!r} has {exp.n_joints} joint(s), rig {prof.rig_id!r} has "
            f"{prof.chain.n}"
        )
    g = prof.sensors[grade]
    reg = ChainRegressor(prof.chain, minor=minor)
    bp = identifiability(reg.matrix, reg.names, chain_q_range(prof.chain, prof.home))
    theta = bp.values(reg.parameters())
    t, q, qd, qdd, skipped = experiment_reference(exp, fs)
    cond = Conditioning(
        fs, cutoff_hz or DEFAULT_CUTOFF_HZ, parallel_hz=parallel_hz or DEFAULT_PARALLEL_HZ
    )
    if motion == "simulated":
        run = run_experiment(
            prof.chain, experiment_trajectory(exp), g, nominal=prof.chain, fs=fs,
            nsub=TRACKING_SUBSTEPS, bandwidth_hz=TRACKING_BANDWIDTH_HZ, seed=seed, p_low=p_low,
        )  # fmt: skip
        ch = run.channels
        obs = observe(reg, bp, ch["q"], ch["p_cap"], ch["p_rod"], cond)
        q, qd, qdd, pc, pr = obs.q, obs.qd, obs.qdd, ch["p_cap"], ch["p_rod"]
        # θ where the batch will linearise: its own estimate from such readings. The noise in
        # the angles' columns biases that estimate (errors in variables) toward values that
        # pass less of the noise, so its scatter is narrower than δΦ·θ at the model's θ says
        # (1.34× on the excavator); the estimate from the simulated readings carries the same
        # bias.
        path_theta, _ = solve(obs.Phi, obs.y, joint_weights(reg, ch["q"], g))
    else:
        tau = bp.reduce(reg.matrix(q, qd, qdd)) @ theta
        tc, tr = reg.torque_per_pressure(q)
        pc, pr = planned_pressures(tau, tc, tr, p_low, prof.chain.supply_pressure)
        path_theta = theta
    sigma = propagated_sigma(
        reg, bp, path_theta, q, qd, qdd, pc, pr, g, cond, draws=draws, seed=seed
    )
    model = ModelPrediction(
        "complete" if minor else "reduced",
        bp.base_names,
        theta,
        sigma,
        bp.definitions(),
        dict(zip(reg.names, bp.classes, strict=True)),
    )
    notes = [f"segment left out (open loop): {s}" for s in skipped]
    notes.append(
        "motion: the plan" if motion == "plan" else (
            f"motion: the profile's chain simulated tracking the plan (P + velocity "
            f"feed-forward, {TRACKING_BANDWIDTH_HZ:g} Hz bandwidth), read once by the sensors"
        )
    )  # fmt: skip
    notes.append(
        f"{bp.rank} base parameters of {reg.p} physical ones; σ from {draws} draws of the "
        f"declared noise (±{g.resolver_accuracy_deg}° resolvers, ±{g.pressure_accuracy_psi} psi "
        f"pressures, uniform) through the angles' {cond.cutoff_hz:g} Hz zero-phase filter and "
        f"the 1:{cond.nd} decimation's {cond.f_p:g} Hz parallel filter"
    )
    return Prediction(prof.rig_id, exp.name, grade, [model], float(t[-1] + 1 / fs), notes)


# ----------------------------------------------------------------------------- 1-/2-DOF rigs


def _channel_sigma(profile: object) -> dict[tuple[str, str], float]:
    """(joint, role) → 1σ of one reading: the channel's declared `sim_noise` and its
    converter's quantisation (step/√12) in engineering units, in quadrature."""
    out: dict[tuple[str, str], float] = {}
    for ch in profile.inputs:  # type: ignore[attr-defined]
        if ch.joint is None:
            continue
        sig = float(getattr(ch, "sim_noise", 0.0) or 0.0)
        conv = getattr(ch, "converter", None)
        gain = getattr(getattr(ch, "scaling", None), "gain", None)
        if conv is not None and gain is not None:
            step = (conv.max - conv.min) / 2**conv.bits * abs(float(gain))
            sig = math.sqrt(sig**2 + step**2 / 12)
        out[(ch.joint, ch.role)] = sig
    return out


def predict_service_rig(
    profile_path: str | Path,
    exp: Experiment,
    *,
    draws: int = 30,
    seed: int = 0,
    params_path: str | Path | None = None,
) -> Prediction:
    """Predicted σ of the batch's reference models on a 1-/2-DOF service profile, planned with
    `params_path` (an earlier identification) else the profile's initial guesses
    (`daq.param_set.planning_params`: never the simulator's truth)."""
    from scipy.signal import lfilter

    from controller.excitation import predicted_fluid_signals
    from daq.param_set import planning_params
    from daq.profile import load_profile
    from estimator.angles import AngleFusion
    from estimator.chain import N_SIGNALS, TEMP_SLOT, unmeasured_oil_c
    from estimator.models import load_models
    from estimator.observation import observation, sample_from
    from estimator.spool import CROSSOVER_HZ, valve_commands
    from estimator.wls import row_sigma

    profile = load_profile(profile_path)
    params = planning_params(profile, params_path)
    nj = len(profile.joints)
    if exp.n_joints != nj:
        raise ValueError(
            f"experiment {exp.name!r} has {exp.n_joints} joint(s), rig {profile.rig.id!r} has {nj}"
        )
    fs = float(profile.rig.loop_rate_hz)
    motion = simulated_motion(profile, params, exp, fs)
    notes = []
    if motion is None:
        t, q, qd, qdd, skipped = experiment_reference(exp, fs)
        sig = predicted_fluid_signals(params, t, q, qd, qdd)
        motion = (q, sig["s"], sig["p_cap"], sig["p_rod"], sig["u"])
        notes = [f"segment left out (open loop): {s}" for s in skipped]
        notes.append(
            "the closed-loop simulation of the experiment with the planning parameters "
            "diverged: predicted along the planned reference with steady-state pressures"
        )
    else:
        notes.append(
            "predicted along the experiment simulated in closed loop with the planning "
            "parameters and the profile's controller (every segment, open-loop ones included)"
        )
    t = np.arange(motion[0].shape[0]) / fs
    raw0 = np.zeros((len(t), N_SIGNALS * nj))
    for slot, a in enumerate(motion):
        raw0[:, slot * nj : (slot + 1) * nj] = a
    raw0[:, TEMP_SLOT * nj :] = unmeasured_oil_c(params)
    sigmas = _channel_sigma(profile)
    roles = ("resolver", "potentiometer", "pressure_cap", "pressure_rod", "lvdt")
    noise_sd = np.zeros(N_SIGNALS * nj)
    for slot, role in enumerate(roles):
        for ji, j in enumerate(profile.joints):
            noise_sd[slot * nj + ji] = sigmas.get((j.name, role), 0.0)
    have_pot = all((j.name, "potentiometer") in sigmas for j in profile.joints)
    fusion = AngleFusion(params, nj) if have_pot else None
    rng = np.random.default_rng(seed)
    # The batch's spool is the LVDT below CROSSOVER_HZ and the valve command's lag above it
    # (estimator.spool, where the profile records every valve command): what reaches it of the
    # LVDT's noise is that noise through the fusion's first-order low-pass.
    lvdt_cols = slice(roles.index("lvdt") * nj, (roles.index("lvdt") + 1) * nj)
    lvdt_lp = None
    if valve_commands(profile) is not None:
        alpha = 1.0 - math.exp(-2.0 * math.pi * CROSSOVER_HZ / fs)
        lvdt_lp = ([alpha], [1.0, alpha - 1.0])

    def noise() -> np.ndarray:
        e = rng.standard_normal(raw0.shape) * noise_sd
        if lvdt_lp is not None:
            e[:, lvdt_cols] = lfilter(*lvdt_lp, e[:, lvdt_cols], axis=0)
        return e

    models = []
    cfg = getattr(profile, "estimator", None)
    models_used = load_models(
        getattr(cfg, "model", None), params, Path(profile_path).parent, prior_params=params,
    )  # fmt: skip
    for mdl in models_used:
        fc = mdl.cutoff_hz
        nd = max(1, int(0.4 * fs / fc))
        trim = int(4.0 / fc * fs)
        # The planning values where the model's parameters map onto them; a model's own
        # parameters with no planning value (the Lin family's friction, leakage, air) at scale.
        theta = np.asarray(mdl.param_scale, dtype=float).copy()
        if mdl.prior is not None:
            prior = np.asarray(mdl.prior, dtype=float)
            theta = np.where(np.isfinite(prior), prior, theta)

        if mdl.valid is not None:
            # The rows one noisy reading of the motion keeps, for every draw: the simulated
            # motion touches the bounds a model leaves out (a chamber near tank pressure),
            # where the batch drops what its run's noise takes past them (and the filters'
            # reach around each); a draw that moved the row set would not be a perturbation
            # of the same equations.
            r0 = raw0 + noise()
            if fusion is not None:
                fusion.apply(r0)
            mdl = dataclasses.replace(mdl, valid=_rows(mdl.valid(sample_from(r0, nj))))

        def obs(raw: np.ndarray, mdl: object = mdl, fc: float = fc, nd: int = nd,
                trim: int = trim) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
            r = raw.copy()
            if fusion is not None:
                fusion.apply(r)
            phi, y, _ = observation(mdl, r, fs, nj, fc, nd, trim)  # type: ignore[arg-type]
            return phi, y

        phi0, y0 = obs(raw0)
        th_n = theta / mdl.param_scale
        errs = []
        for _ in range(draws):
            phi, y = obs(raw0 + noise())
            errs.append((y - y0) - np.einsum("mnr,r->mn", phi - phi0, th_n))
        # The batch weights each output equation's rows by 1/σ of their equation error (one σ
        # per equation, or per speed octile: estimator.wls.row_sigma); on a plant its model
        # describes that error is the noise's, whose σ the draws give. Unweighted, R12's σ on
        # sim-2dof came out at 0.50 of the scatter of the estimates, weighted 0.77
        # (bench/predict_accuracy.py).
        de = np.array(errs)  # (draws, rows, outputs)
        rms = np.sqrt(np.mean(de**2, axis=0))  # (rows, outputs)
        w = 1.0 / row_sigma(mdl, phi0, rms.T.reshape(-1)).reshape(rms.shape[1], -1).T
        pinv = np.linalg.pinv((phi0 * w[:, :, None]).reshape(-1, phi0.shape[-1]), rcond=1e-12)
        out = np.array([pinv @ (e * w).reshape(-1) for e in de])
        sigma = np.std(out, axis=0, ddof=1) * mdl.param_scale
        models.append(ModelPrediction(mdl.name, list(mdl.names), theta, sigma))
    notes.append(
        f"σ of the WLS estimate (not the IV refinement) from {draws} draws of each channel's "
        "declared sim_noise and quantisation through the batch's observation"
    )
    return Prediction(profile.rig.id, exp.name, "declared", models, float(t[-1] + 1 / fs), notes)


def simulated_motion(
    profile: Any, params: PlantParams, exp: Experiment, fs: float
) -> tuple[np.ndarray, ...] | None:
    """(q, s, p_cap, p_rod, u), each (N, n): the experiment as the service will run it, with
    the profile's controller, gains and limits on the plant the planning parameters describe,
    from rest at its first reference (estimator.validation_closed_loop, DIDIM's simulation).
    None where that simulation diverges.

    Why not the planned reference: the batch fits the motion the closed loop makes, not the
    plan. On sim-2dof the tracking error (0.2° RMS) carries information on joint 2's inertia
    and takes some of R12's: predicted along the plan, M2's σ came out 1.8–2.3× the scatter of
    the estimates over 20 runs and R12's 0.5–0.8×; along this motion 0.86–0.91× and 0.87–0.96×
    (`bench/predict_accuracy.py`). And the open-loop segments the plan has no angle for (a
    valve sine) excite the flow gains the batch fits on them."""
    from controller.excitation import predicted_fluid_signals
    from controller.plant.dynamics import cylinder
    from estimator.validation_closed_loop import control_setup, simulate_closed_loop

    n = params.n
    _, q_plan, _, _, _ = experiment_reference(exp, fs)
    rest = np.repeat(q_plan[:1], 2, axis=0)
    zero = np.zeros_like(rest)
    hold = predicted_fluid_signals(params, np.array([0.0, 1.0 / fs]), rest, zero, zero)
    x0 = np.concatenate([q_plan[0], np.zeros(n), hold["p_cap"][0], hold["p_rod"][0], hold["u"][0]])
    setup = control_setup(profile, exp, None, params)
    steps = round(exp.duration * fs)
    with np.errstate(all="ignore"):
        states, _, _ = simulate_closed_loop(params, 1.0 / fs, x0, setup, steps)
    if not np.all(np.isfinite(states)):
        return None
    q = states[:, :n]
    s, _ = cylinder(params, q)
    return q, s, states[:, 2 * n : 3 * n], states[:, 3 * n : 4 * n], states[:, 4 * n :]


def _rows(kept: np.ndarray) -> Callable[[object], np.ndarray]:
    """A model's `valid` that keeps the same rows whatever the sample."""
    mask = np.asarray(kept, dtype=bool)
    return lambda _x: mask


def _nominal(mdl: LinearModel) -> np.ndarray:
    """The engineer's values of a model's parameters: its prior (the profile's initial
    guesses), else its normalising scale — never the simulator's truth, which
    `plant_params` would fill the identified fields with."""
    if mdl.prior is not None:
        return np.asarray(mdl.prior, dtype=float)
    return np.asarray(mdl.param_scale, dtype=float)


def is_chain_profile(path: str | Path) -> bool:
    """A chain profile has a top-level [chain] table (the service's schema has none)."""
    import tomllib

    with Path(path).open("rb") as f:
        return "chain" in tomllib.load(f)


# ----------------------------------------------------------------------------- design


def sigma_cost(
    regressor: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    theta: np.ndarray,
    chosen: Sequence[int],
    output_sigma: np.ndarray,
    floor: np.ndarray | None = None,
) -> Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], float]:
    """An `optimise_mfs` cost: Σ log(σ_k / scale_k) over the `chosen` parameters, σ from the
    Fisher information ΦᵀWΦ of `regressor(q, q̇, q̈) -> (N, n, r)` on the planned samples with
    each joint's equation weighted by 1/output_sigma² (white noise: the full propagation
    through the filters is `predict_*`, too slow inside an optimiser). scale_k = |θ_k|, or
    `floor` where larger (a parameter whose nominal value is 0)."""
    th = np.abs(np.asarray(theta, dtype=float))
    scale = th if floor is None else np.maximum(th, floor)
    w = 1.0 / np.asarray(output_sigma, dtype=float) ** 2
    idx = np.asarray(chosen, dtype=int)

    def cost(t: np.ndarray, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> float:
        Y = regressor(q, qd, qdd)
        F = np.einsum("mnr,n,mns->rs", Y, w, Y)
        d = np.sqrt(np.diag(F))
        d = np.where(d > 0, d, 1.0)
        # Eigen-decomposition of the normalised information: a direction the plan leaves
        # unexcited gets a huge (not an infinite) variance, so the optimiser can climb out.
        lam, vec = np.linalg.eigh(F / np.outer(d, d))
        lam = np.maximum(lam, 1e-14 * lam.max())
        var = ((vec[idx] ** 2) / lam).sum(axis=1) / d[idx] ** 2
        return float(np.sum(0.5 * np.log(var) - np.log(scale[idx])))

    return cost
