"""The "real rig" model family (issue 14, item 1): Lin's friction and a fluid model with the
dead volume, piston leakage and a valve null offset. Select it per rig in the profile:

    [estimator]
    model = "estimator.models_lin:lin_models"

Both models are linear in their parameters and are what online RLS and batch identify alike
(they are ordinary `LinearModel`s). Names differ from the reference models' ("mechanical_lin",
"fluid_lin") on purpose: code that maps the reference 7 + 9 parameters into `PlantParams` by
position must not mistake these for them.

Mechanical (seed 001, Lin 1994 eq. 20, per joint i; DESIGN §2.1 otherwise unchanged):

    τ_i = … + Fv⁺_i q̇_i [ṡ_i ≥ 0] + Fv⁻_i q̇_i [ṡ_i < 0]
            + Fc⁺_i r_i σ(ṡ_i) [ṡ_i ≥ 0] + Fc⁻_i r_i σ(ṡ_i) [ṡ_i < 0]

with ṡ_i = r_i(q_i) q̇_i the piston velocity: the Coulomb forces Fc± are piston forces (N, the
unit a seal datasheet gives), the viscous terms Fv± joint coefficients (N·m·s/rad, like the
reference model's Fv). Zero-velocity region: σ(ṡ) = tanh(ṡ / v_ε) is a smooth sign, v_ε =
`SMOOTH_SIGN_M_S` (5 mm/s). Why smooth rather than dropping |ṡ| < threshold: the estimator's
equations are stacked per sample (both joints' rows at once), so a slow joint cannot drop
only its own row; an all-zero row would count as a perfectly explained equation and shrink the
noise estimate. The price: stiction/Stribeck (a bump above Fc below ~2 v_s) is not in the
model and shows as residual near reversals. The width matters: the batch chooses v_ε from the
data (`LinearModel.shape`, estimator.shape_search: least residual over `BAND_RANGE_M_S`); the
online estimator runs `SMOOTH_SIGN_M_S`.

Fluid (DESIGN §2.2 with V0 unknown; Sakai's shared 1/b kept), per joint i, cap and rod rows:

    −ṗ⁺ (L/2 + s) A⁺ · (1/b) − ṗ⁺ · (V0⁺/b) + Σ h u Cf − (p⁺ − p⁻) C_int + Σ h Q0 = A⁺ ṡ
    −ṗ⁻ (L/2 − s) A⁻ · (1/b) − ṗ⁻ · (V0⁻/b) − Σ h u Cf + (p⁺ − p⁻) C_int − Σ h Q0 = −A⁻ ṡ

so the swept-volume column (ṗ·(L/2 ± s)A, known geometry) carries 1/b and the ṗ column the
dead volume over b, V0/b, per chamber: V0 = (V0/b)/(1/b). C_int is the laminar piston leakage
(cap → rod, m³/(s·Pa)).

Entrained air (Simscape *Hydraulic Fluid*, docs/simulator.md): the chamber's compliance is
1/E(p) = [1/E_l + α r/(n p_abs)]/(1 + α r), r = (p_atm/p_abs)^(1/n). To first order in α
(α r ≤ α: the 1 + α r is 1 within 1 % for α ≤ 1 %, within 0.1 % above 2 MPa) it is
1/E_l + α g(p), g(p) = r/(n p_abs): linear in α once n is fixed. So each chamber's ṗ·V/E
splits into the 1/b and V0/b terms above plus −ṗ (V0 + (L/2 ± s) A) g(p) · α, α shared by
every chamber like 1/b, with V0 the nominal dead volume (`[plant] dead_volume`): the true
one is unknown, and α V0 as a coefficient of its own per chamber made 1/b, V0/b and α
collinear on the standard experiment (every one flagged, bench/identification_error_budget).
n is fixed at `POLYTROPIC_INDEX`, not chosen from the data (a shape search over n, like the
Coulomb band's, would cost a fluid fit per candidate; not tried).

Q0 is the valve null offset: a metering edge that sees u + b₀ passes
Cf h (u + b₀) = Cf h u + (Cf b₀) h, so each edge has its own Q0 = Cf b₀ (m³/(s·√Pa)), the
column being that edge's h while it is open (Q0⁺⁺, Q0⁺⁻, Q0⁻⁺, Q0⁻⁻ like the gains). One
coefficient per chamber instead is exact only when the chamber's two edges have equal gains;
on the realistic simulator (joint 2's cap edges 17 % apart) it printed Cf⁺⁻₂ 4 % off at
σ 0.3 % and Q0 12 % off with the plant inside the family. Not in the model:
underlap and null leakage (flow at u ≈ 0 through all four edges), external leakage and the
null offset's shift with temperature.

Temperature (controller/plant/oil.py): with the oil's datasheet declared (`[plant.oil]`,
`PlantParams.oil`) and the oil temperature in `Sample.temp`, the columns carry the oil law so
the parameters are the reference temperature's (40 °C): the Fv± columns × ν(T)/ν_ref (viscous
friction ∝ ν), the C_int column × ν_ref/ν(T) (laminar leakage ∝ 1/ν), the 1/b and V0/b columns
× e^(k (T − T_ref)) (Tait). The air column is not scaled: the gas's compliance does not follow
the liquid's law. Without a law or a temperature every factor is 1 (`oil_factors`).
"""

