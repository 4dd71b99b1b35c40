"""The simulated plant's guards, each against its own equation: the relief valves' and the
anti-cavitation checks' flows (`dynamics.relief_flows`) and the end stops, spool travel and
pressure guard (`dynamics._constrain`; DESIGN §1.1's inelastic stops, Sakai Sec. II-B), with
where a stop begins (`_constrain`) and which joint it holds (`_pushing_stop`) to the last bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from controller.plant import dynamics
from controller.plant.params import G_RELIEF, G_RELIEF_GAIN
from daq.profile import load_profile
from daq.profile.plant import plant_params
from tests.conftest import PROFILES


@pytest.fixture(scope="module")
def params():  # type: ignore[no-untyped-def]
    return plant_params(load_profile(PROFILES / "sim-2dof.toml"))


def test_relief_and_anti_cavitation_flows_act_only_outside_zero_to_relief(params) -> None:  # type: ignore[no-untyped-def]
    P = params.pack()
    relief, k = float(P[G_RELIEF]), float(P[G_RELIEF_GAIN])
    assert relief > 0 and k > 0
    qc, qr = 1e-4, -2e-4
    # inside [0, relief]: the valve's flows untouched
    assert dynamics.relief_flows(P, qc, qr, 0.5 * relief, relief) == (qc, qr)
    # above relief: the relief valve passes k·(p − relief) out of that chamber
    c, r = dynamics.relief_flows(P, qc, qr, relief + 2e5, 0.5 * relief)
    assert c == pytest.approx(qc - k * 2e5) and r == qr
    c, r = dynamics.relief_flows(P, qc, qr, 0.5 * relief, relief + 3e5)
    assert c == qc and r == pytest.approx(qr - k * 3e5)
    # below zero gauge: the check valve feeds k·|p| in
    c, r = dynamics.relief_flows(P, qc, qr, -1e5, -4e5)
    assert c == pytest.approx(qc + k * 1e5) and r == pytest.approx(qr + k * 4e5)


def test_the_guard_puts_a_piston_back_on_its_stop_and_bounds_pressures_and_spool(params) -> None:  # type: ignore[no-untyped-def]
    P = params.pack()
    n = params.n
    half = 0.5 * params.stroke
    pmax = float(P[G_RELIEF]) * 1.1 / 1.05
    q_ext = np.array([dynamics.joint_angle(P, i, float(half[i]) + 0.01) for i in range(n)])
    q_ret = np.array([dynamics.joint_angle(P, i, -float(half[i]) - 0.01) for i in range(n)])
    for q, sign in ((q_ext, 1.0), (q_ret, -1.0)):
        x = np.zeros(5 * n)
        x[:n] = q
        s0, r = zip(*(dynamics.piston(P, i, q[i]) for i in range(n)), strict=True)
        x[n : 2 * n] = [sign * 0.5 / ri for ri in r]  # moving further into the stop
        x[2 * n : 3 * n] = [2.0 * pmax, -1e5]
        x[3 * n : 4 * n] = [-3e5, 0.5 * pmax]
        x[4 * n :] = [5.0, -5.0]
        dynamics._constrain(x, P)
        for i in range(n):
            s, _ = dynamics.piston(P, i, x[i])
            assert s == pytest.approx(sign * half[i], abs=1e-9), (i, s0[i])
            assert x[n + i] == 0.0  # the velocity into the stop is lost
        np.testing.assert_allclose(x[2 * n : 3 * n], [pmax, 0.0])
        np.testing.assert_allclose(x[3 * n : 4 * n], [0.0, 0.5 * pmax])
        np.testing.assert_allclose(x[4 * n :], [params.spool_max[0], -params.spool_max[1]])
    # moving away from the stop it sits beyond: put back, the velocity kept
    for q, sign in ((q_ext, 1.0), (q_ret, -1.0)):
        x = np.zeros(5 * n)
        x[:n] = q
        r = [dynamics.piston(P, i, q[i])[1] for i in range(n)]
        x[n : 2 * n] = [-sign * 0.5 / ri for ri in r]
        dynamics._constrain(x, P)
        np.testing.assert_allclose(x[n : 2 * n], [-sign * 0.5 / ri for ri in r])


def test_a_piston_exactly_on_its_stop_is_left_alone_one_bit_beyond_is_put_back(params) -> None:  # type: ignore[no-untyped-def]
    """The guard corrects an overshoot only: the closed stroke [−L/2, L/2] is allowed, its ends
    included (as a value exactly at a soft limit is, `controller.checks`). A piston exactly on
    its stop keeps its state, even its velocity into the stop (the next step's overshoot is put
    back and loses it); the next representable position beyond is put back, velocity lost.

    The profile's geometry (L = 0.075 m) has no angle whose s is L/2 in floating point (s lies
    2e-17 m off it whatever q): here stroke and closed lengths are binary fractions, so that
    L/2 is reached exactly and the boundary itself is tested."""
    exact = dataclasses.replace(
        params, stroke=np.array([0.0625, 0.0625]), closed_length=np.array([0.3125, 0.28125])
    )
    P = exact.pack()
    n = exact.n
    half = 0.5 * exact.stroke
    for sign in (1.0, -1.0):
        q_on = np.array([dynamics.joint_angle(P, i, sign * half[i]) for i in range(n)])
        r = np.array([dynamics.piston(P, i, q_on[i])[1] for i in range(n)])
        assert np.all(r > 0.0)  # s grows with q: "beyond" is q's next value in sign's direction
        assert [dynamics.piston(P, i, q_on[i])[0] for i in range(n)] == list(sign * half)
        x = dynamics.equilibrium_state(exact, q_on)
        x[n : 2 * n] = sign * 0.5 / r  # moving into the stop
        before = x.copy()
        dynamics._constrain(x, P)
        np.testing.assert_array_equal(x, before)
        # one bit beyond: the first q whose s is past L/2
        q_past = q_on.copy()
        for i in range(n):
            while sign * dynamics.piston(P, i, q_past[i])[0] <= half[i]:
                q_past[i] = np.nextafter(q_past[i], sign * np.inf)
        assert np.all(np.abs(q_past - q_on) < 1e-12)
        x[:n] = q_past
        dynamics._constrain(x, P)
        for i in range(n):
            assert dynamics.piston(P, i, x[i])[0] == sign * half[i]
        np.testing.assert_array_equal(x[n : 2 * n], 0.0)


def test_a_joint_is_held_by_its_stop_within_1e_9_of_its_stroke_and_not_beyond(params) -> None:  # type: ignore[no-untyped-def]
    """`_pushing_stop`: a joint sitting on an end stop (where `_constrain` puts it: q from
    `joint_angle(±L/2)`, whose s is L/2 to ~1e-17 m) and pushed into it is held there (its q̈
    zeroed, the other joint moving with its own row). The tolerance is 1e-9 of the stroke: a
    piston 0.5e-9·L short of the stop still sits on it, one 3e-9·L short is free however hard
    it is pushed; pulled away, a piston on the stop is free."""
    P = params.pack()
    for i in range(params.n):
        stroke = float(params.stroke[i])
        half = 0.5 * stroke
        for sign in (1.0, -1.0):
            for short, held in ((0.0, True), (0.5e-9 * stroke, True), (3e-9 * stroke, False)):
                q = dynamics.joint_angle(P, i, sign * (half - short))
                s, r = dynamics.piston(P, i, q)
                assert r > 0.0 and abs(s - sign * (half - short)) < 1e-15, (i, sign, short)
                assert dynamics._pushing_stop(P, i, q, sign * 1.0) is held, (i, sign, short)
                assert dynamics._pushing_stop(P, i, q, -sign * 1.0) is False, (i, sign, short)


@pytest.mark.parametrize("name", ["sim-1dof.toml", "sim-2dof.toml"])
def test_the_equilibrium_state_holds_the_arm_at_rest(name: str) -> None:
    """`equilibrium_state`: at rest at q with the chambers balancing gravity (DESIGN §1.1:
    r(A⁺p⁺ − A⁻p⁻) = g(q)), the arm does not accelerate and the chambers do not fill (valves
    shut at their null): a simulation started there starts still."""
    params = plant_params(load_profile(PROFILES / name))
    n = params.n
    q = np.radians([35.0, 25.0][:n])
    x = dynamics.equilibrium_state(params, q)
    np.testing.assert_array_equal(x[:n], q)
    assert np.all(x[2 * n : 4 * n] > 0.0)
    dx = dynamics.state_derivative(params, x, np.zeros(n))
    tau_scale = np.abs(dynamics.gravity_torque(params, q[None, :])[0]).max()
    m11 = float(dynamics.mech_terms(params.pack(), q[0], q[1] if n > 1 else 0.0, 0.0, 0.0)[0])
    assert np.abs(dx[n : 2 * n]).max() * m11 < 1e-9 * tau_scale  # no net torque
    # a different rod pressure moves the cap pressure by the area ratio
    y = dynamics.equilibrium_state(params, q, p_rod=2.0e6)
    np.testing.assert_allclose(
        y[2 * n : 3 * n] - x[2 * n : 3 * n],
        params.area_rod / params.area_cap * (2.0e6 - x[3 * n : 4 * n]),
    )


def test_joint_from_piston_inverts_cylinder_on_every_joint(params) -> None:  # type: ignore[no-untyped-def]
    """`joint_from_piston` is `cylinder`'s inverse (DESIGN §1.1's law of cosines) over each
    joint's stroke, row by row and joint by joint."""
    q = np.radians(np.array([[30.0, 20.0], [45.0, 40.0], [50.0, 50.0]]))
    s, r = dynamics.cylinder(params, q)
    assert np.all(np.abs(s) < 0.5 * params.stroke) and np.all(r > 0)
    np.testing.assert_allclose(dynamics.joint_from_piston(params, s), q, atol=1e-12)


