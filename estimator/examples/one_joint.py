"""A user-written model for the 1-DOF rig (hw_profiles/sim-1dof.toml), written from scratch
with numpy to show the interface (docs/estimator.md "Writing a model"):

    [estimator]
    model = "estimator.examples.one_joint:models"

Mechanical, 3 parameters:  r(q)(A⁺p⁺ − A⁻p⁻) = M q̈ + Fv q̇ + W g sin q
Fluid, 5 parameters:       the two chamber equations of DESIGN §2.2 for one joint.
"""

from __future__ import annotations

import numpy as np

from controller.plant.dynamics import cylinder
from controller.plant.params import PlantParams
from estimator.models import LinearModel, Sample


def models(params: PlantParams) -> list[LinearModel]:
    if params.n != 1:
        raise ValueError("the one_joint example models a one-joint rig")
    g = params.gravity
    ps = params.supply_pressure
    acap, arod = float(params.area_cap[0]), float(params.area_rod[0])
    v0, half = float(params.dead_volume[0]), 0.5 * float(params.stroke[0])

    def mech(x: Sample) -> tuple[np.ndarray, np.ndarray]:
        q = x.q[:, 0]
        Phi = np.stack([x.qdd[:, 0], x.qd[:, 0], g * np.sin(q)], axis=1)[:, None, :]
        _, r = cylinder(params, x.q)
        tau = r[:, 0] * (acap * x.p_cap[:, 0] - arod * x.p_rod[:, 0])
        return Phi, tau[:, None]

    def fluid(x: Sample) -> tuple[np.ndarray, np.ndarray]:
        u, s = x.u[:, 0], x.s[:, 0]
        pc = np.clip(x.p_cap[:, 0], 0.0, ps)
        pr = np.clip(x.p_rod[:, 0], 0.0, ps)
        pos = u > 0.0
        Phi = np.zeros((len(u), 2, 5))
        Phi[:, 0, 0] = -x.pd_cap[:, 0] * (v0 + (half + s) * acap)
        Phi[:, 0, 1] = np.where(pos, np.sqrt(ps - pc), 0.0) * u
        Phi[:, 0, 2] = np.where(pos, 0.0, np.sqrt(pc)) * u
        Phi[:, 1, 0] = -x.pd_rod[:, 0] * (v0 + (half - s) * arod)
        Phi[:, 1, 3] = -np.where(pos, np.sqrt(pr), 0.0) * u
        Phi[:, 1, 4] = -np.where(pos, 0.0, np.sqrt(ps - pr)) * u
        y = np.stack([acap * x.sd[:, 0], -arod * x.sd[:, 0]], axis=1)
        return Phi, y

    margin = 0.005 * ps
    p_hi = params.relief_ratio * ps - margin

    def fluid_holds(x: Sample) -> np.ndarray:
        # No relief-valve or anti-cavitation flow in the equations: leave those samples out.
        p = np.concatenate([x.p_cap, x.p_rod], axis=1)
        return np.all((p > margin) & (p < p_hi), axis=1)

    return [
        LinearModel(
            name="mechanical",
            names=("M", "Fv", "W"),
            # The reference physics under shorter names: validation simulates it (docs:
            # "Writing a model").
            plant_names=("M1", "Fv1", "W1"),
            n_outputs=1,
            regressor=mech,
            param_scale=np.ones(3),
            output_scale=np.array([0.5 * ps * acap * 0.1]),
            cutoff_hz=20.0,
            taps=101,
            truth=params.theta_mech(),
        ),
        LinearModel(
            name="fluid",
            names=("1/b", "Cf++", "Cf+-", "Cf-+", "Cf--"),
            plant_names=("1/b", "Cf++1", "Cf+-1", "Cf-+1", "Cf--1"),
            n_outputs=2,
            regressor=fluid,
            param_scale=np.array([1e-9, 1e-6, 1e-6, 1e-6, 1e-6]),
            output_scale=np.array([acap, arod]) * 0.01,
            cutoff_hz=40.0,
            taps=101,
            valid=fluid_holds,
            truth=params.theta_fluid(),
            fluid=True,
        ),
    ]
