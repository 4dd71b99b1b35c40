"""The Lin / dead-volume / leakage / null-offset model family (estimator.models_lin) against the
simulator's own equations (controller.plant.dynamics.derivative_fx with effects on)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from controller.plant.dynamics import P_ATM, cylinder, derivative_fx
from controller.plant.oil import OilLaw
from controller.plant.params import JointEffects, PlantEffects
from daq.profile import load_profile
from daq.profile.plant import plant_params
from estimator.models import Sample, evaluate, load_models
from estimator.models_lin import (
    POLYTROPIC_INDEX,
    SMOOTH_SIGN_M_S,
    STRIBECK_M_S,
    lin_models,
    lin_plant,
    null_shift,
    valve_coefficients,
    valve_shape,
)

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
