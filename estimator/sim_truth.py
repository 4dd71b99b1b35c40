"""The simulator's true value of every model family's parameters: comparison columns only.

The reference models carry their truth from the profile's `[backend.sim.plant]`
(`estimator.models`); the real-rig family (`estimator.models_lin`) describes effects the
simulator holds apart (`controller.plant.params.PlantEffects`), so its truth is derived here from
the simulator's plant, by the same conversions the family's docstrings state. Nothing here
reaches an estimate: `rigctl identify`'s table, the report and the benches print it beside one.

The family's joint viscous Fv± have none: the simulator's viscous friction acts at the piston, in
proportion to the moment arm squared, which no one joint coefficient equals (`lin_plant`).

The Stribeck bump heights dFs± are F_S± − F_C± (0 where the simulator has no bump).

The valve's null offsets: with a declared oil law (`[plant.oil]`) the family carries the null
shift with temperature (Qtₑ = Cfₑ β) and its Q0ₑ are the null offsets at the law's reference
temperature; without one they are the run temperature's, and their truth is the valve's bias at
the run's mean *true* oil temperature — the temperature channel's reading with its simulated
error taken out (the comparison may read the simulator's truth, the estimator may not).

`true_sensors` gives the true plant's closed-loop validation the transducers as they really are
(their `sim_error` and the run's calibration), so that the truth is read as the rig read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from daq.profile.schema import Profile
from estimator.datause import STATE_RUNNING
from estimator.models_lin import EDGES, valve_coefficients


def true_mean_oil_c(
    columns: Mapping[str, Any], profile: Profile, calibration: Mapping[str, Any] | None = None
) -> float | None:
    """Mean true oil temperature (°C) over the RUNNING rows; None without a temperature
    channel or RUNNING rows. `calibration`: the run's (its header's), which the recorded
    reading carries."""
    true = _true_oil(columns, profile, calibration=calibration)
    running = np.asarray(columns["state"]) == STATE_RUNNING
    if true is None or not running.any():
        return None
    return float(np.mean(true[running]))


def _true_oil(
    columns: Mapping[str, Any],
    profile: Profile,
    noise: Mapping[str, np.ndarray] | None = None,
    calibration: Mapping[str, Any] | None = None,
) -> np.ndarray | None:
    """Per row, the true oil temperature (°C): the temperature channel's reading with the run's
    calibration undone (the recorded reading is corrected by it), then its simulated error
    (and, given, its noise) taken out; None without the channel."""
    ch = profile.oil_temperature
    if ch is None or f"eng.{ch.name}" not in columns:
        return None
    reading = np.asarray(columns[f"eng.{ch.name}"], dtype=float)
    cal = ((calibration or {}).get("channels") or {}).get(ch.name)
    if cal:
        reading = reading * float(cal.get("gain", 1.0)) + float(cal.get("offset", 0.0))
    if noise is not None and ch.name in noise:
        reading = reading - np.asarray(noise[ch.name])
    g, o = _sensor_error(ch, np.asarray(columns["t"], dtype=float))
    return np.asarray((reading - o) / g)


def _mean_t(columns: Mapping[str, Any]) -> float:
    t = np.asarray(columns.get("t", [0.0]), dtype=float)
    return float(t.mean()) if t.size else 0.0


def _sensor_error(ch: Any, t: Any) -> tuple[Any, Any]:
    """(1 + gain error, offset at rig time t) of a simulated channel's true transducer (t a
    number or an array of them)."""
    err = ch.sim_error
    if err is None:
        return 1.0, 0.0
    return 1.0 + err.gain_error, err.offset + err.drift_per_hour * t / 3600.0


#: Feedback field → the input role whose channels report it (controller.feedback.Feedback).
FEEDBACK_ROLES = {
    "q": "resolver",
    "p_cap": "pressure_cap",
    "p_rod": "pressure_rod",
    "spool": "lvdt",
    "piston": "potentiometer",
}


def true_sensors(
    profile: Profile, columns: Mapping[str, Any], calibration: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Per feedback field, the simulated transducers' true errors (`sim_error`, their drift at
    the run's mean time) and the calibration in force
    (`estimator.validation_closed_loop.SensorFrame`): what the true plant's closed-loop
    validation reads its state through, as the rig's controller and recorder did."""
    from estimator.validation_closed_loop import SensorFrame

    chans = (calibration or {}).get("channels") or {}
    t_mean = _mean_t(columns)
    n = len(profile.joints)
    out: dict[str, Any] = {}
    for name, role in FEEDBACK_ROLES.items():
        g, o, cg, co = np.ones(n), np.zeros(n), np.ones(n), np.zeros(n)
        for j, joint in enumerate(profile.joints):
            ch = profile.joint_channel(joint.name, role)  # type: ignore[arg-type]
            if ch is None:
                continue
            g[j], o[j] = _sensor_error(ch, t_mean)
            cal = chans.get(ch.name)
            if cal:
                cg[j], co[j] = float(cal.get("gain", 1.0)), float(cal.get("offset", 0.0))
        if np.any(g != 1.0) or np.any(o != 0.0) or np.any(cg != 1.0) or np.any(co != 0.0):
            out[name] = SensorFrame(g, o, cg, co)
    return out


