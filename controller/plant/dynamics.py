"""Dynamics of the n-joint hydraulic arm (DESIGN.md §1.1–1.2), jitted.

State vector x (length 5n): [q (rad), q̇ (rad/s), p⁺ (Pa), p⁻ (Pa), u (spool, LVDT volts)];
the simulator appends the oil temperature T (°C) as x[5n]. Input v (length n): valve command
voltages, held over a step (zero-order hold, like a D/A).

`derivative_fx`/`integrate_fx` take a second array E (`PlantEffects.pack`) with the simulator's
effects beyond the identification model (docs/simulator.md); with E[E_ON] = 0 they run the
identification model's own arithmetic, which `derivative`/`integrate` are.

The scalar kernels here are the only statement of the equations; the simulator integrates them,
and the vectorised helpers (`cylinder`, `inverse_dynamics`, …) loop over them for the
controller's feed-forward, the regressors' checks and the validation simulation.
"""

from __future__ import annotations

import math

import numpy as np

from controller.plant.jit import njit
from controller.plant.params import (
    E_AIR,
    E_BULK_PER_K,
    E_HEAT_CAP,
    E_NU_REF,
    E_ON,
    E_POLY,
    E_T_AMB,
    E_T_REF,
    E_TAU_COOL,
    E_THERMAL,
    E_WALTHER_A,
    E_WALTHER_B,
    G_BULK,
    G_GRAVITY,
    G_N,
    G_PS,
    G_R12,
    G_RELIEF,
    G_RELIEF_GAIN,
    J_A,
    J_ACAP,
    J_AROD,
    J_B,
    J_CF0,
    J_CF1,
    J_CF2,
    J_CF3,
    J_FV,
    J_KV,
    J_L,
    J_LC,
    J_M,
    J_TAU,
    J_TH0,
    J_UMAX,
    J_V0,
    J_W,
    K_BIAS,
    K_BIAS_PER_K,
    K_FC_NEG,
    K_FC_POS,
    K_FS_NEG,
    K_FS_POS,
    K_FV_NEG,
    K_FV_POS,
    K_LAP,
    K_LEAK_EXT,
    K_LEAK_INT,
    K_LEAK_OPEN,
    K_V0_CAP,
    K_V0_ROD,
    K_VEPS,
    K_VS,
    N_GLOBAL,
    N_JOINT,
    NE_GLOBAL,
    NE_JOINT,
    P_ATM,
    PlantParams,
)

#: The effects array of the nominal plant (E[E_ON] = 0: identification model only).
NOMINAL_EFFECTS = np.zeros(NE_GLOBAL)

# ----------------------------------------------------------------------------- scalar kernels


@njit
def piston(P: np.ndarray, i: int, q: float) -> tuple[float, float]:
    """Piston displacement from mid-stroke s and moment arm r = ds/dq (DESIGN §1.1)."""
    o = N_GLOBAL + N_JOINT * i
    a = P[o + J_A]
    b = P[o + J_B]
    th = q + P[o + J_TH0]
    ell = math.sqrt(a * a + b * b - 2.0 * a * b * math.cos(th))
    s = ell - (P[o + J_LC] + 0.5 * P[o + J_L])
    r = a * b * math.sin(th) / ell
    return s, r


@njit
def joint_angle(P: np.ndarray, i: int, s: float) -> float:
    """Inverse of `piston`: the joint angle at piston displacement s (law of cosines)."""
    o = N_GLOBAL + N_JOINT * i
    a = P[o + J_A]
    b = P[o + J_B]
    ell = s + P[o + J_LC] + 0.5 * P[o + J_L]
    c = (a * a + b * b - ell * ell) / (2.0 * a * b)
    c = min(1.0, max(-1.0, c))
    return math.acos(c) - P[o + J_TH0]


