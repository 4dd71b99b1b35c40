"""The Lin / dead-volume / leakage / null-offset model family (estimator.models_lin) against the
simulator's own equations (controller.plant.dynamics.derivative_fx with effects on)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy.signal import freqz

from controller.plant.dynamics import P_ATM, cylinder, derivative_fx, joint_from_piston
from controller.plant.oil import OilLaw
from controller.plant.params import JointEffects, PlantEffects
from daq.profile import load_profile
from daq.profile.plant import plant_params
from estimator.conditioning import design_kernels
from estimator.models import Sample, evaluate, fluid_model, load_models, mechanical_model
from estimator.models_lin import (
    EDGE_SIGNS,
    EDGES,
    POLYTROPIC_INDEX,
    SMOOTH_SIGN_M_S,
    STRIBECK_M_S,
    lin_fluid_regressor,
    lin_fluid_regressor_reference,
    lin_models,
    lin_plant,
    null_shift,
    valve_coefficients,
    valve_shape,
)
from estimator.shape_search import choose_switches

ROOT = Path(__file__).resolve().parents[2]
BIAS = (0.02, -0.015)
#: Underlap on joint 1 (the realistic valve's), overlap on joint 2, and null leakage on both.
LAP = (-0.007, 0.004)
LEAK_OPENING = (0.002, 0.003)
AIR = 0.01  # 1 % entrained air, as on the realistic profile
#: Breakaway over Coulomb force (the realistic profile's ×1.3) and null shift (V/K, its 0.7 mV/K).
STICTION = 1.3
SHIFT_PER_K = 7.0e-4


def _plant(air: float = 0.0):
    params = plant_params(load_profile(ROOT / "hw_profiles" / "sim-2dof.toml"))
    # Unequal gains on each chamber's two edges (up to 17 % apart, as on the realistic
    # profile): one null offset per edge is exact whatever they are.
    cf = params.flow_gains.copy()
    cf[:, 1] *= 0.83
    cf[:, 2] *= 1.1
    params = replace(params, flow_gains=cf)
    joints = tuple(
        JointEffects(
            coulomb_pos=400.0 - 100.0 * i,
            coulomb_neg=320.0 - 70.0 * i,
            smoothing_velocity=SMOOTH_SIGN_M_S,
            stiction_pos=STICTION * (400.0 - 100.0 * i),
            stiction_neg=STICTION * (320.0 - 70.0 * i),
            stribeck_velocity=STRIBECK_M_S,
            leak_internal=2.0e-12,
            leak_external=2.0e-13 * (1 + i),
            null_bias=BIAS[i],
            lap=LAP[i],
            null_leak_opening=LEAK_OPENING[i],
            dead_volume_cap=1.2 * params.dead_volume[i],
            dead_volume_rod=1.25 * params.dead_volume[i],
        )
        for i in range(2)
    )
    if air:
        # The air column takes the nominal dead volume (module doc): the true one here.
        params = replace(params, dead_volume=np.array([1.2, 1.25]) * params.dead_volume)
        joints = tuple(replace(j, dead_volume_cap=None, dead_volume_rod=None) for j in joints)
    return params, PlantEffects(joints=joints, air_content=air, polytropic_index=POLYTROPIC_INDEX)


def _states(params, rng, N: int):
    """Random states inside the model's domain: pressures off the bounds, |u| above the null
    bias (the regressor picks the open edge by the sign of u, the valve by u + b₀)."""
    n = params.n
    ps = params.supply_pressure
    q = np.column_stack([rng.uniform(0.5, 0.9, N), rng.uniform(0.2, 0.8, N)])
    qd = rng.uniform(-0.5, 0.5, (N, n))
    pc = rng.uniform(0.1, 0.9, (N, n)) * ps
    pr = rng.uniform(0.1, 0.9, (N, n)) * ps
    u = rng.choice([-1.0, 1.0], (N, n)) * rng.uniform(0.05, 2.0, (N, n))
    return np.concatenate([q, qd, pc, pr, u], axis=1)


def _sample(params, effects, X):
    n = params.n
    P, E = params.pack(), effects.pack(params)
    D = np.empty_like(X)
    for k in range(X.shape[0]):
        derivative_fx(X[k], np.zeros(n), P, E, D[k])
    q, qd = X[:, :n], X[:, n : 2 * n]
    s, r = cylinder(params, q)
    return Sample(
        q=q,
        qd=qd,
        qdd=D[:, n : 2 * n],
        s=s,
        sd=r * qd,
        p_cap=X[:, 2 * n : 3 * n],
        pd_cap=D[:, 2 * n : 3 * n],
        p_rod=X[:, 3 * n : 4 * n],
        pd_rod=D[:, 3 * n : 4 * n],
        u=X[:, 4 * n :],
    )


def _truth(params, effects):
    mech = [*params.inertia, params.coupling, *params.gravity_moment]
    fluid = [1.0 / params.bulk_modulus]
    for i, j in enumerate(effects.joints):
        fv = params.viscous_friction[i]
        mech += [fv, fv, j.coulomb_pos, j.coulomb_neg]
        mech += [j.stiction_pos - j.coulomb_pos, j.stiction_neg - j.coulomb_neg]
        cf = params.flow_gains[i]
        v0c, v0r = j.dead_volumes(float(params.dead_volume[i]))
        fluid += [*cf, v0c / params.bulk_modulus, v0r / params.bulk_modulus]
        fluid += [j.leak_internal, j.leak_external]
        q0, ql = valve_coefficients(cf, j.null_bias, j.lap, j.null_leak_opening)
        fluid += [*q0, *ql]
        if params.oil is not None:  # the null shift's Qtₑ = Cfₑ β
            fluid += [*(cf * j.null_shift_per_k)]
    return np.array(mech), np.array([*fluid, effects.air_content])


def test_regressors_match_the_simulators_equations() -> None:
    params, effects = _plant()
    x = _sample(params, effects, _states(params, np.random.default_rng(3), 400))
    mech, fluid = lin_models(params)
    for model, theta in zip((mech, fluid), _truth(params, effects), strict=True):
        Phi, y = evaluate(model, x)
        resid = np.einsum("kmp,p->km", Phi, theta) - y
        # Relative to each equation's size: only rounding remains.
        assert np.max(np.abs(resid) / (np.abs(y) + model.output_scale)) < 1e-9, model.name


def test_air_columns_carry_the_simulators_entrained_air() -> None:
    """With 1 % air the air column (α) at the truth explains the simulator's pressure
    rates to the first-order term the module doc leaves out (α r ≤ 1 %, well under it above
    0.7 MPa), and without them the equations are off by the air's whole compliance."""
    params, effects = _plant(AIR)
    x = _sample(params, effects, _states(params, np.random.default_rng(5), 400))
    fluid = lin_models(params)[1]
    theta = _truth(params, effects)[1]
    Phi, y = evaluate(fluid, x)
    resid = np.einsum("kmp,p->km", Phi, theta) - y
    bare = theta.copy()
    bare[fluid.names.index("air")] = 0.0
    resid_bare = np.einsum("kmp,p->km", Phi, bare) - y
    # Relative to each equation's compressibility term ṗ V (1/E_l + α g) (swept and dead
    # volume, liquid and air): the first-order form leaves out a fraction α r/(1 + α r) of it,
    # r = (p_atm/p_abs)^(1/n).
    rate = [k for k, nm in enumerate(fluid.names) if nm in {"1/b", "air"} or nm.startswith("V0")]
    size = np.abs(np.einsum("kmp,p->km", Phi[:, :, rate], theta[rate]))
    p = np.stack([x.p_cap[:, 0], x.p_rod[:, 0], x.p_cap[:, 1], x.p_rod[:, 1]], axis=1)
    r = (P_ATM / (P_ATM + p)) ** (1.0 / POLYTROPIC_INDEX)
    assert np.all(np.abs(resid) <= 1.001 * AIR * r * size + 1e-9 * fluid.output_scale)
    assert np.median(np.abs(resid_bare) / size) > 10 * np.median(np.abs(resid) / size)


