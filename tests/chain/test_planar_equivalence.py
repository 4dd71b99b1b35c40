"""Today's 1- and 2-DOF plant expressed as a chain gives the same numbers: mass matrix,
gravity, the full state derivative (nominal and with every effect of the realistic profile)
and an integrated trajectory — so the later switch-over can prove 'same numbers'."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controller.plant import dynamics as D
from controller.plant.chain.planar import chain_from_planar
from controller.plant.chain.plant import ChainPlant
from daq.profile.loader import load_profile
from daq.profile.plant import sim_plant

PROFILES = Path(__file__).resolve().parents[2] / "hw_profiles"
TOL = 1e-10


def _plant(name: str):  # type: ignore[no-untyped-def]
    return sim_plant(load_profile(PROFILES / name))


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _states(params, rng, k=40):  # type: ignore[no-untyped-def]
    n = params.n
    for _ in range(k):
        q = rng.uniform(0.0, 0.8, n)
        x = D.equilibrium_state(params, q)
        x[n : 2 * n] = rng.normal(0.0, 0.5, n)
        x[2 * n : 4 * n] += rng.normal(0.0, 5e5, 2 * n)
        x[4 * n : 5 * n] = rng.uniform(-1.2, 1.2, n)
        yield x, rng.uniform(-5.0, 5.0, n)


@pytest.mark.parametrize("name", ["sim-1dof.toml", "sim-2dof.toml"])
def test_mass_matrix_and_gravity_match(name: str) -> None:
    params, _ = _plant(name)
    plant = ChainPlant(chain_from_planar(params))
    rng = np.random.default_rng(1)
    for _ in range(50):
        q = rng.uniform(-1.0, 1.5, params.n)
        qd = rng.normal(0.0, 1.0, params.n)
        qdd = rng.normal(0.0, 3.0, params.n)
        # The 2-DOF plant's M and g from its closed form, column by column.
        m_ref = np.column_stack(
            [
                D.inverse_dynamics(params, q, np.zeros_like(q), e) - D.gravity_torque(params, q)
                for e in np.eye(params.n)
            ]
        )
        assert _rel(plant.mass_matrix(q), m_ref) < TOL
        assert _rel(plant.gravity_torque(q), D.gravity_torque(params, q)) < TOL
        tau_ref = D.inverse_dynamics(params, q, qd, qdd) - params.viscous_friction * qd
        assert _rel(plant.inverse_dynamics(q, qd, qdd), tau_ref) < TOL


@pytest.mark.parametrize("name", ["sim-1dof.toml", "sim-2dof.toml", "sim-2dof-realistic.toml"])
def test_state_derivative_matches(name: str) -> None:
    params, effects = _plant(name)
    plant = ChainPlant(chain_from_planar(params), effects)
    e = effects.pack(params)
    rng = np.random.default_rng(2)
    for x, v in _states(params, rng):
        if x.shape[0] == 5 * params.n and effects.thermal:
            x = np.append(x, 45.0)
        ref = np.empty_like(x)
        D.derivative_fx(x, v, params.pack(), e, ref)
        got = plant.derivative(x, v)
        # Each component against its own scale (pressure rates ~1e9, accelerations ~10).
        for lo, hi in ((0, params.n), (params.n, 2 * params.n), (2 * params.n, 4 * params.n)):
            assert _rel(got[lo:hi], ref[lo:hi]) < TOL, (name, lo)
        np.testing.assert_array_equal(got[4 * params.n :], ref[4 * params.n :])


def test_trajectory_matches_over_one_second() -> None:
    params, effects = _plant("sim-2dof.toml")
    plant = ChainPlant(chain_from_planar(params), effects)
    x0 = D.equilibrium_state(params, np.array([0.7, 0.5]))
    x_ref, x_got = x0.copy(), x0.copy()
    work = np.empty((5, len(x0)))
    t = np.arange(1000) * 1e-3
    for k, tk in enumerate(t):
        v = np.array([0.4 * np.sin(2 * np.pi * 1.3 * tk), -0.3 * np.sin(2 * np.pi * 0.7 * tk)])
        D.integrate(x_ref, v, params.pack(), 1e-3, 4, work)
        plant.integrate(x_got, v, 1e-3, 4)
        if k % 100 == 0:
            assert np.max(np.abs(x_got[:2] - x_ref[:2])) < 1e-9
    assert np.max(np.abs(x_got[:2] - x_ref[:2])) < 1e-9
    assert _rel(x_got[4:8], x_ref[4:8]) < 1e-9
    # The arm really moved (else matching would prove little).
    assert np.max(np.abs(x_ref[:2] - x0[:2])) > 1e-2