from __future__ import annotations

import numpy as np

from controller.plant.dynamics import P_ATM, cylinder, joint_from_piston
from controller.plant.params import JointEffects, PlantEffects, PlantParams
from controller.plant.regressors import fluid_regressor, mechanical_output, mechanical_regressor
from estimator.models import LinearModel, Sample, fluid_model, mechanical_model
from estimator.shape_search import FixedPoint, ShapeSearch

#: v_ε of the smooth sign in the Coulomb columns (m/s of piston velocity). Lin's rig and the
#: simulator's Stribeck velocity (10 mm/s) put the bump below ~20 mm/s; 5 mm/s keeps the
#: transition narrow against the ~50–100 mm/s the standard experiment reaches.
SMOOTH_SIGN_M_S = 5.0e-3
#: Where the batch looks for the band the data support (estimator.shape_search): from well
#: below the velocity estimate's noise to the bump of a slow Stribeck curve.
BAND_RANGE_M_S = (2.0e-4, 2.0e-2)


def lin_mech_names(n: int) -> list[str]:
    """[M1, (M2, R12,) W1, (W2,) then per joint Fv+i, Fv-i, Fc+i, Fc-i]."""
    base = ["M1", "W1"] if n == 1 else ["M1", "M2", "R12", "W1", "W2"]
    for i in range(1, n + 1):
        base += [f"Fv+{i}", f"Fv-{i}", f"Fc+{i}", f"Fc-{i}"]
    return base


def oil_factors(params: PlantParams, x: Sample) -> tuple[np.ndarray, np.ndarray]:
    """(ν(T)/ν_ref, b_ref/b(T)), each (N, n), of the sample's oil temperature by the declared
    oil law (`[plant.oil]`); ones without a law or a measured temperature (module doc,
    "Temperature")."""
    if params.oil is None or x.temp is None:
        one = np.ones_like(x.q)
        return one, one
    return params.oil.viscosity_ratio(x.temp), 1.0 / params.oil.bulk_ratio(x.temp)


def lin_mech_regressor(
    params: PlantParams,
    q: np.ndarray,
    qd: np.ndarray,
    qdd: np.ndarray,
    smooth_m_s: float = SMOOTH_SIGN_M_S,
    viscosity: np.ndarray | None = None,
) -> np.ndarray:
    """Φ (N, n, n_params) of the Lin mechanical model (module doc), parameter order
    `lin_mech_names`; `viscosity` ν(T)/ν_ref (N, n) scales the viscous columns (None: 1)."""
    q = np.atleast_2d(np.asarray(q, dtype=float))
    qd = np.atleast_2d(np.asarray(qd, dtype=float))
    n = params.n
    ref = mechanical_regressor(q, qd, qdd, params.gravity)
    # Reference columns without the viscous ones: n = 1 → [M, Fv, W]; n = 2 → Fv at 3, 4.
    fv_cols = [1] if n == 1 else [3, 4]
    keep = [c for c in range(ref.shape[2]) if c not in fv_cols]
    N = q.shape[0]
    out = np.zeros((N, n, len(keep) + 4 * n))
    out[:, :, : len(keep)] = ref[:, :, keep]
    _, r = cylinder(params, q)
    sd = r * qd
    pos = sd >= 0.0
    sgn = np.tanh(sd / smooth_m_s)
    # Viscous friction ∝ ν (an oil film): Fv± are referred to the oil law's temperature.
    qv = qd if viscosity is None else qd * viscosity
    for i in range(n):
        c = len(keep) + 4 * i
        out[:, i, c] = np.where(pos[:, i], qv[:, i], 0.0)
        out[:, i, c + 1] = np.where(pos[:, i], 0.0, qv[:, i])
        out[:, i, c + 2] = np.where(pos[:, i], r[:, i] * sgn[:, i], 0.0)
        out[:, i, c + 3] = np.where(pos[:, i], 0.0, r[:, i] * sgn[:, i])
    return out