def test_each_new_term_is_needed() -> None:
    """Leaving any new parameter at zero breaks the equations: each column carries its effect."""
    params, effects = _plant(AIR)
    x = _sample(params, effects, _states(params, np.random.default_rng(4), 200))
    for model, theta in zip(lin_models(params), _truth(params, effects), strict=True):
        Phi, y = evaluate(model, x)
        for k, name in enumerate(model.names):
            if name[:2] in {"M1", "M2", "R1", "W1", "W2"}:
                continue
            t = theta.copy()
            t[k] = 0.0
            resid = np.einsum("kmp,p->km", Phi, t) - y
            assert np.max(np.abs(resid) / model.output_scale) > 1e-4, name


def test_coulomb_columns_follow_the_piston_direction() -> None:
    """Fc⁺ acts only while the piston extends, Fc⁻ only while it retracts; the smooth sign
    reaches ±1 within a few v_ε."""
    params, _ = _plant()
    mech = lin_models(params)[0]
    q = np.full((3, 2), 0.6)
    qd = np.array([[0.3, 0.3], [-0.3, -0.3], [0.0, 0.0]])
    _, r = cylinder(params, q)
    Phi, _ = evaluate(mech, _sample_kin(params, q, qd))
    names = list(mech.names)
    for i in (1, 2):
        cp, cm = names.index(f"Fc+{i}"), names.index(f"Fc-{i}")
        sd = r[:, i - 1] * qd[:, i - 1]
        sgn = r[0, i - 1] * np.tanh(abs(sd[0]) / SMOOTH_SIGN_M_S)
        assert abs(sgn) > 0.99 * abs(r[0, i - 1])  # saturated at this speed
        ext, ret = (0, 1) if sd[0] > 0 else (1, 0)
        assert Phi[ext, i - 1, cp] == pytest.approx(sgn, rel=1e-9)
        assert Phi[ret, i - 1, cm] == pytest.approx(-sgn, rel=1e-9)
        assert Phi[ext, i - 1, cm] == 0.0 and Phi[ret, i - 1, cp] == 0.0
        assert Phi[2, i - 1, cp] == 0.0 and Phi[2, i - 1, cm] == 0.0