#: Reads the loop makes before its first cycle (`daq.loop.cycle.Loop.warm_up`): the row with
#: `seq` s was the simulator's (s + WARM_UP_READS)-th read.
WARM_UP_READS = 1


def noise_realization(profile: Profile, columns: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
    """Input channel name → the noise (engineering units, per row of `columns`) the simulator
    added to its reading: the run's own realization, regenerated from the backend's seed and
    the rows' `seq` (`daq.backends.sim.backend.noise_rows`). For the true plant's closed-loop
    validation only: with it the replay's controller acts on the readings the live one acted
    on, and what is left between the replay and the run is the validation path's own error.
    None where it cannot be regenerated: not the planar simulator, or no valid `seq` column.
    Rows not counted from the loop's start (or drawn by another version of the simulator) get
    another realization, which the FIT shows: the spools then score their noise's ~90 %, not
    ~99.5 %. (A `noise_burst` fault's scaling is not reproduced.)"""
    from daq.backends.sim.backend import noise_rows

    sim = profile.backend.sim
    if profile.backend.kind != "sim" or sim is None or profile.chain is not None:
        return None
    if "seq" not in columns:
        return None
    seq = np.asarray(columns["seq"], dtype=np.int64)
    if seq.size == 0 or seq.min() < 0:
        return None
    z = noise_rows(sim.seed, len(profile.inputs), seq + WARM_UP_READS)
    return {c.name: c.sim_noise * z[:, i] for i, c in enumerate(profile.inputs)}


def field_noise(profile: Profile, noise: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per feedback field (`FEEDBACK_ROLES`), the (rows, n) noise of each joint's channel
    (zero where a joint has none)."""
    n = len(profile.joints)
    rows = len(next(iter(noise.values()))) if noise else 0
    out: dict[str, np.ndarray] = {}
    for name, role in FEEDBACK_ROLES.items():
        arr = np.zeros((rows, n))
        for j, joint in enumerate(profile.joints):
            ch = profile.joint_channel(joint.name, role)  # type: ignore[arg-type]
            if ch is not None and ch.name in noise:
                arr[:, j] = noise[ch.name]
        out[name] = arr
    return out


def true_oil_c(
    columns: Mapping[str, Any], profile: Profile, row: int = 0,
    noise: Mapping[str, np.ndarray] | None = None,
    calibration: Mapping[str, Any] | None = None,
) -> float | None:  # fmt: skip
    """The true oil temperature (°C) at `row` (`_true_oil`: the reading, the run's calibration
    undone, less its simulated error and, given, the run's noise); None without the channel."""
    true = _true_oil(columns, profile, noise, calibration)
    return None if true is None else float(true[row])


def family_truth(
    profile: Profile, columns: Mapping[str, Any], calibration: Mapping[str, Any] | None = None
) -> dict[str, float]:
    """Parameter name → the simulator's true value, for the reference models' and the
    real-rig family's names; empty for a profile whose backend is not the simulator.
    `calibration`: the run's, which its recorded oil temperature carries."""
    from daq.profile.plant import plant_params, sim_plant

    if profile.backend.kind != "sim" or profile.backend.sim is None:
        return {}
    if profile.backend.sim.plant is None:
        return {}
    true, eff = sim_plant(profile)
    law = plant_params(profile).oil
    if law is not None:
        # The model's Q0ₑ are the law's reference temperature's (models_lin, "Temperature");
        # the simulator shifts its null only with its thermal state on.
        shift_k = law.reference_c - eff.reference_c if eff.thermal else 0.0
    else:
        oil = true_mean_oil_c(columns, profile, calibration) if eff.thermal else None
        shift_k = 0.0 if oil is None else oil - eff.reference_c
    truth: dict[str, float] = dict(zip(true.mech_names(), true.theta_mech(), strict=True))
    truth.update(zip(true.fluid_names(), true.theta_fluid(), strict=True))
    for i, j in enumerate(eff.joints, 1):
        cf, b = true.flow_gains[i - 1], true.bulk_modulus
        v0c, v0r = j.dead_volumes(float(true.dead_volume[i - 1]))
        b0 = j.null_bias + j.null_shift_per_k * shift_k
        q0, ql = valve_coefficients(cf, b0, j.lap, j.null_leak_opening)
        beta = j.null_shift_per_k if eff.thermal else 0.0
        if law is not None:
            truth.update({f"Qt{e}{i}": v for e, v in zip(EDGES, cf * beta, strict=True)})
        truth.update(
            {
                f"Fc+{i}": j.coulomb_pos,
                f"Fc-{i}": j.coulomb_neg,
                f"dFs+{i}": max(j.stiction_pos - j.coulomb_pos, 0.0),
                f"dFs-{i}": max(j.stiction_neg - j.coulomb_neg, 0.0),
                f"V0+/b{i}": v0c / b,
                f"V0-/b{i}": v0r / b,
                f"Cint{i}": j.leak_internal,
                f"Cext{i}": j.leak_external,
                **{f"Q0{e}{i}": v for e, v in zip(EDGES, q0, strict=True)},
                **{f"QL{e}{i}": v for e, v in zip(EDGES, ql, strict=True)},
            }
        )
    truth["air"] = eff.air_content
    return {k: float(v) for k, v in truth.items()}
