"""The chain's full state derivative and integrator: rigid bodies (`rnea`), and per joint
the chambers, valve and spool of DESIGN §1.2 around its motor or jacks, jitted.

State x (length 5n, + the oil temperature as x[5n] with the thermal effect), as the 2-DOF
plant: [q, q̇, p⁺, p⁻, u]. A joint's jacks share its valve and chambers (the boom's two jacks
are plumbed in parallel), so per joint

    V⁺ = V0 + Σ_k A⁺_k (ℓ_k − ℓc_k),   V⁻ = V0 + Σ_k A⁻_k (ℓc_k + L_k − ℓ_k),
    ṗ⁺ = b/V⁺ (−Σ A⁺_k ℓ̇_k + Q⁺),      ṗ⁻ = b/V⁻ (Σ A⁻_k ℓ̇_k + Q⁻),
    τ = Σ_k ℓ′_k (A⁺_k p⁺ − A⁻_k p⁻),  ℓ̇_k = ℓ′_k q̇;

a motor has fixed chambers V0 and displaces D per shaft radian at N shaft radians per joint
radian: ṗ± = b/V0 (∓D N q̇ + Q±), τ = N D (p⁺ − p⁻). The valve flows, relief valve, leakage and
friction are the 2-DOF plant's own kernels (`controller.plant.dynamics`) on the fluid array,
which has `PlantParams.pack`'s layout; the effects array E has `PlantEffects.pack`'s.
"""

from __future__ import annotations

import numpy as np

from controller.plant.chain.model import (
    C_N,
    DRIVE_JACKS,
    DRIVE_MOTOR,
    K_ACAP,
    K_AROD,
    K_CLOSED,
    K_STROKE,
    L_DRIVE,
    L_GEAR,
    L_JACK0,
    L_NJACK,
    L_OFF,
)
from controller.plant.chain.rnea import (
    W_BIAS,
    W_RHS,
    W_TAU,
    WS_STRIDE,
    cholesky_solve,
    forward_dynamics,
    jack_geometry,
    mass_matrix,
)
from controller.plant.dynamics import (
    effective_bulk,
    flow_rates,
    friction_force,
    oil_coefficients,
    relief_flows,
    valve_edges,
)
from controller.plant.jit import njit
from controller.plant.params import (
    E_HEAT_CAP,
    E_ON,
    E_T_AMB,
    E_T_REF,
    E_TAU_COOL,
    E_THERMAL,
    G_RELIEF,
    J_ACAP,
    J_AROD,
    J_FV,
    J_KV,
    J_TAU,
    J_UMAX,
    J_V0,
    K_BIAS,
    K_BIAS_PER_K,
    K_LEAK_EXT,
    K_LEAK_INT,
    K_V0_CAP,
    K_V0_ROD,
    N_GLOBAL,
    N_JOINT,
    NE_GLOBAL,
    NE_JOINT,
)


@njit
def drive_state(
    L: np.ndarray, J: np.ndarray, F: np.ndarray, E: np.ndarray, i: int, q: float, fx: bool
):
    """Chamber volumes V⁺, V⁻ (true dead volumes with the effects on), the displacement rates
    per joint velocity D⁺ = Σ A⁺ℓ′, D⁻ = Σ A⁻ℓ′, and the torque per chamber pressure (T⁺, T⁻:
    τ = T⁺p⁺ − T⁻p⁻) of joint i at angle q. Motors: V0, D = T = N·D_motor."""
    o = N_GLOBAL + N_JOINT * i
    if fx:
        e = NE_GLOBAL + NE_JOINT * i
        vc = E[e + K_V0_CAP]
        vr = E[e + K_V0_ROD]
    else:
        vc = F[o + J_V0]
        vr = F[o + J_V0]
    kind = int(L[i, L_DRIVE])
    if kind == DRIVE_MOTOR:
        g = L[i, L_GEAR]
        return vc, vr, g * F[o + J_ACAP], g * F[o + J_AROD]
    dc = 0.0
    dr = 0.0
    if kind == DRIVE_JACKS:
        th = q + L[i, L_OFF]
        k0 = int(L[i, L_JACK0])
        for k in range(k0, k0 + int(L[i, L_NJACK])):
            ell, l1, _, _, _, _, _ = jack_geometry(J, k, th)
            ext = ell - J[k, K_CLOSED]
            vc += J[k, K_ACAP] * ext
            vr += J[k, K_AROD] * (J[k, K_STROKE] - ext)
            dc += J[k, K_ACAP] * l1
            dr += J[k, K_AROD] * l1
    return vc, vr, dc, dr


@njit
def drive_friction(L: np.ndarray, J: np.ndarray, E: np.ndarray, i: int, q: float, qd: float):
    """Joint torque of the effects' actuator friction: Σ ℓ′_k F(ℓ′_k q̇) over the jacks (Lin's
    law per piston), N F(N q̇) for a motor (the law at the motor shaft)."""
    e = NE_GLOBAL + NE_JOINT * i
    kind = int(L[i, L_DRIVE])
    if kind == DRIVE_MOTOR:
        g = L[i, L_GEAR]
        return g * friction_force(E, e, g * qd)
    out = 0.0
    if kind == DRIVE_JACKS:
        th = q + L[i, L_OFF]
        k0 = int(L[i, L_JACK0])
        for k in range(k0, k0 + int(L[i, L_NJACK])):
            _, l1, _, _, _, _, _ = jack_geometry(J, k, th)
            out += l1 * friction_force(E, e, l1 * qd)
    return out