def test_torque_from_pressures_balances_the_equilibrium(params) -> None:  # type: ignore[no-untyped-def]
    """τ = r(q)(A⁺p⁺ − A⁻p⁻): at the equilibrium state the chambers' torque is gravity's."""
    q = np.radians([35.0, 25.0])
    x = dynamics.equilibrium_state(params, q)
    n = params.n
    tau = dynamics.torque_from_pressures(params, q, x[2 * n : 3 * n], x[3 * n : 4 * n])
    np.testing.assert_allclose(tau, dynamics.gravity_torque(params, q[None, :])[0], rtol=1e-12)
    _, r = dynamics.cylinder(params, q)
    np.testing.assert_allclose(
        dynamics.torque_from_pressures(params, q, np.zeros(n), np.full(n, 1e6)),
        -r * params.area_rod * 1e6,
    )


def test_a_state_without_the_oil_temperature_is_neither_read_nor_written_past_its_end() -> None:
    """The thermal state x[5n] exists only when the state is that long: a 5n state (the model's
    own, without effects' temperature) gives the reference temperature and writes nothing
    past dx's end, even with the effects and the thermal model on. (The arrays are views into
    larger buffers whose next element is a sentinel.)"""
    from daq.profile.plant import sim_plant

    params, effects = sim_plant(load_profile(PROFILES / "sim-2dof-realistic.toml"))
    P, E = params.pack(), effects.pack(params)
    assert E[dynamics.E_ON] > 0.5 and E[dynamics.E_THERMAL] > 0.5
    n = params.n
    xb = np.zeros(5 * n + 1)
    xb[:n] = np.radians([35.0, 25.0])
    xb[2 * n : 4 * n] = 3e6
    xb[5 * n] = 80.0  # not part of x: a temperature it must not read
    x = xb[: 5 * n]
    temp, visc, bulk = dynamics.oil_coefficients(x, P, E)
    assert temp == E[dynamics.E_T_REF] and visc == 1.0 and bulk == P[dynamics.G_BULK]
    dxb = np.full(5 * n + 1, 123.0)
    dynamics.derivative_fx(x, np.zeros(n), P, E, dxb[: 5 * n])
    assert dxb[5 * n] == 123.0