def test_the_mechanical_models_online_filter_is_flat_where_the_arm_moves() -> None:
    """Lin's friction is evaluated on the conditioned velocity; a causal FIR that bends the
    motion's band biases it (models_lin.LIN_MECH_TAPS). The low-pass keeps its 20 Hz corner
    and stop band, and passes 0–15 Hz within 1 %, also on a model remade by the band search."""
    params, _ = _plant()
    mech = lin_models(params)[0]
    assert mech.shape is not None
    for model in (mech, mech.shape.make(2 * SMOOTH_SIGN_M_S)):
        f, h = freqz(design_kernels(1000.0, model.cutoff_hz, model.taps)[0], worN=8192, fs=1000.0)
        gain = np.abs(h)
        assert np.all(np.abs(gain[f <= 15.0] - 1.0) < 0.01), gain[f <= 15.0].min()
        assert gain[np.argmin(np.abs(f - model.cutoff_hz))] == pytest.approx(0.5, abs=0.02)
        assert np.all(gain[f >= 2.0 * model.cutoff_hz] < 0.01)


def test_mechanical_rows_are_weighted_by_each_joints_speed() -> None:
    """The mechanical model names, per joint equation, the columns whose |Φ| sum is that
    joint's speed (estimator.wls.row_sigma): they grow with the joint's own speed only, and a
    model remade by the band search keeps them."""
    params, _ = _plant()
    mech = lin_models(params)[0]
    assert mech.speed_params == (("Fv+1", "Fv-1"), ("Fv+2", "Fv-2"))
    names = list(mech.names)
    q = np.full((3, 2), 0.6)
    qd = np.array([[0.1, 0.0], [-0.3, 0.2], [0.0, -0.4]])
    Phi, _ = evaluate(mech, _sample_kin(params, q, qd))
    for j, cols in enumerate(mech.speed_params):
        speed = np.abs(Phi[:, j, [names.index(c) for c in cols]]).sum(axis=1)
        assert np.all(np.argsort(speed) == np.argsort(np.abs(qd[:, j]))), speed
    assert mech.shape is not None
    assert mech.shape.make(2 * SMOOTH_SIGN_M_S).speed_params == mech.speed_params


def _sample_kin(params, q, qd) -> Sample:
    z = np.zeros_like(q)
    s, r = cylinder(params, q)
    p = np.full_like(q, 0.5 * params.supply_pressure)
    return Sample(q=q, qd=qd, qdd=z, s=s, sd=r * qd, p_cap=p, pd_cap=z, p_rod=p, pd_rod=z, u=z)


def test_profile_selects_the_family() -> None:
    prof = load_profile(ROOT / "hw_profiles" / "sim-2dof-realistic.toml")
    assert prof.estimator is not None
    models = load_models(prof.estimator.model, plant_params(prof))
    assert [m.name for m in models] == ["mechanical_lin", "fluid_lin"]
    ref = load_profile(ROOT / "hw_profiles" / "sim-2dof.toml")
    spec = None if ref.estimator is None else ref.estimator.model
    assert [m.name for m in load_models(spec, plant_params(ref))] == ["mechanical", "fluid"]