@njit
def derivative_chain(
    x: np.ndarray,
    v: np.ndarray,
    C: np.ndarray,
    L: np.ndarray,
    J: np.ndarray,
    F: np.ndarray,
    E: np.ndarray,
    ws: np.ndarray,
    dx: np.ndarray,
):
    """dx = f(x, v) of the chain (module docstring); E[E_ON] = 0: the nominal model."""
    temp, visc, bulk = oil_coefficients(x, F, E)
    _derivative(x, v, C, L, J, F, E, ws, dx, temp, visc, bulk)


@njit
def _derivative(
    x: np.ndarray,
    v: np.ndarray,
    C: np.ndarray,
    L: np.ndarray,
    J: np.ndarray,
    F: np.ndarray,
    E: np.ndarray,
    ws: np.ndarray,
    dx: np.ndarray,
    temp: float,
    visc: float,
    bulk: float,
):
    n = int(C[C_N])
    fx = E[E_ON] > 0.5
    thermal = fx and E[E_THERMAL] > 0.5 and x.shape[0] > 5 * n
    heat = 0.0
    for i in range(n):
        o = N_GLOBAL + N_JOINT * i
        q = x[i]
        qd = x[n + i]
        pc = x[2 * n + i]
        pr = x[3 * n + i]
        u = x[4 * n + i]
        vc, vr, dc, dr = drive_state(L, J, F, E, i, q, fx)
        tau = dc * pc - dr * pr
        if fx:
            e = NE_GLOBAL + NE_JOINT * i
            shift = E[e + K_BIAS_PER_K] * (temp - E[E_T_REF]) if thermal else 0.0
            qc, qr, power = valve_edges(F, E, i, u + E[e + K_BIAS] + shift, pc, pr)
            qc, qr = relief_flows(F, qc, qr, pc, pr)
            q_int = E[e + K_LEAK_INT] / visc * (pc - pr)
            c_ext = E[e + K_LEAK_EXT] / visc
            qc -= q_int + c_ext * pc
            qr += q_int - c_ext * pr
            heat += power + q_int * (pc - pr) + c_ext * (pc * pc + pr * pr)
            dx[2 * n + i] = effective_bulk(E, bulk, pc) / vc * (-dc * qd + qc)
            dx[3 * n + i] = effective_bulk(E, bulk, pr) / vr * (dr * qd + qr)
            tau -= drive_friction(L, J, E, i, q, qd) + visc * F[o + J_FV] * qd
        else:
            qc, qr = flow_rates(F, i, u, pc, pr)
            dx[2 * n + i] = bulk / vc * (-dc * qd + qc)
            dx[3 * n + i] = bulk / vr * (dr * qd + qr)
            tau -= F[o + J_FV] * qd
        du = (F[o + J_KV] * v[i] - u) / F[o + J_TAU]
        umax = F[o + J_UMAX]
        if (u >= umax and du > 0.0) or (u <= -umax and du < 0.0):
            du = 0.0
        dx[4 * n + i] = du
        ws[i, W_TAU] = tau
        dx[i] = qd
    forward_dynamics(C, L, J, x[:n], x[n : 2 * n], ws)
    stop_reactions(C, L, J, x[:n], ws)
    for i in range(n):
        dx[n + i] = ws[i, W_RHS]
    if x.shape[0] > 5 * n:
        dx[5 * n] = 0.0
        if thermal:
            dx[5 * n] = heat / E[E_HEAT_CAP] - (x[5 * n] - E[E_T_AMB]) / E[E_TAU_COOL]


@njit
def _pushing_stop(L: np.ndarray, J: np.ndarray, i: int, q: float, qdd: float) -> bool:
    """Joint i's jack sits on an end of its stroke (where `constrain_chain` puts it) and the
    computed acceleration pushes it further in (`controller.plant.dynamics._pushing_stop`)."""
    if int(L[i, L_DRIVE]) != DRIVE_JACKS:
        return False
    k0 = int(L[i, L_JACK0])
    for k in range(k0, k0 + int(L[i, L_NJACK])):
        ell, l1, _, _, _, _, _ = jack_geometry(J, k, q + L[i, L_OFF])
        lo = J[k, K_CLOSED]
        hi = lo + J[k, K_STROKE]
        tol = 1e-9 * J[k, K_STROKE]
        if (ell >= hi - tol and l1 * qdd > 0.0) or (ell <= lo + tol and l1 * qdd < 0.0):
            return True
    return False


