"""The profile's `[plant]` section as the physics' `PlantParams`."""

from __future__ import annotations

import math

import numpy as np

from controller.plant.params import PlantParams
from daq.profile.schema import Profile


def plant_params(profile: Profile) -> PlantParams:
    """Known geometry and nominal (on the simulator: true) parameters of the rig."""
    plant = profile.plant
    if plant is None:
        raise ValueError(f"profile '{profile.rig.id}' has no [plant] section")
    js = plant.joints

    def col(attr: str) -> np.ndarray:
        return np.array([float(getattr(j, attr)) for j in js])

    return PlantParams(
        n=len(js),
        gravity=plant.gravity,
        supply_pressure=plant.supply_pressure_pa,
        bulk_modulus=plant.bulk_modulus_pa,
        coupling=plant.coupling,
        inertia=col("inertia"),
        viscous_friction=col("viscous_friction"),
        gravity_moment=col("gravity_moment"),
        area_cap=col("area_cap"),
        area_rod=col("area_rod"),
        dead_volume=col("dead_volume"),
        stroke=col("stroke"),
        pin_a=col("pin_a"),
        pin_b=col("pin_b"),
        closed_length=col("closed_length"),
        theta0=np.array([math.radians(j.theta0_deg) for j in js]),
        flow_gains=np.array([list(j.flow_gains) for j in js], dtype=float),
        valve_gain=col("valve_gain"),
        valve_tau=col("valve_tau_s"),
        spool_max=col("spool_max"),
    )