def test_validation_plant_reproduces_the_equations() -> None:
    """The estimate → shared physics mapping that validation simulates (lin_plant) gives back
    the plant the parameters came from: same state derivative (symmetric Fv), entrained air
    included."""
    params, effects = _plant(AIR)
    mech, fluid = lin_models(params)
    theta = np.concatenate(_truth(params, effects))
    plant = lin_plant(params, [*mech.names, *fluid.names], theta)
    assert plant is not None
    p2, e2 = plant
    X = _states(params, np.random.default_rng(5), 50)
    a, b = np.empty(X.shape[1]), np.empty(X.shape[1])
    for x in X:
        derivative_fx(x, np.zeros(2), params.pack(), effects.pack(params), a)
        derivative_fx(x, np.zeros(2), p2.pack(), e2.pack(p2), b)
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9 * np.max(np.abs(a)))
    assert lin_plant(params, list(params.mech_names()) + params.fluid_names(), theta[:16]) is None
    # A parameter file written before C_ext: no external leakage, the rest as estimated.
    names = [*mech.names, *fluid.names]
    keep = [k for k, nm in enumerate(names) if not nm.startswith("Cext")]
    old = lin_plant(params, [names[k] for k in keep], theta[keep])
    assert old is not None
    assert [j.leak_external for j in old[1].joints] == [0.0, 0.0]
    assert [j.leak_internal for j in old[1].joints] == [j.leak_internal for j in e2.joints]
    assert all(j.leak_external > 0.0 for j in e2.joints)


def _switches(bias, lap) -> np.ndarray:
    """The valve constants (2, n) the batch searches: null offset and lap per joint."""
    return np.array([bias, lap])


def test_the_open_edge_follows_u_plus_the_null_offset() -> None:
    """Inside the band between u = 0 and u = −b₀ the valve's other edge is open: with the
    null offsets (and laps) the model is exact there too, without them it is not; the
    estimate's Q0/Cf and QL/Cf imply them back (`valve_shape`)."""
    params, effects = _plant()
    X = _states(params, np.random.default_rng(6), 300)
    n = params.n
    bias, lap = np.array(BIAS), np.array(LAP)
    X[:, 4 * n :] = -bias * np.random.default_rng(7).uniform(0.05, 0.95, (X.shape[0], n))
    x = _sample(params, effects, X)
    theta = _truth(params, effects)[1]
    fluid = lin_models(params)[1]
    assert fluid.switches is not None
    for model, exact in ((fluid, False), (fluid.switches.make(_switches(bias, lap)), True)):
        Phi, y = evaluate(model, x)
        resid = np.max(np.abs(np.einsum("kmp,p->km", Phi, theta) - y) / model.output_scale)
        assert (resid < 1e-6) == exact, resid
    b0, d, a_l = valve_shape(dict(zip(fluid.names, theta, strict=True)), n)
    np.testing.assert_allclose(np.r_[b0, d, a_l], np.r_[bias, lap, LEAK_OPENING], rtol=1e-9)


def test_underlap_and_overlap_bands_around_null() -> None:
    """Spool positions within the lap of null: under joint 1's underlap both edges of each
    chamber pass flow, in joint 2's overlap only the null leakage does. The model with the
    laps is exact there; with the laps taken as zero (null offsets right) it is not."""
    params, effects = _plant()
    rng = np.random.default_rng(11)
    X = _states(params, rng, 400)
    n = params.n
    bias, lap = np.array(BIAS), np.array(LAP)
    # w = u + b₀ uniformly across ±1.5 |d| of null: inside and just outside each band.
    X[:, 4 * n :] = -bias + rng.uniform(-1.5, 1.5, (X.shape[0], n)) * np.abs(lap)
    x = _sample(params, effects, X)
    theta = _truth(params, effects)[1]
    sw = lin_models(params)[1].switches
    assert sw is not None
    for d, exact in ((lap, True), (np.zeros(n), False)):
        model = sw.make(_switches(bias, d))
        Phi, y = evaluate(model, x)
        resid = np.max(np.abs(np.einsum("kmp,p->km", Phi, theta) - y) / model.output_scale)
        assert (resid < 1e-6) == exact, (d, resid)


def _warm_plant():
    """The test plant with the thermal state on and a declared oil law equal to the
    simulator's (the regressor's arithmetic, not the datasheet's accuracy, is under test)."""
    params, effects = _plant()
    law = OilLaw(walther_a=9.32, walther_b=3.65, bulk_per_k=0.0058, reference_c=40.0)
    effects = replace(
        effects,
        joints=tuple(replace(j, null_shift_per_k=SHIFT_PER_K) for j in effects.joints),
        thermal=True,
        reference_c=law.reference_c,
        walther_a=law.walther_a,
        walther_b=law.walther_b,
        bulk_per_k=law.bulk_per_k,
    )
    return replace(params, oil=law), effects