def test_a_spool_on_its_stop_leaves_it_when_the_command_turns(params) -> None:  # type: ignore[no-untyped-def]
    """τ_v u̇ = k_v v − u, held at ±u_max only while pushed outward (DESIGN §1.2): a spool on
    either stop with the command turned back moves off it at once; pushed on, it stays."""
    n = params.n
    umax = float(params.spool_max[0])
    for side in (1.0, -1.0):
        x = dynamics.equilibrium_state(params, np.radians([35.0, 25.0]))
        x[4 * n :] = side * umax
        back = dynamics.state_derivative(params, x, np.full(n, -side * 1.0))
        on = dynamics.state_derivative(params, x, np.full(n, side * 10.0))
        assert np.all(side * back[4 * n :] < 0.0), (side, back[4 * n :])
        np.testing.assert_array_equal(on[4 * n :], 0.0)


def test_the_oil_temperature_moves_only_with_the_thermal_model_on() -> None:
    """With the effects on and the thermal model off (`E_THERMAL` 0), the state's temperature
    slot is the operating temperature the effects are evaluated at: it must not drift. With
    the thermal model on, the valves' losses and the cooling move it."""
    import dataclasses

    from daq.profile.plant import sim_plant

    params, effects = sim_plant(load_profile(PROFILES / "sim-2dof-realistic.toml"))
    n = params.n
    P = params.pack()
    moved = {}
    for thermal in (False, True):
        E = dataclasses.replace(effects, thermal=thermal).pack(params)
        x = np.zeros(5 * n + 1)
        x[:n] = np.radians([40.0, 30.0])
        x[2 * n : 4 * n] = 5e6
        x[5 * n] = 55.0  # away from the reference and the ambient temperature
        work = np.zeros((5, x.shape[0]))
        volts = np.array([2.0, -2.0])  # flow through the valves: losses that heat the oil
        for _ in range(500):
            dynamics.integrate_fx(x, volts, P, E, 1e-3, 4, work)
        assert np.all(np.isfinite(x))
        moved[thermal] = x[5 * n] - 55.0
    assert moved[False] == 0.0
    assert abs(moved[True]) > 1e-6
