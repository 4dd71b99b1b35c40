"""The profile's plant sections as the physics' `PlantParams` (and, for the simulator only, its
`PlantEffects`).

`[plant]` is what a rig engineer knows (geometry, supply, nominal dead volumes; optional
initial guesses). `[backend.sim.plant]` is the simulator's true plant. `plant_params` gives the
known geometry with, for the identified parameters, the simulator's true values on a simulated
rig (they feed only the truth columns of tables and reports), else the profile's guesses, else
NaN ("unknown"). `sim_plant` gives the simulator its true plant; nothing else calls it.
"""

from __future__ import annotations

import math

import numpy as np

from controller.plant.oil import OilLaw
from controller.plant.params import JointEffects, PlantEffects, PlantParams
from daq.profile.schema import Oil, Plant, Profile, SimPlant, SimPlantJoint

#: Litres per minute → m³/s.
L_MIN = 1.0e-3 / 60.0


def _truth(profile: Profile) -> SimPlant | None:
    sim = profile.backend.sim
    return sim.plant if sim is not None else None


def _geometry(profile: Profile) -> Plant:
    plant = profile.plant
    if plant is None:
        raise ValueError(
            f"profile '{profile.rig.id}' has no [plant] section: it must state the known "
            "geometry (areas, pins, stroke, dead volume, supply pressure)"
        )
    return plant


def _params(plant: Plant, truth: SimPlant | None) -> PlantParams:
    js = plant.joints
    n = len(js)

    def col(attr: str) -> np.ndarray:
        return np.array([float(getattr(j, attr)) for j in js])

    def ident(attr: str) -> np.ndarray:
        """Identified per-joint values: truth, else the guess, else NaN (unknown)."""
        if truth is not None:
            return np.array([float(getattr(j, attr)) for j in truth.joints])
        vals = [getattr(j, attr) for j in js]
        return np.array([math.nan if v is None else float(v) for v in vals])

    if truth is not None:
        bulk = truth.bulk_modulus_pa
        coupling = truth.coupling
        gains = np.array([list(j.flow_gains) for j in truth.joints], dtype=float)
    else:
        bulk = math.nan if plant.bulk_modulus_pa is None else plant.bulk_modulus_pa
        coupling = plant.coupling if plant.coupling is not None else (0.0 if n == 1 else math.nan)
        gains = np.array(
            [[math.nan] * 4 if j.flow_gains is None else list(j.flow_gains) for j in js],
            dtype=float,
        )
    return PlantParams(
        n=n,
        gravity=plant.gravity,
        supply_pressure=plant.supply_pressure_pa,
        bulk_modulus=bulk,
        coupling=coupling,
        inertia=ident("inertia"),
        viscous_friction=ident("viscous_friction"),
        gravity_moment=ident("gravity_moment"),
        area_cap=col("area_cap"),
        area_rod=col("area_rod"),
        dead_volume=col("dead_volume"),
        stroke=col("stroke"),
        pin_a=col("pin_a"),
        pin_b=col("pin_b"),
        closed_length=col("closed_length"),
        theta0=np.array([math.radians(j.theta0_deg) for j in js]),
        flow_gains=gains,
        valve_gain=col("valve_gain"),
        valve_tau=col("valve_tau_s"),
        spool_max=col("spool_max"),
        oil=None if plant.oil is None else oil_law(plant.oil),
    )


def oil_law(oil: Oil) -> OilLaw:
    """The declared oil's laws (`[plant.oil]`)."""
    return OilLaw.from_datasheet(
        oil.viscosity_40c_cst, oil.viscosity_100c_cst, oil.bulk_modulus_per_k, oil.reference_c
    )


def plant_params(profile: Profile) -> PlantParams:
    """Known geometry; identified parameters as the simulator's truth (simulated rig: for the
    comparison columns only), else the profile's initial guesses, else NaN."""
    return _params(_geometry(profile), _truth(profile))


def known_params(profile: Profile) -> PlantParams:
    """Known geometry and the profile's initial guesses (NaN where none): never the truth."""
    return _params(_geometry(profile), None)


def has_identified_values(params: PlantParams) -> bool:
    """Whether every identified parameter has a value (no NaN from a profile without them)."""
    return bool(np.isfinite(np.concatenate([params.theta_mech(), params.theta_fluid()])).all())


def _joint_effects(tj: SimPlantJoint, params: PlantParams, i: int) -> JointEffects:
    kw: dict[str, float | None] = {
        "dead_volume_cap": tj.dead_volume_cap,
        "dead_volume_rod": tj.dead_volume_rod,
    }
    f = tj.friction
    if f is not None:
        kw.update(
            coulomb_pos=f.coulomb_pos_n,
            coulomb_neg=f.coulomb_neg_n,
            stiction_pos=f.coulomb_pos_n if f.stiction_pos_n is None else f.stiction_pos_n,
            stiction_neg=f.coulomb_neg_n if f.stiction_neg_n is None else f.stiction_neg_n,
            stribeck_velocity=f.stribeck_velocity_m_s,
            smoothing_velocity=f.smoothing_velocity_m_s,
            viscous_pos=f.viscous_pos_n_s_per_m,
            viscous_neg=f.viscous_neg_n_s_per_m,
        )
    if tj.leakage is not None:
        kw.update(
            leak_internal=tj.leakage.internal_m3_s_per_pa,
            leak_external=tj.leakage.external_m3_s_per_pa,
        )
    v = tj.valve
    if v is not None:
        # Null leakage → the equivalent opening a_L of every edge: with the ports blocked the
        # chambers sit near ps/2 and P→cap→T and P→rod→T each pass Cf·a_L·√(ps/2).
        cf = params.flow_gains[i]
        opening = (
            v.null_leakage_l_min
            * L_MIN
            / ((cf[0] + cf[3]) * math.sqrt(0.5 * params.supply_pressure))
        )
        kw.update(
            null_bias=v.null_bias_v,
            null_shift_per_k=v.null_shift_v_per_k,
            lap=v.lap_v,
            null_leak_opening=opening,
        )
    return JointEffects(**kw)  # type: ignore[arg-type]


def sim_plant(profile: Profile) -> tuple[PlantParams, PlantEffects]:
    """The simulator's true plant: parameters and the effects beyond the model."""
    truth = _truth(profile)
    if truth is None:
        raise ValueError(f"profile '{profile.rig.id}' has no [backend.sim.plant] section")
    params = _params(_geometry(profile), truth)
    joints = tuple(_joint_effects(tj, params, i) for i, tj in enumerate(truth.joints))
    kw: dict[str, float | bool] = {}
    if truth.fluid is not None:
        kw.update(
            air_content=truth.fluid.air_content, polytropic_index=truth.fluid.polytropic_index
        )
    th = truth.thermal
    if th is not None:
        kw.update(
            thermal=True,
            reference_c=th.reference_c,
            initial_c=th.initial_c,
            ambient_c=th.ambient_c,
            cooling_tau_s=th.cooling_time_constant_s,
            heat_capacity=th.heat_capacity_j_per_k,
            bulk_per_k=th.bulk_modulus_per_k,
            walther_a=th.walther_a,
            walther_b=th.walther_b,
            ramp_c_per_s=th.ramp_c_per_s,
            ramp_start_s=th.ramp_start_s,
            ramp_end_s=th.ramp_start_s + th.ramp_duration_s,
        )
    return params, PlantEffects(joints, **kw)  # type: ignore[arg-type]
