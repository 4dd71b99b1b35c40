"""`controller.hydraulic_linear.linearise` against independent computations of the same
quantities: the reflected mass and gravity stiffness against the plant model's inverse
dynamics (M_jj = ∂τ_j/∂q̈_j, k = ∂τ_j/∂q_j), the held load against the simulator's held
pressures, and the steady velocity gain against the flow model's steady spool."""

from __future__ import annotations

import numpy as np
import pytest

from controller import hydraulic_linear as hl
from controller.feedforward import PlantModel
from controller.runner import HoldRunner
from daq.profile.plant import plant_params
from tests.controller.simloop import SimLoop, gains_limits, profile

POSES = {"sim-2dof": ([40.0, 30.0], [25.0, 55.0]), "sim-1dof": ([40.0], [25.0])}


def _tau(m: PlantModel, q: np.ndarray, qdd: list[float]) -> list[float]:
    out = [0.0] * m.n
    m.inverse_dynamics(q, [0.0] * m.n, qdd, out)
    return out


@pytest.mark.parametrize("name", sorted(POSES))
def test_reflected_mass_and_gravity_stiffness_are_the_inverse_dynamics(name: str) -> None:
    params = plant_params(profile(name))
    m = PlantModel(params)
    for pose in POSES[name]:
        q = np.radians(pose)
        for j in range(m.n):
            lin = hl.linearise(params, j, q)
            unit = [0.0] * m.n
            unit[j] = 1.0
            mjj = _tau(m, q, unit)[j] - _tau(m, q, [0.0] * m.n)[j]
            h = 1e-6
            dq = np.zeros(m.n)
            dq[j] = h
            k = (_tau(m, q + dq, [0.0] * m.n)[j] - _tau(m, q - dq, [0.0] * m.n)[j]) / (2 * h)
            assert lin.m * lin.r**2 == pytest.approx(mjj, rel=1e-9), (pose, j)
            assert lin.k_g * lin.r**2 == pytest.approx(k, rel=1e-6), (pose, j)


@pytest.mark.parametrize("name", sorted(POSES))
def test_the_held_load_is_the_simulators(name: str) -> None:
    """A⁺p⁺ − A⁻p⁻ at the operating point against the simulated rig holding the same pose
    (the common pressure level is not set by any flow, so only the load is compared)."""
    p = profile(name)
    gains, limits = gains_limits(p)
    loop = SimLoop(p)
    loop.run(HoldRunner(gains, limits, p.period), 4.0)
    q = np.array(loop.fb.q, dtype=float)
    for j in range(len(q)):
        lin = hl.linearise(plant_params(p), j, q)
        held = lin.ac * loop.fb.p_cap[j] - lin.ar * loop.fb.p_rod[j]
        assert lin.ac * lin.p_cap - lin.ar * lin.p_rod == pytest.approx(held, rel=0.03), j


@pytest.mark.parametrize("name", sorted(POSES))
def test_the_velocity_gain_is_the_flow_models_at_the_operating_point(name: str) -> None:
    """Per spool direction the steady spool for a small joint speed (`spool_steady`, the flow
    equations of DESIGN §1.2) gives a velocity gain; the linear model's, the mean of the two
    sides at the operating pressures, lies within 6 % of their mean."""
    params = plant_params(profile(name))
    m = PlantModel(params)
    q = np.radians(POSES[name][0])
    for j in range(m.n):
        lin = hl.linearise(params, j, q)
        _, r = m.cylinder(j, float(q[j]))
        force = lin.ac * lin.p_cap - lin.ar * lin.p_rod
        u0 = m.spool_steady(j, force, 0.0)
        gains = [d / ((m.spool_steady(j, force, r * d) - u0) / m.kv[j]) for d in (1e-3, -1e-3)]
        assert lin.velocity_gain == pytest.approx(np.mean(gains), rel=0.06), (j, gains)