@njit
def mech_terms(
    P: np.ndarray, q1: float, q2: float, qd1: float, qd2: float
) -> tuple[float, float, float, float, float]:
    """M(q) entries (M11, M12, M22) and h = c(q, q̇) + Fv q̇ + g(q) for up to two joints.

    With one joint only M11 and h1 are meaningful (M12 = M22 = h2 = 0).
    """
    g = P[G_GRAVITY]
    o1 = N_GLOBAL
    if P[G_N] < 1.5:
        return (P[o1 + J_M], 0.0, 0.0, P[o1 + J_FV] * qd1 + P[o1 + J_W] * g * math.sin(q1), 0.0)
    o2 = N_GLOBAL + N_JOINT
    r12 = P[G_R12]
    c2 = math.cos(q2)
    s2 = math.sin(q2)
    m2 = P[o2 + J_M]
    m11 = P[o1 + J_M] + 2.0 * r12 * c2
    m12 = m2 + r12 * c2
    w2g = P[o2 + J_W] * g * math.sin(q1 + q2)
    h1 = (
        -2.0 * r12 * qd1 * qd2 * s2
        - r12 * qd2 * qd2 * s2
        + P[o1 + J_FV] * qd1
        + P[o1 + J_W] * g * math.sin(q1)
        + w2g
    )
    h2 = r12 * qd1 * qd1 * s2 + P[o2 + J_FV] * qd2 + w2g
    return m11, m12, m2, h1, h2


@njit
def orifice_terms(ps: float, u: float, pc: float, pr: float) -> tuple[float, float, float, float]:
    """h⁺⁺, h⁺⁻, h⁻⁺, h⁻⁻ of DESIGN §1.2: the square-root pressure drops across the open
    metering edges (zero for the closed ones), floored at 0 so they stay real."""
    if u > 0.0:
        return math.sqrt(max(ps - pc, 0.0)), 0.0, math.sqrt(max(pr, 0.0)), 0.0
    return 0.0, math.sqrt(max(pc, 0.0)), 0.0, math.sqrt(max(ps - pr, 0.0))


@njit
def flow_rates(P: np.ndarray, i: int, u: float, pc: float, pr: float) -> tuple[float, float]:
    """Valve flows into the cap and rod chambers (m³/s), DESIGN §1.2, plus the relief valve
    and anti-cavitation check that keep pressures physical (Sakai Sec. II-B)."""
    o = N_GLOBAL + N_JOINT * i
    hpp, hpm, hmp, hmm = orifice_terms(P[G_PS], u, pc, pr)
    qc = (P[o + J_CF0] * hpp + P[o + J_CF1] * hpm) * u
    qr = -(P[o + J_CF2] * hmp + P[o + J_CF3] * hmm) * u
    return relief_flows(P, qc, qr, pc, pr)


@njit
def relief_flows(P: np.ndarray, qc: float, qr: float, pc: float, pr: float) -> tuple[float, float]:
    """Add the relief valve's and the anti-cavitation check's flows to the chamber flows."""
    relief = P[G_RELIEF]
    k = P[G_RELIEF_GAIN]
    if pc > relief:
        qc -= k * (pc - relief)
    elif pc < 0.0:
        qc -= k * pc
    if pr > relief:
        qr -= k * (pr - relief)
    elif pr < 0.0:
        qr -= k * pr
    return qc, qr


# ----------------------------------------------------------------------------- effects (E array)


@njit
def friction_force(E: np.ndarray, e: int, sd: float) -> float:
    """Piston friction (N, opposing ṡ): Lin 1994 eq. 20's direction-dependent Coulomb and
    viscous terms with a Stribeck bump from F_C to the stiction F_S (Simscape Translational
    Friction), F = [F_C± + (F_S± − F_C±) e^(−(ṡ/v_s)²)] tanh(ṡ/v_ε) + f_v± ṡ. The tanh makes
    the zero crossing smooth (continuous in ṡ), so RK4 integrates it."""
    if sd >= 0.0:
        fc = E[e + K_FC_POS]
        fs = E[e + K_FS_POS]
        fv = E[e + K_FV_POS]
    else:
        fc = E[e + K_FC_NEG]
        fs = E[e + K_FS_NEG]
        fv = E[e + K_FV_NEG]
    if fs > fc:
        z = sd / E[e + K_VS]
        fc += (fs - fc) * math.exp(-z * z)
    return fc * math.tanh(sd / E[e + K_VEPS]) + fv * sd


@njit
def effective_bulk(E: np.ndarray, bulk_liquid: float, p: float) -> float:
    """Bulk modulus of oil with entrained air at gauge pressure p (Simscape Hydraulic Fluid):
    E = E_l [1 + α (p_a/(p_a+p))^(1/n)] / [1 + α E_l (p_a/(p_a+p))^(1/n) / (n (p_a+p))]."""
    alpha = E[E_AIR]
    if alpha <= 0.0:
        return bulk_liquid
    n = E[E_POLY]
    pa = P_ATM + max(p, 0.0)
    r = (P_ATM / pa) ** (1.0 / n)
    return bulk_liquid * (1.0 + alpha * r) / (1.0 + alpha * bulk_liquid * r / (n * pa))