#: The four metering edges, in the reference regressor's column order: P→cap, cap→T, P→rod,
#: rod→T (controller.plant.regressors).
EDGES = ("++", "+-", "-+", "--")
#: Fluid parameters per joint: 4 gains, V0⁺/b, V0⁻/b, C_int, 4 null offsets.
FLUID_PER_JOINT = 11
#: Polytropic index n the air column assumes: between isothermal (1.0) and adiabatic (1.4)
#: bubbles. At 3 MPa g(p) is 32 % lower with n = 1 and 29 % higher with n = 1.4 than with 1.2:
#: α absorbs the level, not the shape over the run's pressures, so a wrong n biases α.
POLYTROPIC_INDEX = 1.2
#: The batch's null offsets b₀ (spool units) settle within this (~1 % of a typical b₀); they are
#: clipped to ±NULL_OFFSET_MAX, 1/7 of the spool's travel, beyond any trimmed valve's bias.
NULL_OFFSET_TOL = 5.0e-5
NULL_OFFSET_MAX = 0.2


def lin_fluid_names(n: int) -> list[str]:
    names = ["1/b"]
    for i in range(1, n + 1):
        names += [f"Cf{e}{i}" for e in EDGES]
        names += [f"V0+/b{i}", f"V0-/b{i}", f"Cint{i}"]
        names += [f"Q0{e}{i}" for e in EDGES]
    return [*names, "air"]


def air_compliance(p: np.ndarray, n: float = POLYTROPIC_INDEX) -> np.ndarray:
    """g(p) = r/(n p_abs), r = (p_atm/p_abs)^(1/n): the air's compliance per unit α (1/Pa) at
    gauge pressure p (module doc; controller.plant.dynamics.effective_bulk)."""
    pa = P_ATM + np.maximum(p, 0.0)
    return (P_ATM / pa) ** (1.0 / n) / (n * pa)