def test_chamber_volumes_follow_the_piston() -> None:
    """V⁺ = V₀ + (L/2 + s)A⁺ and V⁻ = V₀ + (L/2 − s)A⁻: between two poses the cap chamber
    gains what the rod chamber loses, in proportion to the areas."""
    params = plant_params(profile("sim-2dof"))
    m = PlantModel(params)
    for j in range(m.n):
        a, b = (np.radians(pose) for pose in POSES["sim-2dof"])
        la, lb = hl.linearise(params, j, a), hl.linearise(params, j, b)
        ds = m.cylinder(j, float(b[j]))[0] - m.cylinder(j, float(a[j]))[0]
        assert abs(ds) > 1e-3
        assert lb.vc - la.vc == pytest.approx(la.ac * ds, rel=1e-9)
        assert lb.vr - la.vr == pytest.approx(-la.ar * ds, rel=1e-9)


@pytest.mark.parametrize("name", sorted(POSES))
def test_the_operating_pressures_balance_the_null_flows(name: str) -> None:
    """Each spool direction's two metering edges pass the same piston speed: c_in√Δp_in /
    (c_out√Δp_out) = A⁺/A⁻ (orifice law, DESIGN §1.2). linearise gives the mean of the two
    directions' solutions, so the geometric mean of the two ratios is A⁺/A⁻ within 3 %."""
    params = plant_params(profile(name))
    m = PlantModel(params)
    q = np.radians(POSES[name][0])
    for j in range(m.n):
        lin = hl.linearise(params, j, q)
        cf, ps, pc, pr = m.cf[j], m.ps, lin.p_cap, lin.p_rod
        extend = cf[0] * np.sqrt(ps - pc) / (cf[2] * np.sqrt(pr))
        retract = cf[3] * np.sqrt(ps - pr) / (cf[1] * np.sqrt(pc))
        assert np.sqrt(extend * retract) == pytest.approx(lin.ac / lin.ar, rel=0.03), j


def test_open_loop_mode_is_the_oil_column_on_the_mass_with_gravity_and_friction() -> None:
    """With no control (p = 0, valve held shut) the states δs, ṡ, p⁺, p⁻ obey
    m λ² + c λ + (k_h + k_g) = 0 (besides the pressures' common mode at 0): the pair's
    |λ|² is (k_h + k_g)/m and its real part −c/(2m)."""
    params = plant_params(profile("sim-2dof"))
    for j in range(2):
        lin = hl.linearise(params, j, np.radians(POSES["sim-2dof"][0]))
        poles = hl.closed_loop_poles(lin, hl.LoopGains(0.0), 1e-3)
        pair = poles[np.argmax(poles.imag)]
        k_h = lin.b * (lin.ac**2 / lin.vc + lin.ar**2 / lin.vr)
        assert abs(pair) ** 2 == pytest.approx((k_h + lin.k_g) / lin.m, rel=1e-9)
        assert pair.real == pytest.approx(-lin.c / (2 * lin.m), rel=1e-6)


def test_the_feed_forward_path_reduces_the_predicted_tracking_error() -> None:
    """q/q_ref with the ideal velocity feed-forward (1/velocity gain) is closer to 1 at low
    frequency than the feedback alone (the B₁ q̇_ref path of `state_space`)."""
    params = plant_params(profile("sim-2dof"))
    lin = hl.linearise(params, 0, np.radians(POSES["sim-2dof"][0]))
    fb = hl.LoopGains(1.5)
    ff = hl.LoopGains(1.5, ff1=1.0 / lin.velocity_gain)
    f = np.array([0.2, 0.5, 1.0])
    err_fb = np.abs(1 - hl.frequency_response(lin, fb, 1e-3, f))
    err_ff = np.abs(1 - hl.frequency_response(lin, ff, 1e-3, f))
    assert np.all(err_ff < 0.5 * err_fb), (err_ff, err_fb)