def _warm_sample(params, effects, X, temp):
    """`_sample` with the oil temperature as the simulator's extra state x[5n]."""
    n = params.n
    Xt = np.column_stack([X, temp])
    P, E = params.pack(), effects.pack(params)
    D = np.empty_like(Xt)
    for k in range(Xt.shape[0]):
        derivative_fx(Xt[k], np.zeros(n), P, E, D[k])
    x = _sample(params, replace(effects, thermal=False), X)
    return replace(
        x,
        qdd=D[:, n : 2 * n],
        pd_cap=D[:, 2 * n : 3 * n],
        pd_rod=D[:, 3 * n : 4 * n],
        temp=np.repeat(temp[:, None], n, axis=1),
    )


def test_oil_law_refers_the_simulators_warm_and_cold_oil_to_40c() -> None:
    """Oil from 20 to 60 °C (viscosity ×2.8 … ×0.46, bulk modulus +12 … −11 %): with the
    measured temperature the regressors hold at the 40 °C parameters (viscous friction,
    leakage, 1/b, V0/b) to rounding; without it (the temperature unknown) they do not."""
    params, effects = _warm_plant()
    rng = np.random.default_rng(8)
    X = _states(params, rng, 400)
    x = _warm_sample(params, effects, X, rng.uniform(20.0, 60.0, X.shape[0]))
    for model, theta in zip(lin_models(params), _truth(params, effects), strict=True):
        Phi, y = evaluate(model, x)
        resid = np.abs(np.einsum("kmp,p->km", Phi, theta) - y) / (np.abs(y) + model.output_scale)
        assert np.max(resid) < 1e-9, model.name
        Phi0, y0 = evaluate(model, replace(x, temp=None))
        resid0 = np.abs(np.einsum("kmp,p->km", Phi0, theta) - y0) / (
            np.abs(y0) + model.output_scale
        )
        assert np.max(resid0) > 1e-3, model.name
        assert set(model.referred) == {
            nm
            for nm in model.names
            if nm.startswith(("Fv", "Cint", "Cext", "Q0", "Qt")) or "/b" in nm
        }


def test_stribeck_bump_at_low_piston_speed() -> None:
    """Pistons slower than a few v_s, where the simulator's friction rises from F_C to the
    breakaway F_S (Gaussian in ṡ/v_s under the same tanh): the dFs± columns at F_S − F_C
    make the model exact there; without them it is off by the bump, up to (F_S − F_C) r."""
    params, effects = _plant()
    rng = np.random.default_rng(12)
    X = _states(params, rng, 400)
    n = params.n
    _, r = cylinder(params, X[:, :n])
    # ṡ uniform over ±3 v_s: across the bump, through the zero crossing.
    X[:, n : 2 * n] = rng.uniform(-3.0, 3.0, (X.shape[0], n)) * STRIBECK_M_S / r
    x = _sample(params, effects, X)
    mech, fluid = lin_models(params)
    theta = _truth(params, effects)[0]
    Phi, y = evaluate(mech, x)
    resid = np.abs(np.einsum("kmp,p->km", Phi, theta) - y) / (np.abs(y) + mech.output_scale)
    assert np.max(resid) < 1e-9
    bare = theta.copy()
    bare[[k for k, nm in enumerate(mech.names) if nm.startswith("dFs")]] = 0.0
    missing = np.abs(np.einsum("kmp,p->km", Phi, bare) - y)
    bump = np.array([j.stiction_pos - j.coulomb_pos for j in effects.joints])
    # The largest miss is near the bump's top: most of (F_S − F_C) r.
    assert np.all(np.max(missing, axis=0) > 0.5 * bump * np.min(np.abs(r), axis=0))
    plant = lin_plant(params, [*mech.names, *fluid.names], np.concatenate(_truth(params, effects)))
    assert plant is not None
    for got, want in zip(plant[1].joints, effects.joints, strict=True):
        assert got.stiction_pos == pytest.approx(want.stiction_pos)
        assert got.stiction_neg == pytest.approx(want.stiction_neg)
        assert got.stribeck_velocity == want.stribeck_velocity