@njit
def viscosity_ratio(E: np.ndarray, temp: float) -> float:
    """ν(T)/ν(T_ref) with Walther's law (ASTM D341), ν in cSt and T in K."""
    nu = 10.0 ** (10.0 ** (E[E_WALTHER_A] - E[E_WALTHER_B] * math.log10(temp + 273.15))) - 0.7
    return nu / E[E_NU_REF]


@njit
def valve_edges(
    P: np.ndarray, E: np.ndarray, i: int, xo: float, pc: float, pr: float
) -> tuple[float, float, float]:
    """Chamber flows through the four metering edges of a spool at metering position xo (u plus
    null bias) with lap d (> 0 overlap, < 0 underlap) and a leakage opening a_L at every edge:
    a⁺ = max(xo − d, 0) + a_L opens P→cap and rod→T, a⁻ = max(−xo − d, 0) + a_L opens
    cap→T and P→rod (DESIGN §1.2's orifice law per edge). Also returns the throttling power
    Σ Δp·Q (W) that heats the oil."""
    o = N_GLOBAL + N_JOINT * i
    e = NE_GLOBAL + NE_JOINT * i
    lap = E[e + K_LAP]
    leak = E[e + K_LEAK_OPEN]
    ap = max(xo - lap, 0.0) + leak
    am = max(-xo - lap, 0.0) + leak
    ps = P[G_PS]
    d1 = max(ps - pc, 0.0)
    d2 = max(pc, 0.0)
    d3 = max(pr, 0.0)
    d4 = max(ps - pr, 0.0)
    q1 = P[o + J_CF0] * ap * math.sqrt(d1)  # P → cap
    q2 = P[o + J_CF1] * am * math.sqrt(d2)  # cap → T
    q3 = P[o + J_CF2] * ap * math.sqrt(d3)  # rod → T
    q4 = P[o + J_CF3] * am * math.sqrt(d4)  # P → rod
    return q1 - q2, q4 - q3, q1 * d1 + q2 * d2 + q3 * d3 + q4 * d4


@njit
def derivative(x: np.ndarray, v: np.ndarray, P: np.ndarray, dx: np.ndarray) -> None:
    """dx = f(x, v): rigid-body dynamics, chamber pressures and spool lag (DESIGN §1.1–1.2)."""
    derivative_fx(x, v, P, NOMINAL_EFFECTS, dx)


@njit
def oil_coefficients(x: np.ndarray, P: np.ndarray, E: np.ndarray) -> tuple[float, float, float]:
    """Temperature T, viscosity ratio ν(T)/ν(T_ref) and liquid bulk modulus b(T) of the oil.

    Viscosity scales viscous friction (∝ ν) and laminar leakage (∝ 1/ν); the liquid's bulk
    modulus falls ≈ 0.6 %/K (Tait, OpenHydraulics GenericOil). Without the thermal state:
    T_ref, 1 and b."""
    n = int(P[G_N])
    if E[E_ON] > 0.5 and E[E_THERMAL] > 0.5 and x.shape[0] > 5 * n:
        temp = x[5 * n]
        bulk = P[G_BULK] * math.exp(-E[E_BULK_PER_K] * (temp - E[E_T_REF]))
        return temp, viscosity_ratio(E, temp), bulk
    return E[E_T_REF] if E[E_ON] > 0.5 else 0.0, 1.0, P[G_BULK]


@njit
def derivative_fx(
    x: np.ndarray, v: np.ndarray, P: np.ndarray, E: np.ndarray, dx: np.ndarray
) -> None:
    """`derivative` with the effects E beyond the model (docs/simulator.md). With the thermal
    state on, x[5n] is the oil temperature: C Ṫ = Σ Δp·Q − C (T − T_amb)/τ."""
    temp, visc, bulk = oil_coefficients(x, P, E)
    _derivative(x, v, P, E, dx, temp, visc, bulk)


