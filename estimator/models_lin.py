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
            + dFs⁺_i r_i β(ṡ_i) σ(ṡ_i) [ṡ_i ≥ 0] + dFs⁻_i r_i β(ṡ_i) σ(ṡ_i) [ṡ_i < 0]

with ṡ_i = r_i(q_i) q̇_i the piston velocity: the Coulomb forces Fc± are piston forces (N, the
unit a seal datasheet gives), the viscous terms Fv± joint coefficients (N·m·s/rad, like the
reference model's Fv). Zero-velocity region: σ(ṡ) = tanh(ṡ / v_ε) is a smooth sign, v_ε =
`SMOOTH_SIGN_M_S` (5 mm/s). Why smooth rather than dropping |ṡ| < threshold: the estimator's
equations are stacked per sample (both joints' rows at once), so a slow joint cannot drop
only its own row; an all-zero row would count as a perfectly explained equation and shrink the
noise estimate. The width matters: the batch chooses v_ε from the data (`LinearModel.shape`,
estimator.shape_search: least residual over `BAND_RANGE_M_S`); the online estimator runs
`SMOOTH_SIGN_M_S`.

Stiction/Stribeck (controller.plant.dynamics.friction_force, Simscape Translational Friction):
below a few v_s the seal force rises from F_C to the breakaway F_S along a Gaussian,
β(ṡ) = e^(−(ṡ/v_s)²), under the same smooth sign as the Coulomb force — the simulator's own
form, so the zero-velocity region is handled as it does (no stick state: the tanh). The bump
height dFs± = F_S± − F_C± per direction is linear; v_s is fixed at `STRIBECK_M_S` (10 mm/s,
the middle of the 5–20 mm/s range the sources give) rather than searched: a second shape
search would cost a mechanical fit per candidate, and a wrong v_s moves the bump's height
into dFs (and a little into Fc), not into the rigid-body parameters.

Fluid (DESIGN §2.2 with V0 unknown; Sakai's shared 1/b kept), per joint i, cap and rod rows:

    −ṗ⁺ (L/2 + s) A⁺ · (1/b) − ṗ⁺ · (V0⁺/b) + Σ h u Cf − (p⁺ − p⁻) C_int − p⁺ C_ext + Σ h Q0 = A⁺ ṡ
    −ṗ⁻ (L/2 − s) A⁻ · (1/b) − ṗ⁻ · (V0⁻/b) − Σ h u Cf + (p⁺ − p⁻) C_int − p⁻ C_ext − Σ h Q0 = −A⁻ ṡ

so the swept-volume column (ṗ·(L/2 ± s)A, known geometry) carries 1/b and the ṗ column the
dead volume over b, V0/b, per chamber: V0 = (V0/b)/(1/b). C_int is the laminar piston leakage
(cap → rod, m³/(s·Pa)), C_ext each chamber's to drain (the rod seal's and the valve body's, at
the chamber's gauge pressure; one per joint, as the simulator has it). C_ext is small (a tenth
of C_int on the realistic profile) but it is the only term that bleeds both chambers at once:
without it the simulator's own plant, simulated in closed loop at its true values, lost 12
points of FIT on the cap pressure of joint 2 (a hold's pressure level is set by the balance
of the null flows against this drain).

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

The valve (docs/simulator.md, controller.plant.dynamics.valve_edges): edge e of a spool at
w = u + b₀ (b₀ the null offset) with lap d (> 0 overlap, < 0 underlap) and a leakage opening a_L
opens a_e = max(s_e w − d, 0) + a_L, s_e = +1 for P→cap and rod→T, −1 for cap→T and P→rod.
With o_e = [s_e w > d] (the edge open) its flow Cf_e h_e a_e is, in the per-unit-opening column
g_e (the reference regressor's, sign included, so that Cf g u is the chamber's flow),

    Cf_e g_e u o_e + Q0_e g_e o_e + QL_e g_e (1 − o_e),
    Q0_e = Cf_e (b₀ − s_e (d − a_L)),  QL_e = s_e Cf_e a_L,

linear in Cf, Q0 and QL once b₀ and d (which edges are open) are fixed. The batch chooses
them per joint by least residual (estimator.shape_search.JointSwitches, along b₀, d and each
pair of edges' opening point alone, u > d − b₀ and u < −d − b₀: `VALVE_DIRECTIONS`).
The null shifts with the oil's temperature (w = u + b₀ + β (T − T_ref), β ≈ 0.05 %/K of the
travel on a servo valve): with an oil law declared (T_ref its reference temperature) and the
temperature measured, each open edge gets a column g_e o_e (T − T_ref) with Qt_e = Cf_e β, and
Q0_e is then the null offset at T_ref (`null_shift` gives β back as mean Qt_e/Cf_e). Which
edges are open is still decided at the searched b₀, the run's mean null: a run warms by a
few kelvin, moving the switching point by a few tenths of a mV per kelvin. A run that barely
warms separates β poorly from b₀ (the two columns differ only by T's variation): the batch
then flags them, while their sum at the run's temperatures — what validation needs — stays
well determined. A fixed
point on the estimate's own b₀ = mean Q0/Cf, d = a_L − mean s Q0/Cf (a_L = mean s QL/Cf,
`valve_shape`) was tried first: it holds at the truth but, started from b₀ = d = 0 on the
realistic valve, it oscillated (b₀ ±0.02 V) or ran to its bound. `lin_plant` takes b₀, d and
a_L from the estimate by `valve_shape`. An underlap as wide as the spool's typical
opening (the realistic valve: 0.007 V against a median opening of 0.008–0.010 V on the
standard experiment) has both edges of a chamber passing flow around null; without the band
the gains absorbed it (Cf⁺⁺₂ +28 %). Q0 per edge rather than per chamber: exact whatever the
edges' gains (joint 2's cap edges are 17 % apart on the realistic simulator; one Q0 per
chamber printed Cf⁺⁻₂ 4 % off at σ 0.3 %). With d = a_L = 0 the model is the null offset's
alone (QL = 0). The online estimator runs b₀ = d = 0, what the QL columns can absorb of the
band.

Temperature (controller/plant/oil.py): with the oil's datasheet declared (`[plant.oil]`,
`PlantParams.oil`) and the oil temperature in `Sample.temp`, the columns carry the oil law so
the parameters are the reference temperature's (40 °C): the Fv± columns × ν(T)/ν_ref (viscous
friction ∝ ν), the C_int and C_ext columns × ν_ref/ν(T) (laminar leakage ∝ 1/ν), the 1/b and
V0/b columns × e^(k (T − T_ref)) (Tait), and the valve's null shift (above). The air column is not
scaled: the gas's compliance does not follow the liquid's law. Without a law or a temperature
every factor is 1 (`oil_factors`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from controller.plant.dynamics import P_ATM, cylinder, joint_from_piston
from controller.plant.jit import HAVE_NUMBA
from controller.plant.params import JointEffects, PlantEffects, PlantParams
from controller.plant.regressors import fluid_regressor, mechanical_output, mechanical_regressor
from estimator.models import LinearModel, Sample, fluid_model, mechanical_model
from estimator.models_lin_compiled import lin_fluid_rows
from estimator.shape_search import JointSwitches, ShapeSearch

#: v_ε of the smooth sign in the Coulomb columns (m/s of piston velocity). Lin's rig and the
#: simulator's Stribeck velocity (10 mm/s) put the bump below ~20 mm/s; 5 mm/s keeps the
#: transition narrow against the ~50–100 mm/s the standard experiment reaches.
SMOOTH_SIGN_M_S = 5.0e-3
#: Where the batch looks for the band the data support (estimator.shape_search): from well
#: below the velocity estimate's noise to the bump of a slow Stribeck curve.
BAND_RANGE_M_S = (2.0e-4, 2.0e-2)
#: v_s of the Stribeck bump's Gaussian (m/s of piston velocity), fixed: the middle of the
#: 5–20 mm/s that Simscape's Cylinder Friction block and seal measurements give (Hindawi 2014
#: Table 1) and the simulator's default. Only the bump's height is identified (module doc).
STRIBECK_M_S = 1.0e-2


#: Taps of the mechanical model's causal FIR online (estimator.chain; 20 Hz like the reference
#: model, at the 1 kHz loop). Lin's friction is nonlinear in the velocity (smooth sign, Stribeck
#: bump), and the regressor evaluates it on the conditioned signals: a filter that changes the
#: motion's own band makes the filtered friction differ from the friction of the filtered
#: velocity. 101 taps (the reference's) pass 10 Hz at 0.92 and 15 Hz at 0.75; 401 taps are flat
#: to 15 Hz (1.000–1.003), as the batch's zero-phase Butterworth is to 10 Hz (0.996). The
#: delay grows from 51 to 201 ms (docs/estimator.md, "Conditioning", for what it changed).
LIN_MECH_TAPS = 401

#: Mechanical parameters per joint: Fv±, Fc±, and the Stribeck bump heights dFs± = F_S± − F_C±.
MECH_PER_JOINT = 6


def lin_mech_names(n: int) -> list[str]:
    """[M1, (M2, R12,) W1, (W2,) then per joint Fv+i, Fv-i, Fc+i, Fc-i, dFs+i, dFs-i]."""
    base = ["M1", "W1"] if n == 1 else ["M1", "M2", "R12", "W1", "W2"]
    for i in range(1, n + 1):
        base += [f"Fv+{i}", f"Fv-{i}", f"Fc+{i}", f"Fc-{i}", f"dFs+{i}", f"dFs-{i}"]
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
    out = np.zeros((N, n, len(keep) + MECH_PER_JOINT * n))
    out[:, :, : len(keep)] = ref[:, :, keep]
    _, r = cylinder(params, q)
    sd = r * qd
    pos = sd >= 0.0
    sgn = np.tanh(sd / smooth_m_s)
    # The Stribeck bump (controller.plant.dynamics.friction_force): (F_S − F_C) e^(−(ṡ/v_s)²)
    # under the same smooth sign as the Coulomb force.
    bump = np.exp(-((sd / STRIBECK_M_S) ** 2)) * sgn
    # Viscous friction ∝ ν (an oil film): Fv± are referred to the oil law's temperature.
    qv = qd if viscosity is None else qd * viscosity
    for i in range(n):
        c = len(keep) + MECH_PER_JOINT * i
        out[:, i, c] = np.where(pos[:, i], qv[:, i], 0.0)
        out[:, i, c + 1] = np.where(pos[:, i], 0.0, qv[:, i])
        out[:, i, c + 2] = np.where(pos[:, i], r[:, i] * sgn[:, i], 0.0)
        out[:, i, c + 3] = np.where(pos[:, i], 0.0, r[:, i] * sgn[:, i])
        out[:, i, c + 4] = np.where(pos[:, i], r[:, i] * bump[:, i], 0.0)
        out[:, i, c + 5] = np.where(pos[:, i], 0.0, r[:, i] * bump[:, i])
    return out


#: The four metering edges, in the reference regressor's column order: P→cap, cap→T, P→rod,
#: rod→T (controller.plant.regressors).
EDGES = ("++", "+-", "-+", "--")
#: s_e: +1 for the edges a positive spool opens (P→cap, rod→T), −1 for the others.
EDGE_SIGNS = np.array([1.0, -1.0, 1.0, -1.0])
#: Fluid parameters per joint: 4 gains, V0⁺/b, V0⁻/b, C_int, C_ext, 4 null offsets, 4 null
#: leakages (then, with an oil law, 4 null shifts: `fluid_per_joint`).
FLUID_PER_JOINT = 16
#: Polytropic index n the air column assumes: between isothermal (1.0) and adiabatic (1.4)
#: bubbles. At 3 MPa g(p) is 32 % lower with n = 1 and 29 % higher with n = 1.4 than with 1.2:
#: α absorbs the level, not the shape over the run's pressures, so a wrong n biases α.
POLYTROPIC_INDEX = 1.2
#: The batch looks for each valve's switching points within ±SWITCH_SPAN of null (spool
#: units, 1/7 of the spool's travel: beyond any trimmed valve's bias and any servo valve's
#: lap) and to SWITCH_TOL (~6 % of the realistic valve's 7 mV lap).
SWITCH_SPAN = 0.2
#: Lines the search moves (b₀, d) along: each alone, then one pair of edges' opening point
#: alone (u = d − b₀ with −d − b₀ held, and the other way). The residual's valley runs along
#: b₀ when the lap is small (moving b₀ alone from 0 found 7.3 / −6.3 mV on the in-family
#: valve, truth 7 / −6; moving the opening points alone stopped at 2.6 / −1.6) and along the
#: opening points under a wide underlap (the other way round on the realistic valve).
VALVE_DIRECTIONS = np.array([[1.0, 0.0], [0.0, 1.0], [-0.5, 0.5], [-0.5, -0.5]])
SWITCH_TOL = 4.0e-4


def fluid_per_joint(null_shift: bool) -> int:
    """Fluid parameters per joint: `FLUID_PER_JOINT`, + 4 null-shift coefficients Qtₑ."""
    return FLUID_PER_JOINT + (4 if null_shift else 0)


def lin_fluid_names(n: int, null_shift: bool = False) -> list[str]:
    """[1/b, per joint Cfₑ, V0±/b, Cint, Cext, Q0ₑ, QLₑ (, Qtₑ with `null_shift`), then air]."""
    names = ["1/b"]
    for i in range(1, n + 1):
        names += [f"Cf{e}{i}" for e in EDGES]
        names += [f"V0+/b{i}", f"V0-/b{i}", f"Cint{i}", f"Cext{i}"]
        names += [f"Q0{e}{i}" for e in EDGES]
        names += [f"QL{e}{i}" for e in EDGES]
        if null_shift:
            names += [f"Qt{e}{i}" for e in EDGES]
    return [*names, "air"]


def valve_coefficients(
    cf: np.ndarray, b0: float, lap: float, leak: float
) -> tuple[np.ndarray, np.ndarray]:
    """(Q0ₑ, QLₑ) over the four edges of a valve with gains `cf`, null offset b₀, lap d and
    leakage opening a_L (module doc); `valve_shape` inverts it."""
    cf = np.asarray(cf, dtype=float)
    return cf * (b0 - EDGE_SIGNS * (lap - leak)), EDGE_SIGNS * cf * leak


def valve_shape(th: dict[str, float], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(b₀, d, a_L) per joint, spool units, that a fluid estimate implies (module doc: Q0/Cf =
    b₀ − s(d − a_L), QL/Cf = s a_L per edge, averaged over the four edges)."""
    b0, lap, leak = np.zeros(n), np.zeros(n), np.zeros(n)
    for i in range(1, n + 1):
        cf = np.array([th[f"Cf{e}{i}"] for e in EDGES])
        # A gain estimated at exactly 0 (an edge the run never opened) implies nothing: 0.
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.array([th[f"Q0{e}{i}"] for e in EDGES]) / cf
            a_l = float(np.mean(EDGE_SIGNS * np.array([th[f"QL{e}{i}"] for e in EDGES]) / cf))
            b0[i - 1] = np.mean(r)
            lap[i - 1] = a_l - np.mean(EDGE_SIGNS * r)
            leak[i - 1] = a_l
    b0, lap, leak = (np.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0) for v in (b0, lap, leak))
    return b0, lap, leak


def null_shift(th: dict[str, float], n: int) -> np.ndarray:
    """β per joint (spool units per K) that a fluid estimate implies: the mean of Qtₑ/Cfₑ
    over the edges (module doc, "Temperature"); zeros for an estimate without the Qtₑ."""
    beta = np.zeros(n)
    for i in range(1, n + 1):
        if f"Qt++{i}" not in th:
            continue
        cf = np.array([th[f"Cf{e}{i}"] for e in EDGES])
        with np.errstate(divide="ignore", invalid="ignore"):
            beta[i - 1] = np.mean(np.array([th[f"Qt{e}{i}"] for e in EDGES]) / cf)
    return np.nan_to_num(beta, nan=0.0, posinf=0.0, neginf=0.0)


def air_compliance(p: np.ndarray, n: float = POLYTROPIC_INDEX) -> np.ndarray:
    """g(p) = r/(n p_abs), r = (p_atm/p_abs)^(1/n): the air's compliance per unit α (1/Pa) at
    gauge pressure p (module doc; controller.plant.dynamics.effective_bulk)."""
    pa = P_ATM + np.maximum(p, 0.0)
    return (P_ATM / pa) ** (1.0 / n) / (n * pa)


def lin_fluid_regressor(
    params: PlantParams, x: Sample, valve: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Φ (N, 2n, 2 + 16n) and y (N, 2n) of the fluid model (module doc), order
    `lin_fluid_names`; rows [cap₁, rod₁, cap₂, rod₂]. `valve` = [b₀ per joint, d per joint]
    (spool units; None: zeros), which edges are open.

    One compiled pass over the samples (estimator.models_lin_compiled), bit-equal to
    `lin_fluid_regressor_reference`, the definition; that one without numba."""
    if not HAVE_NUMBA:
        return lin_fluid_regressor_reference(params, x, valve)
    n = params.n
    b0, lap = (np.zeros(n), np.zeros(n)) if valve is None else np.reshape(valve, (2, n))
    shift = params.oil is not None
    per_joint = fluid_per_joint(shift)
    s, sd, u, pc, pr, pdc, pdr = (
        np.ascontiguousarray(a, dtype=float)
        for a in (x.s, x.sd, x.u, x.p_cap, x.p_rod, x.pd_cap, x.pd_rod)
    )
    N = s.shape[0]
    dtemp = (
        np.zeros((N, n))
        if not shift or x.temp is None or params.oil is None
        else np.ascontiguousarray(x.temp - params.oil.reference_c, dtype=float)
    )
    visc, compl = oil_factors(params, x)
    phi = np.zeros((N, 2 * n, 2 + per_joint * n))
    y = np.empty((N, 2 * n))
    lin_fluid_rows(
        float(params.supply_pressure),
        np.asarray(params.area_cap, dtype=float),
        np.asarray(params.area_rod, dtype=float),
        np.asarray(params.dead_volume, dtype=float),
        np.asarray(params.stroke, dtype=float),
        np.ascontiguousarray(b0, dtype=float),
        np.ascontiguousarray(lap, dtype=float),
        s,
        sd,
        u,
        pc,
        pr,
        pdc,
        pdr,
        np.ascontiguousarray(np.broadcast_to(compl, (N, n)), dtype=float),
        np.ascontiguousarray(np.broadcast_to(visc, (N, n)), dtype=float),
        # On the same arrays as the reference: NumPy's vector loops may round differently
        # from its strided ones in the last bit.
        np.ascontiguousarray(air_compliance(x.p_cap), dtype=float),
        np.ascontiguousarray(air_compliance(x.p_rod), dtype=float),
        dtemp,
        shift,
        per_joint,
        phi,
        y,
    )
    return phi, y


def lin_fluid_regressor_reference(
    params: PlantParams, x: Sample, valve: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """`lin_fluid_regressor` written with NumPy over whole columns: the definition, and the
    oracle the compiled form is tested against.

    The valve columns are the reference regressor's (controller.plant.regressors), so the
    orifice law is written once: evaluated at u = +1 it gives the edges a positive spool opens,
    at u = −1 the others (× −1: per unit opening, g_e)."""
    n = params.n
    b0, lap = (np.zeros(n), np.zeros(n)) if valve is None else np.reshape(valve, (2, n))
    shift = params.oil is not None  # the null shift is referred to the oil law's T_ref
    per_joint = fluid_per_joint(shift)
    args = (x.p_cap, x.p_rod, x.pd_cap, x.pd_rod)
    one = np.ones_like(x.u)
    pos, y = fluid_regressor(params, x.s, x.sd, one, *args)
    neg, _ = fluid_regressor(params, x.s, x.sd, -one, *args)
    edge = pos - neg  # each edge's column at its own slot (the other call leaves it zero)
    # o_e = [s_e (u + b₀) > d]: underlap (d < 0) opens both edges around null, overlap none.
    opened = EDGE_SIGNS[None, None, :] * (x.u + b0[None, :])[:, :, None] > lap[None, :, None]
    shut = ~opened
    phi = np.zeros((x.n, 2 * n, 2 + per_joint * n))
    # T − T_ref of the null shift (0 without a measured temperature: the columns then carry
    # nothing and the batch flags the Qtₑ).
    dtemp = (
        np.zeros_like(x.u)
        if not shift or x.temp is None or params.oil is None
        else x.temp - params.oil.reference_c
    )
    v0 = params.dead_volume
    g_cap, g_rod = air_compliance(x.p_cap), air_compliance(x.p_rod)
    # 1/b(T) = e^(k (T − T_ref))/b_ref and C_int(T) = C_int,ref ν_ref/ν(T): the columns carry
    # the temperature so that 1/b, V0/b and C_int are the reference temperature's.
    visc, compl = oil_factors(params, x)
    for i in range(n):
        half = 0.5 * params.stroke[i]
        rc, rr, c, cr = 2 * i, 2 * i + 1, 1 + per_joint * i, 1 + 4 * i
        dp = x.p_cap[:, i] - x.p_rod[:, i]
        swept_cap = -x.pd_cap[:, i] * (half + x.s[:, i]) * params.area_cap[i]
        swept_rod = -x.pd_rod[:, i] * (half - x.s[:, i]) * params.area_rod[i]
        phi[:, rc, 0] = swept_cap * compl[:, i]
        phi[:, rr, 0] = swept_rod * compl[:, i]
        # Per edge: Cf multiplies g·u and Q0 g while it is open, QL g while it is closed
        # (only this joint's two rows hold them).
        g = edge[:, rc : rr + 1, cr : cr + 4]
        o, z = opened[:, i, None, :], shut[:, i, None, :]
        phi[:, rc : rr + 1, c + 8 : c + 12] = g * o
        phi[:, rc : rr + 1, c : c + 4] = phi[:, rc : rr + 1, c + 8 : c + 12] * x.u[:, i, None, None]
        phi[:, rc : rr + 1, c + 12 : c + 16] = g * z
        if shift:
            # The null shift with temperature (controller.plant.dynamics: the spool meters at
            # u + b₀ + β (T − T_ref)): Cfₑ β (T − T_ref) per open edge, Qtₑ = Cfₑ β.
            phi[:, rc : rr + 1, c + 16 : c + 20] = g * o * dtemp[:, i, None, None]
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
        # External leakage, each chamber to drain at its own (gauge) pressure, laminar like
        # C_int (controller.plant.dynamics: q_cap −= C_ext p_cap, q_rod −= C_ext p_rod).
        phi[:, rc, c + 7] = -x.p_cap[:, i] / visc[:, i]
        phi[:, rr, c + 7] = -x.p_rod[:, i] / visc[:, i]
    return phi, y


def stiction_caveat(names: list[str], cutoff_hz: float) -> str:
    """Why the stiction bumps are a shape, not a measurement. Their column β(ṡ)σ(ṡ) is a
    nonlinear function of a velocity the batch estimates through its conditioning low-pass:
    the filtered velocity crosses the bump's few mm/s more slowly and less deeply than the
    piston does at a reversal, so the fitted heights read low, and Fc±, fitted on the same
    low-velocity rows, take up part of the difference.
    Neither bias is in their σ, so the fit names both in words (error bars are a promise) and
    flags the bumps (`LinearModel.shapes`): on the realistic profile they read 13–17 % low at
    σ 4–5 %."""
    bumps = [nm for nm in names if nm.startswith("dFs")]
    coulomb = [nm for nm in names if nm.startswith("Fc")]
    return (
        f"{', '.join(bumps)} (the stiction bumps) are fitted through the velocity estimate's "
        f"{cutoff_hz:g} Hz low-pass, which smears a bump a few mm/s wide: they read low and are "
        f"the model's shape, not measurements (flagged not identifiable, their values kept for "
        f"the model); {', '.join(coulomb)} share their low-velocity rows and are conditional "
        "on them"
    )


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
    scale = np.array([coulomb if nm.startswith(("Fc", "dFs")) else 1.0 for nm in names])
    return LinearModel(
        name="mechanical_lin",
        names=tuple(names),
        n_outputs=n,
        regressor=regressor,
        param_scale=scale,
        output_scale=ref.output_scale,
        cutoff_hz=ref.cutoff_hz,
        taps=LIN_MECH_TAPS,
        truth=truth,
        referred=tuple(nm for nm in names if nm.startswith("Fv")) if params.oil else (),
        caveats=(stiction_caveat(names, ref.cutoff_hz),),
        shapes=tuple(nm for nm in names if nm.startswith("dFs")),
        speed_params=tuple((f"Fv+{i + 1}", f"Fv-{i + 1}") for i in range(n)),
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


def null_flow_caveat(names: Sequence[str]) -> str:
    """Why the null flows are the structure's, not measurements. Q0ₑ = Cfₑ(b₀ − sₑ(d − a_L))
    and QLₑ = sₑCfₑa_L are defined at the null offset b₀ and lap d the batch's switch search
    chose (estimator.shape_search): a b₀ off by δ moves every Q0ₑ by Cfₑ·δ, and the search
    fixes b₀ and d without an error bar, so their σ does not count it. On the realistic plant
    with the bulk experiment's stroke-end holds (which resolve them) Q0⁺⁻₁ read 9–13 % high at
    σ 4 % on every seed, outside ±3σ on two of five — about 1.4 mV of b₀ — so the fit names them
    in words and flags them (`LinearModel.shapes`), their values kept for the model."""
    flows = [nm for nm in names if nm.startswith(("Q0", "QL"))]
    return (
        f"{', '.join(flows)} (the null flows) are conditional on the valve null offset and lap "
        "the batch chose, whose uncertainty their σ does not count: they are the model's "
        "structure, not measurements (flagged not identifiable, their values kept for the model)"
    )


def lin_fluid_model(
    params: PlantParams,
    truth: np.ndarray | None = None,
    valve: np.ndarray | None = None,
) -> LinearModel:
    """`valve` = [b₀ per joint, lap d per joint] (spool units), which edges the regressor opens
    (None: zeros, what the online estimator runs unless the profile sets them); the batch
    chooses them from the data (`switches`, estimator.shape_search.JointSwitches)."""
    ref = fluid_model(params)
    n = params.n

    def regressor(x: Sample) -> tuple[np.ndarray, np.ndarray]:
        return lin_fluid_regressor(params, x, valve)

    shift = params.oil is not None
    # Qtₑ = Cfₑ β ~ 6e-7 × 7e-4 V/K: a tenth of a null offset's Q0 per kelvin.
    per_joint = (
        [1.0e-6] * 4
        + [1.0e-13, 1.0e-13, 1.0e-12, 1.0e-13]
        + [1.0e-9] * 8
        + [1.0e-10] * (4 if shift else 0)
    )
    names = lin_fluid_names(n, shift)
    b0, lap = (np.zeros(n), np.zeros(n)) if valve is None else np.reshape(valve, (2, n))

    def show(valve: np.ndarray) -> str:
        b, d = valve
        return (
            f"null offset b₀ [{', '.join(f'{v * 1e3:.2f}' for v in b)}] mV, lap d "
            f"[{', '.join(f'{v * 1e3:.2f}' for v in d)}] mV (< 0 underlap)"
        )

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
        fluid=True,
        # C_ext sets the pressure a valve near null holds a chamber at, yet its column is
        # nearly the null flows' (module doc): chosen in closed loop where the fit flags it.
        closed_loop=tuple(nm for nm in names if nm.startswith("Cext")),
        caveats=(null_flow_caveat(names),),
        shapes=tuple(nm for nm in names if nm.startswith(("Q0", "QL"))),
        # With the null shift the Q0ₑ are the null offsets at T_ref too.
        referred=tuple(
            nm for nm in names if "/b" in nm or nm.startswith(("Cint", "Cext", "Q0", "Qt"))
        )
        if params.oil
        else (),
        switches=JointSwitches(
            label="valve null offset and lap per joint (which metering edges are open)",
            value=np.array([b0, lap]),
            span=SWITCH_SPAN,
            tol=SWITCH_TOL,
            per_joint=2,
            make=lambda valve: lin_fluid_model(params, truth, np.ravel(valve)),
            show=show,
            directions=VALVE_DIRECTIONS,
            hint=" (the profile's [estimator] valve_null_offset_v and valve_lap_v set them)",
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

    Exact for M, R12, W, 1/b, Cf, Fc±, C_int, C_ext, V0 = (V0/b)·b, α. Approximate where the
    simulator's terms differ in form: the joint viscous Fv± become a symmetric joint Fv =
    min(Fv⁺, Fv⁻) plus a piston term f_v = (Fv± − Fv)/r² with r at mid-stroke (the simulator's
    f_v± act at the piston, ∝ r(q)²); the four null-offset coefficients give one null bias b₀,
    the mean of Q0ₑ/Cfₑ over the edges, the lap and the leakage opening likewise
    (`valve_shape`); the Coulomb terms' band is the one the estimate was made with (`band_m_s`:
    the batch's choice, estimator.shape_search). Estimates outside the physics (a negative
    force, leakage or volume) are clipped to its range, so a poor estimate validates poorly
    rather than failing.

    With a declared oil law (`known.oil`), the estimate is the reference temperature's; with
    `oil_c` (°C, e.g. the validation run's mean oil temperature) the plant returned is the one
    at that temperature: b, C_int and the viscous terms scaled by the law, V0 unchanged, the
    valve's null offset shifted by β (T − T_ref) (`null_shift`; the plant returned has no
    thermal state, so the shift is taken into its null bias)."""
    n = known.n
    # The Stribeck bumps and the external leakage are optional: a parameter file written
    # before them has none (0).
    mech = [nm for nm in lin_mech_names(n) if not nm.startswith("dFs")]
    fluid = [nm for nm in lin_fluid_names(n) if not nm.startswith("Cext")]
    if not all(nm in names for nm in mech + fluid):
        return None
    th = dict(zip(names, np.asarray(theta, dtype=float), strict=True))
    for i in range(1, n + 1):
        th.setdefault(f"dFs+{i}", 0.0)
        th.setdefault(f"dFs-{i}", 0.0)
        th.setdefault(f"Cext{i}", 0.0)
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
    b0, lap, leak = valve_shape(th, n)
    if known.oil is not None and oil_c is not None:
        b0 = b0 + null_shift(th, n) * (oil_c - known.oil.reference_c)
    joints = []
    for i in range(1, n + 1):
        r2 = float(r_mid[0, i - 1]) ** 2
        fc_p, fc_m = max(th[f"Fc+{i}"], 0.0), max(th[f"Fc-{i}"], 0.0)
        joints.append(
            JointEffects(
                coulomb_pos=fc_p,
                coulomb_neg=fc_m,
                # A bump estimated below 0 has no physics (the simulator takes F_S ≥ F_C).
                stiction_pos=fc_p + max(th[f"dFs+{i}"], 0.0),
                stiction_neg=fc_m + max(th[f"dFs-{i}"], 0.0),
                stribeck_velocity=STRIBECK_M_S,
                smoothing_velocity=band_m_s,
                viscous_pos=max(visc * th[f"Fv+{i}"] - fv[i - 1], 0.0) / r2,
                viscous_neg=max(visc * th[f"Fv-{i}"] - fv[i - 1], 0.0) / r2,
                leak_internal=max(th[f"Cint{i}"], 0.0) / visc,
                leak_external=max(th[f"Cext{i}"], 0.0) / visc,
                null_bias=float(np.clip(b0[i - 1], -0.5, 0.5)),
                lap=float(np.clip(lap[i - 1], -0.5, 0.5)),
                null_leak_opening=max(float(leak[i - 1]), 0.0),
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