def test_null_shift_with_oil_temperature() -> None:
    """The simulator's valve meters at u + b₀ + β (T − T_ref): with the Qtₑ columns at Cfₑ β
    the fluid model is exact from 20 to 60 °C, without them it is off by the shifted null's
    flow; the estimate's Qtₑ/Cfₑ give β back. No oil law, no reference temperature: no Qtₑ."""
    params, effects = _warm_plant()
    rng = np.random.default_rng(13)
    X = _states(params, rng, 400)
    x = _warm_sample(params, effects, X, rng.uniform(20.0, 60.0, X.shape[0]))
    fluid = lin_models(params)[1]
    theta = _truth(params, effects)[1]
    Phi, y = evaluate(fluid, x)
    exact = np.max(np.abs(np.einsum("kmp,p->km", Phi, theta) - y) / fluid.output_scale)
    bare = theta.copy()
    bare[[k for k, nm in enumerate(fluid.names) if nm.startswith("Qt")]] = 0.0
    off = np.max(np.abs(np.einsum("kmp,p->km", Phi, bare) - y) / fluid.output_scale)
    assert exact < 1e-6 and off > 1e3 * max(exact, 1e-9), (exact, off)
    th = dict(zip(fluid.names, theta, strict=True))
    np.testing.assert_allclose(null_shift(th, params.n), SHIFT_PER_K, rtol=1e-9)
    plain, _ = _plant()
    assert not any(nm.startswith("Qt") for nm in lin_models(plain)[1].names)


def test_validation_plant_at_the_oil_temperature() -> None:
    """lin_plant with `oil_c` states the 40 °C estimate at that temperature: the simulator's
    state derivative of the warm plant at 28 °C."""
    params, effects = _warm_plant()
    mech, fluid = lin_models(params)
    theta = np.concatenate(_truth(params, effects))
    plant = lin_plant(params, [*mech.names, *fluid.names], theta, oil_c=28.0)
    assert plant is not None
    p2, e2 = plant
    X = _states(params, np.random.default_rng(9), 50)
    a, b = np.empty(X.shape[1] + 1), np.empty(X.shape[1])
    for x in X:
        derivative_fx(np.r_[x, 28.0], np.zeros(2), params.pack(), effects.pack(params), a)
        derivative_fx(x, np.zeros(2), p2.pack(), e2.pack(p2), b)
        np.testing.assert_allclose(b, a[:-1], rtol=1e-9, atol=1e-9 * np.max(np.abs(a)))


def test_oil_law_from_the_datasheet() -> None:
    """Walther's line through the datasheet's two viscosities gives them back, and the ratio
    the regressors use is 1 at the reference temperature; an oil that thickens as it warms
    is refused by name."""
    law = OilLaw.from_datasheet(46.0, 6.8, 0.0058)
    np.testing.assert_allclose(law.viscosity_cst(np.array([40.0, 100.0])), [46.0, 6.8], rtol=1e-12)
    assert float(law.viscosity_ratio(40.0)) == pytest.approx(1.0)
    assert 2.0 < float(law.viscosity_ratio(22.0)) < 3.0  # VG46: ×2.5 colder by 18 K
    assert float(law.bulk_ratio(50.0)) == pytest.approx(math.exp(-0.058))
    with pytest.raises(ValueError, match="must exceed"):
        OilLaw.from_datasheet(6.8, 46.0, 0.0058)


def test_a_gain_estimated_at_zero_implies_no_valve_constants() -> None:
    """An edge the run never opened can leave its gain at exactly 0: the valve constants it
    implies are 0 (no division warning, nothing infinite reaches validation)."""
    params, effects = _plant()
    mech, fluid = lin_models(params)
    theta = np.concatenate(_truth(params, effects))
    names = [*mech.names, *fluid.names]
    theta[names.index("Cf++2")] = 0.0
    th = dict(zip(names, theta, strict=True))
    b0, lap, leak = valve_shape(th, params.n)
    assert b0[1] == lap[1] == leak[1] == 0.0 and b0[0] == pytest.approx(BIAS[0])
    plant = lin_plant(params, names, theta)
    assert plant is not None and plant[1].joints[1].null_bias == 0.0


def _names_theta(params, effects):
    mech, fluid = lin_models(params)
    return [*mech.names, *fluid.names], np.concatenate(_truth(params, effects))


def _arm_at_mid_stroke(params) -> np.ndarray:
    """r = ds/dq at s = 0, by central difference of the piston's displacement."""
    q = joint_from_piston(params, np.zeros((1, params.n)))
    h = 1e-6
    return ((cylinder(params, q + h)[0] - cylinder(params, q - h)[0]) / (2 * h))[0]


