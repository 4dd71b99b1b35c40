"""The loop's scalar plant model agrees with `controller.plant`, and the valve inverse really
inverts the flow equations (DESIGN §1.2)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.feedforward import PlantModel
from controller.plant import dynamics, regressors
from controller.plant.params import PlantParams

angles = st.tuples(st.floats(0.35, 1.0), st.floats(0.0, 0.8))
rates = st.tuples(st.floats(-2, 2), st.floats(-2, 2))


@settings(max_examples=40, deadline=None)
@given(q=angles, qd=rates, qdd=rates)
def test_inverse_dynamics_matches_plant(
    params2: PlantParams, q: tuple, qd: tuple, qdd: tuple
) -> None:
    m = PlantModel(params2)
    tau = [0.0, 0.0]
    m.inverse_dynamics(q, qd, qdd, tau)
    ref = dynamics.inverse_dynamics(params2, np.array([q]), np.array([qd]), np.array([qdd]))[0]
    np.testing.assert_allclose(tau, ref, rtol=1e-10, atol=1e-9)
    g = [0.0, 0.0]
    m.gravity_friction(q, qd, g)
    expect = dynamics.inverse_dynamics(params2, np.array([q]), np.array([qd]), np.zeros((1, 2)))[0]
    # Gravity + friction is the bias torque without the Coriolis terms.
    cor = (
        dynamics.inverse_dynamics(params2, np.array([q]), np.array([qd]), np.zeros((1, 2)))[0]
        - dynamics.inverse_dynamics(params2, np.array([q]), np.zeros((1, 2)), np.zeros((1, 2)))[0]
        - params2.viscous_friction * np.array(qd)
    )
    np.testing.assert_allclose(g, expect - cor, rtol=1e-9, atol=1e-9)
    for j in range(2):
        s, r = m.cylinder(j, q[j])
        s_ref, r_ref = dynamics.cylinder(params2, np.array([q]))
        assert s == pytest.approx(s_ref[0, j]) and r == pytest.approx(r_ref[0, j])


def test_one_joint(params1: PlantParams) -> None:
    m = PlantModel(params1)
    tau = [0.0]
    m.inverse_dynamics([0.7], [0.3], [1.5], tau)
    ref = dynamics.inverse_dynamics(
        params1, np.array([[0.7]]), np.array([[0.3]]), np.array([[1.5]])
    )
    assert tau[0] == pytest.approx(ref[0, 0])


@settings(max_examples=60, deadline=None)
@given(
    sd=st.floats(-0.3, 0.3).filter(lambda x: abs(x) > 1e-4),
    force=st.floats(-2000, 3000),
    j=st.integers(0, 1),
)
def test_steady_spool_satisfies_the_flow_equations(
    params2: PlantParams, sd: float, force: float, j: int
) -> None:
    """At the closed-form spool and its steady-state pressures, the fluid regression holds
    with zero pressure rate: Φf θf = y (the regressor is the lead's, independent code)."""
    m = PlantModel(params2)
    u = m.spool_steady(j, force, sd)
    assert np.sign(u) == np.sign(sd)
    # Max speed at this spool equals the requested one (the two closed forms invert).
    ext, ret = m.max_piston_speed(j, force, abs(u))
    assert (ext if sd > 0 else ret) == pytest.approx(abs(sd), rel=1e-9)
    # Build a one-sample "trajectory" whose force is `force`: use the predicted pressures.
    ps = params2.supply_pressure
    ac, ar = params2.area_cap[j], params2.area_rod[j]
    cf = params2.flow_gains[j]
    if sd > 0:
        k = ac**3 / cf[0] ** 2 + ar**3 / cf[2] ** 2
        pc, pr = (
            ps - ac**2 * (ac * ps - force) / (cf[0] ** 2 * k),
            ar**2 * (ac * ps - force) / (cf[2] ** 2 * k),
        )
    else:
        k = ac**3 / cf[1] ** 2 + ar**3 / cf[3] ** 2
        pc, pr = (
            ac**2 * (force + ar * ps) / (cf[1] ** 2 * k),
            ps - ar**2 * (force + ar * ps) / (cf[3] ** 2 * k),
        )
    assert ac * pc - ar * pr == pytest.approx(force, abs=1e-6 * ac * ps)
    z = np.zeros((1, 2))
    S, SD, U, PC, PR = (z.copy() for _ in range(5))
    SD[0, j], U[0, j], PC[0, j], PR[0, j] = sd, u, pc, pr
    phi, y = regressors.fluid_regressor(params2, S, SD, U, PC, PR, z, z)
    np.testing.assert_allclose(phi[0] @ params2.theta_fluid(), y[0], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("direction", [1.0, -1.0])
def test_predicted_fluid_signals_are_the_steady_spool_and_pressures(
    params2: PlantParams, direction: float
) -> None:
    """`predicted_fluid_signals` (used to plan excitation) along a constant-velocity move, where
    its reversal blend is inactive: the spool is `PlantModel.spool_steady` at each sample's
    force and piston speed, and the chamber pressures balance that force."""
    from controller.excitation import predicted_fluid_signals

    t = np.linspace(0.0, 0.5, 51)
    qd = direction * np.array([0.3, 0.2])
    q = np.array([0.6, 0.4]) + np.outer(t, qd)
    qds, qdd = np.tile(qd, (len(t), 1)), np.zeros((len(t), 2))
    sig = predicted_fluid_signals(params2, t, q, qds, qdd)
    _, r = dynamics.cylinder(params2, q)
    force = dynamics.inverse_dynamics(params2, q, qds, qdd) / r
    m = PlantModel(params2)
    ac, ar = params2.area_cap, params2.area_rod
    for k in (0, 25, 50):
        for j in (0, 1):
            sd = r[k, j] * qd[j]
            assert sig["sd"][k, j] == pytest.approx(sd, rel=1e-12)
            assert np.sign(sd) == direction * np.sign(r[k, j])
            assert sig["u"][k, j] == pytest.approx(m.spool_steady(j, force[k, j], sd), rel=1e-9)
            balance = ac[j] * sig["p_cap"][k, j] - ar[j] * sig["p_rod"][k, j]
            assert balance == pytest.approx(force[k, j], abs=1e-6 * ac[j] * params2.supply_pressure)


def test_measured_spool_matches_steady_spool_at_steady_pressures(params2: PlantParams) -> None:
    m = PlantModel(params2)
    force, sd = 800.0, 0.05
    u_ss = m.spool_steady(0, force, sd)
    ps, ac, ar, cf = (
        params2.supply_pressure,
        params2.area_cap[0],
        params2.area_rod[0],
        params2.flow_gains[0],
    )
    k = ac**3 / cf[0] ** 2 + ar**3 / cf[2] ** 2
    pc = ps - ac**2 * (ac * ps - force) / (cf[0] ** 2 * k)
    pr = ar**2 * (ac * ps - force) / (cf[2] ** 2 * k)
    assert m.spool_measured(0, 0.0, sd, 0.0, 0.0, pc, pr) == pytest.approx(u_ss, rel=1e-9)


def test_rejects_three_joints(params2: PlantParams) -> None:
    class Fake:
        n = 3

    with pytest.raises(ValueError, match="1 or 2 joints"):
        PlantModel(Fake())