@njit
def stop_reactions(C: np.ndarray, L: np.ndarray, J: np.ndarray, q: np.ndarray, ws: np.ndarray):
    """Joints resting on an end stop and pushed into it are held by the stop's reaction on
    their own coordinate: their q̈ is 0 and the others move by their own rows, M_FF q̈_F = b_F
    (the 2-joint rule of `controller.plant.dynamics._derivative`, for n joints). Without it a
    clamped joint's push into its stop leaks into the others through the mass matrix's
    coupling. Re-solves ws[:, W_RHS] in place only where a joint is held. A single joint has
    no coupling to leak through: as in the 1-DOF plant, `constrain_chain` alone holds it."""
    n = int(C[C_N])
    if n < 2:
        return
    rhs = ws[:, W_RHS]
    held = False
    for i in range(n):
        if _pushing_stop(L, J, i, q[i], rhs[i]):
            held = True
            rhs[i] = np.nan  # marks joint i held until the re-solve below
    if not held:
        return
    M = ws[:, WS_STRIDE : WS_STRIDE + n]
    mass_matrix(C, L, J, q, ws, M)
    for i in range(n):
        if np.isnan(rhs[i]):
            for k in range(n):
                M[i, k] = 0.0
                M[k, i] = 0.0
            M[i, i] = 1.0
            rhs[i] = 0.0
        else:
            rhs[i] = ws[i, W_TAU] - ws[i, W_BIAS]
    cholesky_solve(M, rhs, n)


@njit
def _stop_angle(L: np.ndarray, J: np.ndarray, i: int, k: int, q: float, target: float) -> float:
    """The joint angle near q at which jack k is `target` long (Newton on ℓ(q))."""
    for _ in range(20):
        ell, l1, _, _, _, _, _ = jack_geometry(J, k, q + L[i, L_OFF])
        step = (ell - target) / l1
        q -= step
        if abs(step) < 1e-13:
            break
    return q


@njit
def constrain_chain(x: np.ndarray, C: np.ndarray, L: np.ndarray, J: np.ndarray, F: np.ndarray):
    """Inelastic end stops of the jacks, spool travel and the pressure guard (as the 2-DOF
    plant's `_constrain`): a jack past its stroke is put back on its stop and the joint loses
    the velocity that drove it there."""
    n = int(C[C_N])
    # As the 2-DOF plant's guard: 5 % above the relief valves, so that it stays where it is
    # when a station's supply falls or is switched off.
    pmax = F[G_RELIEF] * (1.1 / 1.05)
    for i in range(n):
        o = N_GLOBAL + N_JOINT * i
        if int(L[i, L_DRIVE]) == DRIVE_JACKS:
            k0 = int(L[i, L_JACK0])
            for k in range(k0, k0 + int(L[i, L_NJACK])):
                ell, l1, _, _, _, _, _ = jack_geometry(J, k, x[i] + L[i, L_OFF])
                lo = J[k, K_CLOSED]
                hi = lo + J[k, K_STROKE]
                if ell > hi:
                    x[i] = _stop_angle(L, J, i, k, x[i], hi)
                    if x[n + i] * l1 > 0.0:
                        x[n + i] = 0.0
                elif ell < lo:
                    x[i] = _stop_angle(L, J, i, k, x[i], lo)
                    if x[n + i] * l1 < 0.0:
                        x[n + i] = 0.0
        x[2 * n + i] = min(max(x[2 * n + i], 0.0), pmax)
        x[3 * n + i] = min(max(x[3 * n + i], 0.0), pmax)
        umax = F[o + J_UMAX]
        x[4 * n + i] = min(max(x[4 * n + i], -umax), umax)


@njit
def integrate_chain(
    x: np.ndarray,
    v: np.ndarray,
    C: np.ndarray,
    L: np.ndarray,
    J: np.ndarray,
    F: np.ndarray,
    E: np.ndarray,
    dt: float,
    nsub: int,
    work: np.ndarray,
    ws: np.ndarray,
    constrain: bool,
):
    """Advance x in place by dt with v held: nsub classical RK4 substeps (as the 2-DOF plant's
    `integrate_fx`), each followed by `constrain_chain` when `constrain`. `work` is (5, len(x))
    and `ws` the `rnea.workspace`: nothing is allocated."""
    h = dt / nsub
    k1 = work[0]
    k2 = work[1]
    k3 = work[2]
    k4 = work[3]
    xt = work[4]
    m = x.shape[0]
    for _ in range(nsub):
        temp, visc, bulk = oil_coefficients(x, F, E)
        _derivative(x, v, C, L, J, F, E, ws, k1, temp, visc, bulk)
        for j in range(m):
            xt[j] = x[j] + 0.5 * h * k1[j]
        _derivative(xt, v, C, L, J, F, E, ws, k2, temp, visc, bulk)
        for j in range(m):
            xt[j] = x[j] + 0.5 * h * k2[j]
        _derivative(xt, v, C, L, J, F, E, ws, k3, temp, visc, bulk)
        for j in range(m):
            xt[j] = x[j] + h * k3[j]
        _derivative(xt, v, C, L, J, F, E, ws, k4, temp, visc, bulk)
        for j in range(m):
            x[j] += h / 6.0 * (k1[j] + 2.0 * k2[j] + 2.0 * k3[j] + k4[j])
        if constrain:
            constrain_chain(x, C, L, J, F)