def test_validation_plant_splits_unequal_viscous_terms_at_the_piston() -> None:
    """Fv⁺ ≠ Fv⁻ (lin_plant's doc): the joint keeps Fv = min(Fv⁺, Fv⁻), the excess goes to the
    piston as f_v± = (Fv± − Fv)/r² with r at mid-stroke, all × ν(T)/ν_ref at `oil_c`."""
    params, effects = _warm_plant()
    names, theta = _names_theta(params, effects)
    fv = params.viscous_friction
    fv_pos, fv_neg = np.array([1.5, 1.0]) * fv, np.array([1.0, 2.0]) * fv
    for i in range(2):
        theta[names.index(f"Fv+{i + 1}")] = fv_pos[i]
        theta[names.index(f"Fv-{i + 1}")] = fv_neg[i]
    assert params.oil is not None
    visc = float(params.oil.viscosity_ratio(28.0))
    assert visc > 1.5  # colder than 40 °C: the factor shows
    plant = lin_plant(params, names, theta, oil_c=28.0)
    assert plant is not None
    p2, e2 = plant
    r = _arm_at_mid_stroke(params)
    np.testing.assert_allclose(p2.viscous_friction, visc * fv, rtol=1e-12)
    got = [(j.viscous_pos, j.viscous_neg) for j in e2.joints]
    want = [(visc * 0.5 * fv[0] / r[0] ** 2, 0.0), (0.0, visc * fv[1] / r[1] ** 2)]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_validation_plant_applies_the_oil_law_only_with_law_and_temperature() -> None:
    """Without `oil_c` the plant is the estimate's own (the law's reference temperature);
    without a declared law an `oil_c` has nothing to refer by and changes nothing."""
    for params, effects in (_warm_plant(), _plant()):
        names, theta = _names_theta(params, effects)
        cases = [lin_plant(params, names, theta)]
        if params.oil is None:
            cases.append(lin_plant(params, names, theta, oil_c=28.0))
        for plant in cases:
            assert plant is not None
            p2, e2 = plant
            np.testing.assert_allclose(p2.viscous_friction, params.viscous_friction, rtol=1e-12)
            assert p2.bulk_modulus == pytest.approx(params.bulk_modulus, rel=1e-12)
            for got, want in zip(e2.joints, effects.joints, strict=True):
                assert got.null_bias == pytest.approx(want.null_bias, rel=1e-9)
                assert got.leak_internal == pytest.approx(want.leak_internal, rel=1e-12)


def test_validation_plant_from_a_file_without_the_stribeck_bumps() -> None:
    """A parameter file written before the dFs± has no bump (breakaway = Coulomb force); a θ
    that does not match its names is refused, not paired up to the shorter."""
    params, effects = _plant()
    names, theta = _names_theta(params, effects)
    keep = [k for k, nm in enumerate(names) if not nm.startswith("dFs")]
    old = lin_plant(params, [names[k] for k in keep], theta[keep])
    assert old is not None
    for got, want in zip(old[1].joints, effects.joints, strict=True):
        assert got.stiction_pos == got.coulomb_pos == want.coulomb_pos
        assert got.stiction_neg == got.coulomb_neg == want.coulomb_neg
    with pytest.raises(ValueError):
        lin_plant(params, names, np.r_[theta, 0.0])


def test_null_shift_of_a_joint_after_one_without() -> None:
    """β per joint: a joint whose estimate has no Qtₑ reads 0 and the next still gets its own."""
    th = {f"Cf{e}{i}": 1e-6 * (1 + k) for i in (1, 2) for k, e in enumerate(EDGES)}
    th |= {f"Qt{e}2": 5e-4 * th[f"Cf{e}2"] for e in EDGES}
    np.testing.assert_allclose(null_shift(th, 2), [0.0, 5e-4], rtol=1e-12)


def test_without_a_measured_temperature_the_null_shift_columns_are_empty() -> None:
    """An oil law but no oil temperature: T − T_ref unknown, the Qtₑ columns carry nothing
    (in the compiled regressor and its definition alike) and the rest is the model's without
    the law."""
    params, effects = _warm_plant()
    x = _sample(
        params, replace(effects, thermal=False), _states(params, np.random.default_rng(14), 50)
    )
    assert x.temp is None
    names = lin_models(params)[1].names
    qt = [k for k, nm in enumerate(names) if nm.startswith("Qt")]
    assert len(qt) == 8
    for regressor in (lin_fluid_regressor, lin_fluid_regressor_reference):
        phi, _ = regressor(params, x)
        assert np.all(phi[:, :, qt] == 0.0)
        rest = np.delete(phi, qt, axis=2)
        np.testing.assert_allclose(rest, regressor(replace(params, oil=None), x)[0], rtol=1e-15)


