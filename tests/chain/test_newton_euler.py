"""Newton–Euler inverse dynamics (with the minor links) against independent formulations.

- slow tier: the Lagrangian of every body from sympy.physics.mechanics (tests/chain/lagrange.py)
  on random states of the four-joint excavator: torques agree to 1e-8 relative;
- fast tier: consistency with the energy it implies — gravity torques are the gradient of the
  potential energy of numpy forward kinematics, velocity terms are the Christoffel symbols of
  the mass matrix, and the mass matrix is symmetric positive definite.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from controller.plant.chain.kinematics import potential_energy
from controller.plant.chain.plant import ChainPlant
from controller.plant.chain.profile import ChainProfile


def _random_states(home: np.ndarray, k: int, seed: int):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    for _ in range(k):
        yield (
            home + rng.uniform(-0.3, 0.3, len(home)),
            rng.normal(0, 1, len(home)),
            rng.normal(0, 2, len(home)),
        )


@pytest.mark.slow
def test_torques_match_the_lagrangian_of_sympy_mechanics(excavator: ChainProfile) -> None:
    from tests.chain.lagrange import lagrange_inverse_dynamics

    plant = ChainPlant(excavator.chain)
    lagrange = lagrange_inverse_dynamics(excavator.chain)
    worst = 0.0
    for q, qd, qdd in _random_states(excavator.home, 20, 3):
        ne = plant.inverse_dynamics(q, qd, qdd)
        lg = lagrange(q, qd, qdd)
        worst = max(worst, float(np.max(np.abs(ne - lg)) / np.max(np.abs(lg))))
    print(f"Newton-Euler vs Lagrangian: worst relative difference {worst:.3g}")
    assert worst < 1e-8, worst


def test_gravity_is_the_gradient_of_the_potential_energy(excavator: ChainProfile) -> None:
    plant = ChainPlant(excavator.chain)
    h = 1e-6
    for q, _, _ in _random_states(excavator.home, 10, 4):
        energy = [
            (
                potential_energy(excavator.chain, q + h * e),
                potential_energy(excavator.chain, q - h * e),
            )
            for e in np.eye(plant.n)
        ]
        grad = np.array([(up - down) / (2 * h) for up, down in energy])
        g = plant.gravity_torque(q)
        # Central differences: error ~h² · V''' (V ~ 1e5 J); relative to the largest torque.
        assert np.max(np.abs(g - grad)) < 1e-6 * np.max(np.abs(g))


def test_velocity_terms_are_the_christoffel_symbols_of_the_mass_matrix(
    excavator: ChainProfile,
) -> None:
    plant = ChainPlant(excavator.chain)
    n, h = plant.n, 1e-6
    for q, qd, _ in _random_states(excavator.home, 10, 5):
        dm = [
            (plant.mass_matrix(q + h * e) - plant.mass_matrix(q - h * e)) / (2 * h)
            for e in np.eye(n)
        ]
        c = np.array(
            [sum(0.5 * (dm[i][k, j] + dm[j][k, i] - dm[k][i, j]) * qd[i] * qd[j]
                 for i in range(n) for j in range(n)) for k in range(n)]
        )  # fmt: skip
        ne = plant.inverse_dynamics(q, qd, np.zeros(n), gravity=False)
        assert np.max(np.abs(ne - c)) < 1e-6 * max(np.max(np.abs(c)), 1.0)
        m = plant.mass_matrix(q)
        np.testing.assert_allclose(m, m.T, rtol=0, atol=1e-9 * np.max(np.abs(m)))
        assert np.min(np.linalg.eigvalsh(m)) > 0.0


def test_minor_links_change_the_torques(excavator: ChainProfile) -> None:
    """The jacks' bodies are in the dynamics (and the reduced model drops exactly them)."""
    full = ChainPlant(excavator.chain)
    reduced = ChainPlant(excavator.chain.without_minor_links())
    for q, qd, qdd in _random_states(excavator.home, 5, 6):
        diff = full.inverse_dynamics(q, qd, qdd) - reduced.inverse_dynamics(q, qd, qdd)
        assert np.all(np.abs(diff[1:]) > 1.0)  # every jacked joint, N·m
    # With every jack body massless, the chain is its major links only.
    no_jacks = dataclasses.replace(
        excavator.chain.without_minor_links(),
        joints=tuple(
            dataclasses.replace(j, drive=None, valve=None) for j in excavator.chain.joints
        ),
    )
    q = excavator.home
    np.testing.assert_allclose(
        ChainPlant(no_jacks).gravity_torque(q), reduced.gravity_torque(q), rtol=1e-12, atol=1e-9
    )