def lin_fluid_regressor(
    params: PlantParams, x: Sample, null_offset: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Φ (N, 2n, 2 + 11n) and y (N, 2n) of the fluid model (module doc), order
    `lin_fluid_names`; rows [cap₁, rod₁, cap₂, rod₂].

    The valve columns are the reference regressor's (controller.plant.regressors), so the
    orifice law is written once. Each column is linear in u, u·g(p, sign u), so the same
    columns evaluated with u → sign(u) and multiplied by sign(u) are g alone: the open edge's
    ±h, the null-offset columns (coefficient Cf·b₀ exactly, edge by edge)."""
    n = params.n
    args = (x.p_cap, x.p_rod, x.pd_cap, x.pd_rod)
    # The open edge is the one u + b₀ opens (`null_offset` = b₀ per joint, spool units): in
    # the band between 0 and −b₀ the other edge carries the flow.
    w = x.u if null_offset is None else x.u + np.asarray(null_offset)[None, :]
    sgn = np.sign(w)
    edge, y = fluid_regressor(params, x.s, x.sd, sgn, *args)
    phi = np.zeros((x.n, 2 * n, 2 + FLUID_PER_JOINT * n))
    v0 = params.dead_volume
    g_cap, g_rod = air_compliance(x.p_cap), air_compliance(x.p_rod)
    # 1/b(T) = e^(k (T − T_ref))/b_ref and C_int(T) = C_int,ref ν_ref/ν(T): the columns carry
    # the temperature so that 1/b, V0/b and C_int are the reference temperature's.
    visc, compl = oil_factors(params, x)
    for i in range(n):
        half = 0.5 * params.stroke[i]
        rc, rr, c, cr = 2 * i, 2 * i + 1, 1 + FLUID_PER_JOINT * i, 1 + 4 * i
        dp = x.p_cap[:, i] - x.p_rod[:, i]
        swept_cap = -x.pd_cap[:, i] * (half + x.s[:, i]) * params.area_cap[i]
        swept_rod = -x.pd_rod[:, i] * (half - x.s[:, i]) * params.area_rod[i]
        phi[:, rc, 0] = swept_cap * compl[:, i]
        phi[:, rr, 0] = swept_rod * compl[:, i]
        # g = the open edge's column per unit opening; Cf multiplies g·u, Q0 = Cf·b₀ g.
        g = edge[:, :, cr : cr + 4] * sgn[:, i, None, None]
        phi[:, :, c : c + 4] = g * x.u[:, i, None, None]
        # α: the air in the whole chamber, the dead volume taken at its nominal value (the
        # error is second order: α times the dead volume's mismatch).
        # The gas's compliance does not follow the liquid's temperature law (simulator alike).
        phi[:, rc, -1] = (swept_cap - x.pd_cap[:, i] * v0[i]) * g_cap[:, i]
        phi[:, rr, -1] = (swept_rod - x.pd_rod[:, i] * v0[i]) * g_rod[:, i]
        phi[:, rc, c + 4] = -x.pd_cap[:, i] * compl[:, i]
        phi[:, rr, c + 5] = -x.pd_rod[:, i] * compl[:, i]
        leak = dp / visc[:, i]
        phi[:, rc, c + 6] = -leak
        phi[:, rr, c + 6] = leak
        phi[:, :, c + 7 : c + 11] = g
    return phi, y


def lin_mechanical_model(
    params: PlantParams, smooth_m_s: float = SMOOTH_SIGN_M_S, truth: np.ndarray | None = None
) -> LinearModel:
    ref = mechanical_model(params)
    n = params.n
    names = lin_mech_names(n)

    def regressor(x: Sample) -> tuple[np.ndarray, np.ndarray]:
        visc, _ = oil_factors(params, x)
        Phi = lin_mech_regressor(params, x.q, x.qd, x.qdd, smooth_m_s, visc)
        return Phi, mechanical_output(params, x.q, x.p_cap, x.p_rod)

    # Scales only normalise (models.py): viscous like the reference (1), Coulomb ~ 5 % of the
    # cap area at supply pressure.
    coulomb = 0.05 * params.supply_pressure * float(np.max(params.area_cap))
    scale = np.array([coulomb if nm.startswith("Fc") else 1.0 for nm in names])
    return LinearModel(
        name="mechanical_lin",
        names=tuple(names),
        n_outputs=n,
        regressor=regressor,
        param_scale=scale,
        output_scale=ref.output_scale,
        cutoff_hz=ref.cutoff_hz,
        taps=ref.taps,
        truth=truth,
        referred=tuple(nm for nm in names if nm.startswith("Fv")) if params.oil else (),
        shape=ShapeSearch(
            label="Coulomb zero-velocity band v_ε",
            unit="mm/s",
            display_scale=1e3,
            value=smooth_m_s,
            lo=BAND_RANGE_M_S[0],
            hi=BAND_RANGE_M_S[1],
            make=lambda v: lin_mechanical_model(params, v, truth),
        ),
    )


def lin_fluid_model(
    params: PlantParams,
    truth: np.ndarray | None = None,
    null_offset: np.ndarray | None = None,
) -> LinearModel:
    ref = fluid_model(params)
    n = params.n

    def regressor(x: Sample) -> tuple[np.ndarray, np.ndarray]:
        return lin_fluid_regressor(params, x, null_offset)

    per_joint = [1.0e-6] * 4 + [1.0e-13, 1.0e-13, 1.0e-12] + [1.0e-9] * 4
    names = lin_fluid_names(n)
    offset = np.zeros(n) if null_offset is None else np.asarray(null_offset, dtype=float)

    def implied_offsets(theta: np.ndarray) -> np.ndarray:
        th = dict(zip(names, theta, strict=True))
        b0 = [np.mean([th[f"Q0{e}{i}"] / th[f"Cf{e}{i}"] for e in EDGES]) for i in range(1, n + 1)]
        return np.clip(np.nan_to_num(np.array(b0)), -NULL_OFFSET_MAX, NULL_OFFSET_MAX)

    return LinearModel(
        name="fluid_lin",
        names=tuple(names),
        n_outputs=2 * n,
        regressor=regressor,
        param_scale=np.array([1.0e-9] + per_joint * n + [1.0e-2]),
        output_scale=ref.output_scale,
        cutoff_hz=ref.cutoff_hz,
        taps=ref.taps,
        valid=ref.valid,
        truth=truth,
        referred=tuple(nm for nm in names if "/b" in nm or nm.startswith("Cint"))
        if params.oil
        else (),
        fixed_point=FixedPoint(
            label="valve null offsets b₀ (the open edge is the one u + b₀ opens)",
            unit="spool",
            value=offset,
            tol=NULL_OFFSET_TOL,
            update=implied_offsets,
            make=lambda b0: lin_fluid_model(params, truth, b0),
        ),
    )


def lin_models(params: PlantParams) -> list[LinearModel]:
    """The profile factory (`[estimator] model = "estimator.models_lin:lin_models"`). No truth:
    the factory sees only the parameters the profile states, not the simulator's effects."""
    return [lin_mechanical_model(params), lin_fluid_model(params)]


def lin_plant(
    known: PlantParams,
    names: list[str],
    theta: np.ndarray,
    band_m_s: float = SMOOTH_SIGN_M_S,
    oil_c: float | None = None,
) -> tuple[PlantParams, PlantEffects] | None:
    """The shared physics (controller.plant, with its effects) that this family's estimate
    describes, for validation by simulation; None if `names` are not this family's.

    Exact for M, R12, W, 1/b, Cf, Fc±, C_int, V0 = (V0/b)·b, α. Approximate where the simulator's
    terms differ in form: the joint viscous Fv± become a symmetric joint Fv = min(Fv⁺, Fv⁻)
    plus a piston term f_v = (Fv± − Fv)/r² with r at mid-stroke (the simulator's f_v± act at
    the piston, ∝ r(q)²); the four null-offset coefficients give one null bias b₀, the mean of
    Q0ₑ/Cfₑ over the edges; the Coulomb terms' band is the one the estimate was made with
    (`band_m_s`: the batch's choice, estimator.shape_search). Estimates outside the physics
    (a negative force, leakage or volume) are clipped to its range, so a poor estimate
    validates poorly rather than failing.

    With a declared oil law (`known.oil`), the estimate is the reference temperature's; with
    `oil_c` (°C, e.g. the validation run's mean oil temperature) the plant returned is the one
    at that temperature: b, C_int and the viscous terms scaled by the law, V0 unchanged."""
    n = known.n
    mech, fluid = lin_mech_names(n), lin_fluid_names(n)
    if not all(nm in names for nm in mech + fluid):
        return None
    th = dict(zip(names, np.asarray(theta, dtype=float), strict=True))
    if not all(np.isfinite(v) for v in th.values()):
        return None
    bulk = 1.0 / th["1/b"]
    visc, bulk_t = 1.0, 1.0  # ν(T)/ν_ref and b(T)/b_ref at the oil_c asked for
    if known.oil is not None and oil_c is not None:
        visc = float(known.oil.viscosity_ratio(oil_c))
        bulk_t = float(known.oil.bulk_ratio(oil_c))
    mid = joint_from_piston(known, np.zeros((1, n)))
    _, r_mid = cylinder(known, mid)
    # PlantParams wants Fv > 0 (the daq refuses a parameter file without): 1e-6 N·m·s/rad.
    fv = visc * np.array([max(min(th[f"Fv+{i}"], th[f"Fv-{i}"]), 1e-6) for i in range(1, n + 1)])
    joints = []
    for i in range(1, n + 1):
        r2 = float(r_mid[0, i - 1]) ** 2
        fc_p, fc_m = max(th[f"Fc+{i}"], 0.0), max(th[f"Fc-{i}"], 0.0)
        b0 = float(np.mean([th[f"Q0{e}{i}"] / th[f"Cf{e}{i}"] for e in EDGES]))
        joints.append(
            JointEffects(
                coulomb_pos=fc_p,
                coulomb_neg=fc_m,
                stiction_pos=fc_p,
                stiction_neg=fc_m,
                smoothing_velocity=band_m_s,
                viscous_pos=max(visc * th[f"Fv+{i}"] - fv[i - 1], 0.0) / r2,
                viscous_neg=max(visc * th[f"Fv-{i}"] - fv[i - 1], 0.0) / r2,
                leak_internal=max(th[f"Cint{i}"], 0.0) / visc,
                null_bias=float(np.clip(b0, -0.5, 0.5)),
                dead_volume_cap=max(th[f"V0+/b{i}"] * bulk, 1e-7),
                dead_volume_rod=max(th[f"V0-/b{i}"] * bulk, 1e-7),
            )
        )
    M = [th["M1"]] if n == 1 else [th["M1"], th["M2"]]
    W = [th["W1"]] if n == 1 else [th["W1"], th["W2"]]
    theta_mech = np.array([M[0], fv[0], W[0]]) if n == 1 else np.array([*M, th["R12"], *fv, *W])
    cf = [th[f"Cf{e}{i}"] for i in range(1, n + 1) for e in ("++", "+-", "-+", "--")]
    params = known.with_identified(theta_mech, np.array([th["1/b"] / bulk_t, *cf]))
    # Entrained air: α as identified (clipped to the physics' [0, 0.5]), with the n the
    # column assumed; the simulator puts the same α in the dead volume and the swept one.
    air = float(np.clip(th["air"], 0.0, 0.5))
    return params, PlantEffects(
        joints=tuple(joints), air_content=air, polytropic_index=POLYTROPIC_INDEX
    )
