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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from daq.profile.schema import Profile
from estimator.datause import STATE_RUNNING
from estimator.models_lin import EDGES, valve_coefficients


def true_mean_oil_c(columns: Mapping[str, Any], profile: Profile) -> float | None:
    """Mean true oil temperature (°C) over the RUNNING rows; None without a temperature
    channel or RUNNING rows."""
    ch = profile.oil_temperature
    if ch is None or f"eng.{ch.name}" not in columns:
        return None
    reading = np.asarray(columns[f"eng.{ch.name}"], dtype=float)
    running = np.asarray(columns["state"]) == STATE_RUNNING
    if not running.any():
        return None
    err = ch.sim_error
    t = np.asarray(columns["t"], dtype=float)
    if err is not None:
        reading = (reading - err.offset - err.drift_per_hour * t / 3600.0) / (1.0 + err.gain_error)
    return float(np.mean(reading[running]))


def family_truth(profile: Profile, columns: Mapping[str, Any]) -> dict[str, float]:
    """Parameter name → the simulator's true value, for the reference models' and the
    real-rig family's names; empty for a profile whose backend is not the simulator."""
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
        oil = true_mean_oil_c(columns, profile) if eff.thermal else None
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
                **{f"Q0{e}{i}": v for e, v in zip(EDGES, q0, strict=True)},
                **{f"QL{e}{i}": v for e, v in zip(EDGES, ql, strict=True)},
            }
        )
    truth["air"] = eff.air_content
    return {k: float(v) for k, v in truth.items()}