@njit
def _derivative(
    x: np.ndarray,
    v: np.ndarray,
    P: np.ndarray,
    E: np.ndarray,
    dx: np.ndarray,
    temp: float,
    visc: float,
    bulk: float,
) -> None:
    """The dynamics with the oil's temperature-dependent coefficients given (they change over
    minutes: `integrate_fx` evaluates them once per substep)."""
    n = int(P[G_N])
    fx = E[E_ON] > 0.5
    thermal = fx and E[E_THERMAL] > 0.5 and x.shape[0] > 5 * n
    heat = 0.0
    tau1 = 0.0
    tau2 = 0.0
    for i in range(n):
        o = N_GLOBAL + N_JOINT * i
        q = x[i]
        qd = x[n + i]
        pc = x[2 * n + i]
        pr = x[3 * n + i]
        u = x[4 * n + i]
        s, r = piston(P, i, q)
        sd = r * qd
        half = 0.5 * P[o + J_L]
        acap = P[o + J_ACAP]
        arod = P[o + J_AROD]
        if fx:
            e = NE_GLOBAL + NE_JOINT * i
            vcap = E[e + K_V0_CAP] + (half + s) * acap
            vrod = E[e + K_V0_ROD] + (half - s) * arod
            shift = E[e + K_BIAS_PER_K] * (temp - E[E_T_REF]) if thermal else 0.0
            qc, qr, power = valve_edges(P, E, i, u + E[e + K_BIAS] + shift, pc, pr)
            qc, qr = relief_flows(P, qc, qr, pc, pr)
            # Laminar leakage across the piston (cap → rod) and from each chamber to drain.
            q_int = E[e + K_LEAK_INT] / visc * (pc - pr)
            c_ext = E[e + K_LEAK_EXT] / visc
            qc -= q_int + c_ext * pc
            qr += q_int - c_ext * pr
            heat += power + q_int * (pc - pr) + c_ext * (pc * pc + pr * pr)
            dx[2 * n + i] = effective_bulk(E, bulk, pc) / vcap * (-acap * sd + qc)
            dx[3 * n + i] = effective_bulk(E, bulk, pr) / vrod * (arod * sd + qr)
        else:
            vcap = P[o + J_V0] + (half + s) * acap
            vrod = P[o + J_V0] + (half - s) * arod
            qc, qr = flow_rates(P, i, u, pc, pr)
            dx[2 * n + i] = bulk / vcap * (-acap * sd + qc)
            dx[3 * n + i] = bulk / vrod * (arod * sd + qr)
        # Spool: τ_v u̇ = k_v v − u, held at ±u_max (a saturated spool does not move outward).
        du = (P[o + J_KV] * v[i] - u) / P[o + J_TAU]
        umax = P[o + J_UMAX]
        if (u >= umax and du > 0.0) or (u <= -umax and du < 0.0):
            du = 0.0
        dx[4 * n + i] = du
        tau = r * (acap * pc - arod * pr)
        if fx:
            e = NE_GLOBAL + NE_JOINT * i
            tau -= r * friction_force(E, e, sd) + (visc - 1.0) * P[o + J_FV] * qd
        if i == 0:
            tau1 = tau
        else:
            tau2 = tau
        dx[i] = qd
    if n == 1:
        m11, _, _, h1, _ = mech_terms(P, x[0], 0.0, x[1], 0.0)
        dx[1] = (tau1 - h1) / m11
    else:
        m11, m12, m22, h1, h2 = mech_terms(P, x[0], x[1], x[2], x[3])
        det = m11 * m22 - m12 * m12
        b1 = tau1 - h1
        b2 = tau2 - h2
        a1 = (m22 * b1 - m12 * b2) / det
        a2 = (m11 * b2 - m12 * b1) / det
        # A joint resting on an end stop and pushed into it is held by the stop's reaction
        # torque on its own coordinate: its acceleration is 0 and the other joint moves with
        # its own row alone (M q̈ = b + [0, λ]ᵀ, q̈₂ = 0 ⇒ q̈₁ = b₁/m₁₁). Without this, the
        # clamped joint's large push into the stop leaks into the other through m₁₂.
        stop1 = _pushing_stop(P, 0, x[0], a1)
        stop2 = _pushing_stop(P, 1, x[1], a2)
        if stop1 and stop2:
            a1 = a2 = 0.0
        elif stop2:
            a1, a2 = b1 / m11, 0.0
        elif stop1:
            a1, a2 = 0.0, b2 / m22
        dx[2] = a1
        dx[3] = a2
    if x.shape[0] > 5 * n:
        dx[5 * n] = 0.0
        if thermal:
            dx[5 * n] = heat / E[E_HEAT_CAP] - (x[5 * n] - E[E_T_AMB]) / E[E_TAU_COOL]