def test_an_edge_is_shut_exactly_at_its_opening_point() -> None:
    """o_e = [s_e (u + b₀) > d] (module doc): at s_e (u + b₀) = d the edge still passes only its
    null leakage (QL column), and just past it it is open, the same g_e in its Q0 column."""
    params, _ = _plant()
    # Joint 1 at null (b₀ = d = 0, u = 0); joint 2 at its s = +1 edges' opening point
    # u = d − b₀ = 0.25 (b₀ = −0.125, d = 0.125, all exact in binary).
    valve = np.array([0.0, -0.125, 0.0, 0.125])
    names = lin_models(params)[1].names
    pos_edges = [e for e, s in zip(EDGES, EDGE_SIGNS, strict=True) if s > 0]
    q = np.full((2, 2), 0.6)
    z = np.zeros_like(q)
    s, _ = cylinder(params, q)
    p = np.full_like(q, 0.5 * params.supply_pressure)
    u = np.array([[0.0, 0.25], [2.0**-20, 0.25 + 2.0**-20]])  # at, then just past
    x = Sample(q=q, qd=z, qdd=z, s=s, sd=z, p_cap=p, pd_cap=z, p_rod=p, pd_rod=z, u=u)
    for regressor in (lin_fluid_regressor, lin_fluid_regressor_reference):
        phi, _ = regressor(params, x, valve)
        for i in (1, 2):
            rows = slice(2 * i - 2, 2 * i)
            col = {
                nm: names.index(f"{nm}{i}")
                for nm in (f"{k}{e}" for k in ("Cf", "Q0", "QL") for e in EDGES)
            }
            for e in EDGES:
                assert np.all(phi[0, rows, col[f"Cf{e}"]] == 0.0), (regressor, i, e)
                assert np.all(phi[0, rows, col[f"Q0{e}"]] == 0.0), (regressor, i, e)
                assert np.any(phi[0, rows, col[f"QL{e}"]] != 0.0), (regressor, i, e)
            for e in pos_edges:
                np.testing.assert_array_equal(
                    phi[1, rows, col[f"Q0{e}"]], phi[0, rows, col[f"QL{e}"]]
                )
                assert np.all(phi[1, rows, col[f"QL{e}"]] == 0.0)


def test_the_switch_search_follows_each_pair_of_edges_alone() -> None:
    """The residual's valley along one pair of edges' opening point (`VALVE_DIRECTIONS`):
    a cost that resolves one opening point sharply and the other weakly pins the b₀ and d
    moves (each moves both points), so only the line that moves the weak point alone
    reaches the minimum. Joint 1's valley runs along u = d − b₀, joint 2's along u = −d − b₀;
    the search must find both valves' b₀ and d."""
    params, _ = _plant()
    sw = lin_models(params)[1].switches
    assert sw is not None
    b0, lap = np.array([0.006, -0.005]), np.array([-0.007, 0.004])
    weight_open, weight_close = np.array([1.0, 1e4]), np.array([1e4, 1.0])

    def cost(value: np.ndarray) -> np.ndarray:
        b, d = value
        e_open = (d - b - (lap - b0)) / 1e-3  # mV off the s = +1 edges' opening point
        e_close = (-d - b - (-lap - b0)) / 1e-3  # and the s = −1 edges'
        return 1.0 + weight_open * e_open**2 + weight_close * e_close**2

    got = choose_switches(sw, cost).value
    np.testing.assert_allclose(got, [b0, lap], atol=2e-4)


def test_coulomb_scale_is_a_seal_force() -> None:
    """The Coulomb and bump parameters are normalised by 5 % of the cap area's force at supply
    pressure (N, their size), the others by 1."""
    params, _ = _plant()
    mech = lin_models(params)[0]
    force = 0.05 * params.supply_pressure * max(params.area_cap)
    assert 100.0 < force < 1e5  # the size of a seal's friction force
    for nm, scale in zip(mech.names, mech.param_scale, strict=True):
        assert scale == pytest.approx(force if nm[:2] in {"Fc", "dF"} else 1.0, rel=1e-12), nm


def test_the_fluid_model_uses_the_fluid_only_rows_like_the_reference() -> None:
    """Its equations are the chambers' flow balances (`LinearModel.fluid`), the mechanical
    model's are not: the same as the reference family's."""
    params, _ = _plant()
    mech, fluid = lin_models(params)
    assert fluid.fluid and fluid_model(params).fluid
    assert not mech.fluid and not mechanical_model(params).fluid


def test_the_switch_note_prints_millivolts() -> None:
    params, _ = _plant()
    sw = lin_models(params)[1].switches
    assert sw is not None
    text = sw.show(np.array([[0.003, -0.0125], [-0.007, 0.004]]))
    assert text == "null offset b₀ [3.00, -12.50] mV, lap d [-7.00, 4.00] mV (< 0 underlap)"
