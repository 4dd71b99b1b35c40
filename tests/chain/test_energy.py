"""The passive excavator (valves closed, no friction) conserves its energy: kinetic
½ q̇ᵀM q̇ (minor links included), potential of every body (numpy forward kinematics, not
the Newton–Euler code) and the oil's compression energy in the sealed chambers."""

from __future__ import annotations

import numpy as np

from controller.plant.chain.kinematics import potential_energy
from controller.plant.chain.model import Motor
from controller.plant.chain.plant import ChainPlant, equilibrium_state
from controller.plant.chain.profile import ChainProfile
from controller.plant.params import JointEffects, PlantEffects


def chamber_energy(p0: float, v0: float, v: float, bulk: float) -> float:
    """Work stored in a sealed chamber compressed from V0 to V: with ṗ = −b V̇/V the pressure
    is p(V) = p0 − b ln(V/V0), and U = −∫ p dV."""
    return -(p0 * (v - v0) - bulk * (v * np.log(v / v0) - (v - v0)))


def motor_chamber_energy(p0: float, p: float, v0: float, bulk: float) -> float:
    """A motor's chambers keep their volume V0 while it displaces oil: ṗ = −b/V0 · D N q̇,
    so U = ∫ p V0 dp / b = V0 (p² − p0²) / (2b)."""
    return v0 * (p * p - p0 * p0) / (2.0 * bulk)


def total_energy(plant: ChainPlant, x: np.ndarray, x0: np.ndarray, v0: np.ndarray) -> float:
    n = plant.n
    q, qd = x[:n], x[n : 2 * n]
    kinetic = 0.5 * qd @ plant.mass_matrix(q) @ qd
    vol = plant.chamber_volumes(q)
    bulk = plant.chain.bulk_modulus
    fluid = 0.0
    for i, joint in enumerate(plant.chain.joints):
        for side in (0, 1):
            p0, p = x0[(2 + side) * n + i], x[(2 + side) * n + i]
            if isinstance(joint.drive, Motor):
                fluid += motor_chamber_energy(p0, p, v0[i, side], bulk)
            else:
                fluid += chamber_energy(p0, v0[i, side], vol[i, side], bulk)
    return float(kinetic + potential_energy(plant.chain, q) + fluid)


def test_passive_arm_conserves_energy_over_ten_seconds(excavator: ChainProfile) -> None:
    plant = ChainPlant(excavator.chain)
    n = plant.n
    x = equilibrium_state(plant, excavator.home, 5.0e6)
    x[n : 2 * n] = [0.03, -0.04, 0.15, -0.3]  # rad/s: every joint swings on its oil springs
    x0 = x.copy()
    v0 = plant.chamber_volumes(x0[:n])
    e0 = total_energy(plant, x, x0, v0)
    closed = np.zeros(n)
    energies, kinetic = [], []
    for _ in range(100):  # 10 s in 0.1 s blocks of 1000 RK4 steps
        plant.integrate(x, closed, 0.1, 1000, constrain=False)
        energies.append(total_energy(plant, x, x0, v0))
        kinetic.append(0.5 * x[n : 2 * n] @ plant.mass_matrix(x[:n]) @ x[n : 2 * n])
        # The sealed chambers never reach the relief or cavitation bounds (no loss there).
        assert np.all(x[2 * n : 4 * n] > 0.0)
        assert np.all(x[2 * n : 4 * n] < plant.chain.relief_ratio * plant.chain.supply_pressure)
    drift = np.max(np.abs(np.array(energies) - e0))
    # Relative to the energy that sloshes between kinetic, potential and fluid.
    print(f"energy drift {drift:.3g} J, {drift / max(kinetic):.3g} of the peak kinetic energy")
    assert drift / max(kinetic) < 1e-6, drift / max(kinetic)
    # The arm moved: energy really was exchanged.
    assert max(kinetic) > 50.0
    assert min(kinetic) < 0.5 * max(kinetic)


def test_actuator_friction_only_dissipates(excavator: ChainProfile) -> None:
    """The 2-DOF plant's effects act per actuator on the chain: with viscous and Coulomb
    friction on every jack and on the swing motor's shaft, the sealed arm's energy only falls."""
    fx = PlantEffects(
        tuple(
            JointEffects(coulomb_pos=200.0, coulomb_neg=200.0, viscous_pos=2e4, viscous_neg=2e4)
            for _ in excavator.chain.joints
        )
    )
    plant = ChainPlant(excavator.chain, fx)
    n = plant.n
    x = equilibrium_state(plant, excavator.home, 5.0e6)
    x[n : 2 * n] = [0.03, -0.04, 0.15, -0.3]
    x0 = x.copy()
    v0 = plant.chamber_volumes(x0[:n])
    energies = [total_energy(plant, x, x0, v0)]
    for _ in range(40):
        plant.integrate(x, np.zeros(n), 0.05, 500, constrain=False)
        energies.append(total_energy(plant, x, x0, v0))
    steps = np.diff(energies)
    assert np.all(steps < 1e-6), steps.max()
    assert energies[0] - energies[-1] > 0.5 * 60.0  # most of the ≈ 60 J of motion is gone