@njit
def _pushing_stop(P: np.ndarray, i: int, q: float, qdd: float) -> bool:
    """Joint i sits on an end stop (|s| = L/2, where `_constrain` puts it) and its computed
    acceleration pushes it further into the stop."""
    o = N_GLOBAL + N_JOINT * i
    half = 0.5 * P[o + J_L]
    s, r = piston(P, i, q)
    tol = 1e-9 * P[o + J_L]
    return (s >= half - tol and r * qdd > 0.0) or (s <= -half + tol and r * qdd < 0.0)


@njit
def _constrain(x: np.ndarray, P: np.ndarray) -> None:
    """Inelastic end stops, spool travel and a hard pressure guard.

    The stops are an allowed model (DESIGN §1.1): a piston reaching ±L/2 is put back on the stop
    and loses its velocity into it. The pressure guard only ever acts when a step overshoots the
    relief/cavitation bounds; it keeps the square roots real (Sakai Sec. II-B).
    """
    n = int(P[G_N])
    # 5 % above the cylinders' relief valves (cracking at relief_ratio = 1.05 × the working
    # supply): the guard stays where it is when a station's supply falls or is switched off.
    pmax = P[G_RELIEF] * (1.1 / 1.05)
    for i in range(n):
        o = N_GLOBAL + N_JOINT * i
        half = 0.5 * P[o + J_L]
        s, r = piston(P, i, x[i])
        if s > half:
            x[i] = joint_angle(P, i, half)
            if x[n + i] * r > 0.0:
                x[n + i] = 0.0
        elif s < -half:
            x[i] = joint_angle(P, i, -half)
            if x[n + i] * r < 0.0:
                x[n + i] = 0.0
        x[2 * n + i] = min(max(x[2 * n + i], 0.0), pmax)
        x[3 * n + i] = min(max(x[3 * n + i], 0.0), pmax)
        umax = P[o + J_UMAX]
        x[4 * n + i] = min(max(x[4 * n + i], -umax), umax)


@njit
def integrate(
    x: np.ndarray, v: np.ndarray, P: np.ndarray, dt: float, nsub: int, work: np.ndarray
) -> None:
    """Advance x in place by dt with v held: nsub classical RK4 substeps, each followed by the
    constraints. `work` is a caller-owned (5, len(x)) scratch array (no allocation here)."""
    integrate_fx(x, v, P, NOMINAL_EFFECTS, dt, nsub, work)


@njit
def integrate_fx(
    x: np.ndarray,
    v: np.ndarray,
    P: np.ndarray,
    E: np.ndarray,
    dt: float,
    nsub: int,
    work: np.ndarray,
) -> None:
    """`integrate` with the effects E beyond the model (see `derivative_fx`)."""
    h = dt / nsub
    k1 = work[0]
    k2 = work[1]
    k3 = work[2]
    k4 = work[3]
    xt = work[4]
    m = x.shape[0]
    for _ in range(nsub):
        # The oil's coefficients drift by ~1e-5 K per substep: held over it (see _derivative).
        temp, visc, bulk = oil_coefficients(x, P, E)
        _derivative(x, v, P, E, k1, temp, visc, bulk)
        for j in range(m):
            xt[j] = x[j] + 0.5 * h * k1[j]
        _derivative(xt, v, P, E, k2, temp, visc, bulk)
        for j in range(m):
            xt[j] = x[j] + 0.5 * h * k2[j]
        _derivative(xt, v, P, E, k3, temp, visc, bulk)
        for j in range(m):
            xt[j] = x[j] + h * k3[j]
        _derivative(xt, v, P, E, k4, temp, visc, bulk)
        for j in range(m):
            x[j] += h / 6.0 * (k1[j] + 2.0 * k2[j] + 2.0 * k3[j] + k4[j])
        _constrain(x, P)


# ----------------------------------------------------------------------------- vectorised helpers


@njit
def _cylinder_batch(P: np.ndarray, q: np.ndarray, s: np.ndarray, r: np.ndarray) -> None:
    n = q.shape[1]
    for k in range(q.shape[0]):
        for i in range(n):
            s[k, i], r[k, i] = piston(P, i, q[k, i])


@njit
def _inverse_dynamics_batch(
    P: np.ndarray, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray, tau: np.ndarray
) -> None:
    n = q.shape[1]
    for k in range(q.shape[0]):
        if n == 1:
            m11, _, _, h1, _ = mech_terms(P, q[k, 0], 0.0, qd[k, 0], 0.0)
            tau[k, 0] = m11 * qdd[k, 0] + h1
        else:
            m11, m12, m22, h1, h2 = mech_terms(P, q[k, 0], q[k, 1], qd[k, 0], qd[k, 1])
            tau[k, 0] = m11 * qdd[k, 0] + m12 * qdd[k, 1] + h1
            tau[k, 1] = m12 * qdd[k, 0] + m22 * qdd[k, 1] + h2


@njit
def _joint_angle_batch(P: np.ndarray, s: np.ndarray, q: np.ndarray) -> None:
    for k in range(s.shape[0]):
        for i in range(s.shape[1]):
            q[k, i] = joint_angle(P, i, s[k, i])


def _rows(a: np.ndarray, n: int) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=float).reshape(-1, n))


def cylinder(params: PlantParams, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Piston displacement s and moment arm r for joint angles q of shape (..., n)."""
    q = np.asarray(q, dtype=float)
    qq = _rows(q, params.n)
    s = np.empty_like(qq)
    r = np.empty_like(qq)
    _cylinder_batch(params.pack(), qq, s, r)
    return s.reshape(q.shape), r.reshape(q.shape)


def joint_from_piston(params: PlantParams, s: np.ndarray) -> np.ndarray:
    """Joint angles (..., n) at piston displacements s (..., n): the inverse of `cylinder`."""
    s = np.asarray(s, dtype=float)
    flat = _rows(s, params.n)
    out = np.empty_like(flat)
    _joint_angle_batch(params.pack(), flat, out)
    return out.reshape(s.shape)


def inverse_dynamics(
    params: PlantParams, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray
) -> np.ndarray:
    """Joint torques τ = M(q) q̈ + c(q, q̇) + Fv q̇ + g(q), shape (..., n)."""
    q = np.asarray(q, dtype=float)
    tau = np.empty_like(_rows(q, params.n))
    _inverse_dynamics_batch(
        params.pack(), _rows(q, params.n), _rows(qd, params.n), _rows(qdd, params.n), tau
    )
    return tau.reshape(q.shape)


def gravity_torque(params: PlantParams, q: np.ndarray) -> np.ndarray:
    q = np.asarray(q, dtype=float)
    return inverse_dynamics(params, q, np.zeros_like(q), np.zeros_like(q))


def torque_from_pressures(
    params: PlantParams, q: np.ndarray, p_cap: np.ndarray, p_rod: np.ndarray
) -> np.ndarray:
    """τ_i = r_i(q_i) (A⁺ p⁺_i − A⁻ p⁻_i)."""
    _, r = cylinder(params, q)
    return r * (params.area_cap * np.asarray(p_cap) - params.area_rod * np.asarray(p_rod))


def equilibrium_state(params: PlantParams, q: np.ndarray, p_rod: float | None = None) -> np.ndarray:
    """A state at rest at q, holding against gravity: p⁻ given (default 3/7 of supply), p⁺ from
    the static balance r (A⁺p⁺ − A⁻p⁻) = g(q)."""
    q = np.asarray(q, dtype=float).reshape(params.n)
    pr = np.full(params.n, 3.0 / 7.0 * params.supply_pressure if p_rod is None else p_rod)
    tau_g = gravity_torque(params, q[None, :])[0]
    _, r = cylinder(params, q)
    pc = (tau_g / r + params.area_rod * pr) / params.area_cap
    pc = np.clip(pc, 0.0, params.supply_pressure)
    return np.concatenate([q, np.zeros(params.n), pc, pr, np.zeros(params.n)])


def state_derivative(params: PlantParams, x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """f(x, v) as a new array (for scipy's solve_ivp and the validation simulation)."""
    dx = np.empty(len(x))
    derivative(np.ascontiguousarray(x, dtype=float), np.asarray(v, dtype=float), params.pack(), dx)
    return dx
