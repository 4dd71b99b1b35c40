"""Recursive Newton–Euler dynamics of a chain with its jacks' minor links, jitted.

Inverse dynamics (Luh–Walker–Paul, thesis §4.3.1–4.3.2): an outward pass of angular velocity,
angular acceleration and origin acceleration through the joint frames F_i (gravity enters as
the base accelerating upward, a₀ = −g), an inward pass of forces and moments; τ_i is the
moment about the joint axis. A jack's cylinder and piston (§4.3.3) move with the parent link
plus a motion fixed by the joint angle: a body point P(q) = A + s(q) u(q) and a turn ψ(q)
about the joint axis, u the jack's direction. Their Newton–Euler wrenches load the parent link
like any attached body and add P′·F + ψ′ n_z to τ_i (Jourdain's principle, the virtual power
of the motion q̇_i gives them): the closed triangle is solved kinematically, as the thesis
does, with no constraint force left to compute. Mass matrix: one inverse-dynamics column per
joint (q̇ = 0, q̈ = e_j, no gravity); forward dynamics by Cholesky on it.

All scratch lives in a caller-owned `ws` (n, WS_STRIDE) array: nothing here allocates.
"""

from __future__ import annotations

import math

import numpy as np

from controller.plant.chain.model import (
    B_DIST,
    B_IAX,
    B_ITR,
    B_MASS,
    C_G,
    C_N,
    K_A,
    K_B,
    K_CYL,
    K_PIS,
    L_ARMATURE,
    L_COM,
    L_INERTIA,
    L_JACK0,
    L_MASS,
    L_NJACK,
    L_OFF,
    L_P,
    L_R,
)
from controller.plant.jit import njit

# Scratch columns per joint.
W_RZ = 0  # rotation F_{i-1} ← F_i (9)
W_OM = 9  # ω_i in F_i
W_DOM = 12  # ω̇_i
W_ACC = 15  # origin acceleration of F_i
W_F = 18  # force on link i (and outboard) at its joint, F_i
W_N = 21  # moment about F_i's origin
W_FJ = 24  # jack bodies' force on the parent link, in G_i
W_NJ = 27  # their moment about G_i's origin
W_TX = 30  # jack bodies' extra joint torque (P′·F + ψ′ n_z)
W_QDD = 31  # unit acceleration column for the mass matrix
W_ZERO = 32  # zero velocity column for the mass matrix
W_RHS = 33  # right-hand side / joint accelerations of the forward dynamics
W_TAU = 34  # joint torques
W_BIAS = 35  # bias torques c(q, q̇) + g(q)
WS_STRIDE = 36


def workspace(n: int) -> np.ndarray:
    """The scratch array (n, WS_STRIDE) plus the mass matrix (n, n) the dynamics need."""
    return np.zeros((n, WS_STRIDE + n))


# ----------------------------------------------------------------------------- 3-vectors


@njit
def cross(a0: float, a1: float, a2: float, b0: float, b1: float, b2: float):
    return a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0


@njit
def mat_vec(m: np.ndarray, o: int, v0: float, v1: float, v2: float):
    """m[o:o+9] (row-major 3×3) times v."""
    return (
        m[o] * v0 + m[o + 1] * v1 + m[o + 2] * v2,
        m[o + 3] * v0 + m[o + 4] * v1 + m[o + 5] * v2,
        m[o + 6] * v0 + m[o + 7] * v1 + m[o + 8] * v2,
    )


@njit
def mat_t_vec(m: np.ndarray, o: int, v0: float, v1: float, v2: float):
    """The transpose of m[o:o+9] times v."""
    return (
        m[o] * v0 + m[o + 3] * v1 + m[o + 6] * v2,
        m[o + 1] * v0 + m[o + 4] * v1 + m[o + 7] * v2,
        m[o + 2] * v0 + m[o + 5] * v1 + m[o + 8] * v2,
    )


# ----------------------------------------------------------------------------- jack kinematics


@njit
def jack_geometry(J: np.ndarray, k: int, theta: float):
    """Length ℓ and its derivatives ℓ′, ℓ″ in the joint angle, the turn rates ψ′, ψ″ of the
    jack about the joint axis, and its unit direction u (in G_i, in the rotation plane).

    B(θ) = Rot(z, θ) B_i, d = B − A, d′ = ẑ × B, d″ = ẑ × d′ (A is fixed on the parent)."""
    c = math.cos(theta)
    s = math.sin(theta)
    bx = J[k, K_B] * c - J[k, K_B + 1] * s
    by = J[k, K_B] * s + J[k, K_B + 1] * c
    dx = bx - J[k, K_A]
    dy = by - J[k, K_A + 1]
    d1x, d1y = -by, bx
    d2x, d2y = -bx, -by
    ell = math.sqrt(dx * dx + dy * dy)
    l1 = (dx * d1x + dy * d1y) / ell
    l2 = (d1x * d1x + d1y * d1y + dx * d2x + dy * d2y - l1 * l1) / ell
    k1 = dx * d1y - dy * d1x
    k2 = dx * d2y - dy * d2x
    p1 = k1 / (ell * ell)
    p2 = k2 / (ell * ell) - 2.0 * p1 * l1 / ell
    return ell, l1, l2, p1, p2, dx / ell, dy / ell


@njit
def _minor_body(
    J: np.ndarray,
    k: int,
    off: int,
    along: float,
    along1: float,
    along2: float,
    ux: float,
    uy: float,
    p1: float,
    p2: float,
    w: tuple,  # ω of the parent in G
    dw: tuple,  # ω̇ of the parent in G
    a0: tuple,  # acceleration of G's origin
    qd: float,
    qdd: float,
):
    """Newton–Euler wrench (F, moment about G's origin) of one minor body and its extra joint
    torque. Its centre P = A + s u with s = `along` (s′, s″ = along1, along2)."""
    m = J[k, off + B_MASS]
    iax = J[k, off + B_IAX]
    itr = J[k, off + B_ITR]
    ex, ey = -uy, ux  # ẑ × u
    px = J[k, K_A] + along * ux
    py = J[k, K_A + 1] + along * uy
    pz = J[k, K_A + 2]
    # P′ = s′ u + s ψ′ e;  P″ = s″ u + 2 s′ ψ′ e + s (ψ″ e − ψ′² u)
    v1x = along1 * ux + along * p1 * ex
    v1y = along1 * uy + along * p1 * ey
    v2x = along2 * ux + 2.0 * along1 * p1 * ex + along * (p2 * ex - p1 * p1 * ux)
    v2y = along2 * uy + 2.0 * along1 * p1 * ey + along * (p2 * ey - p1 * p1 * uy)
    # Acceleration of P: the parent's field plus the relative motion (Coriolis 2 ω × P′ q̇).
    t0, t1, t2 = cross(w[0], w[1], w[2], px, py, pz)
    c0, c1, c2 = cross(w[0], w[1], w[2], t0, t1, t2)
    e0, e1, e2 = cross(dw[0], dw[1], dw[2], px, py, pz)
    g0, g1, g2 = cross(w[0], w[1], w[2], v1x, v1y, 0.0)
    ax = a0[0] + e0 + c0 + 2.0 * g0 * qd + v1x * qdd + v2x * qd * qd
    ay = a0[1] + e1 + c1 + 2.0 * g1 * qd + v1y * qdd + v2y * qd * qd
    az = a0[2] + e2 + c2 + 2.0 * g2 * qd
    fx, fy, fz = m * ax, m * ay, m * az
    # Angular velocity and acceleration: the parent's plus ψ̇ about the joint axis ẑ.
    ow0, ow1, ow2 = w[0], w[1], w[2] + p1 * qd
    h0, h1, h2 = cross(w[0], w[1], w[2], 0.0, 0.0, p1 * qd)
    od0 = dw[0] + h0
    od1 = dw[1] + h1
    od2 = dw[2] + h2 + p1 * qdd + p2 * qd * qd
    # Axisymmetric inertia I = I_t (1 − u uᵀ) + I_a u uᵀ (u in the xy plane).
    di = iax - itr
    i00 = itr + di * ux * ux
    i01 = di * ux * uy
    i11 = itr + di * uy * uy
    i22 = itr
    l0 = i00 * ow0 + i01 * ow1
    l1 = i01 * ow0 + i11 * ow1
    l2 = i22 * ow2
    q0, q1, q2 = cross(ow0, ow1, ow2, l0, l1, l2)
    n0 = i00 * od0 + i01 * od1 + q0
    n1 = i01 * od0 + i11 * od1 + q1
    n2 = i22 * od2 + q2
    tau = v1x * fx + v1y * fy + p1 * n2
    r0, r1, r2 = cross(px, py, pz, fx, fy, fz)
    return fx, fy, fz, n0 + r0, n1 + r1, n2 + r2, tau


# ----------------------------------------------------------------------------- inverse dynamics


@njit
def rnea(
    C: np.ndarray,
    L: np.ndarray,
    J: np.ndarray,
    q: np.ndarray,
    qd: np.ndarray,
    qdd: np.ndarray,
    gravity: float,
    ws: np.ndarray,
    tau: np.ndarray,
):
    """τ = M(q) q̈ + c(q, q̇) + gravity·g(q) (rigid bodies only: no friction, no actuators)."""
    n = int(C[C_N])
    w = (0.0, 0.0, 0.0)
    dw = (0.0, 0.0, 0.0)
    acc = (-gravity * C[C_G], -gravity * C[C_G + 1], -gravity * C[C_G + 2])
    for i in range(n):
        # Into G_i (fixed on the parent) through C_{i-1}.
        pz0, pz1, pz2 = L[i, L_P], L[i, L_P + 1], L[i, L_P + 2]
        t0, t1, t2 = cross(w[0], w[1], w[2], pz0, pz1, pz2)
        c0, c1, c2 = cross(w[0], w[1], w[2], t0, t1, t2)
        e0, e1, e2 = cross(dw[0], dw[1], dw[2], pz0, pz1, pz2)
        wg = mat_t_vec(L[i], L_R, w[0], w[1], w[2])
        dwg = mat_t_vec(L[i], L_R, dw[0], dw[1], dw[2])
        ag = mat_t_vec(L[i], L_R, acc[0] + e0 + c0, acc[1] + e1 + c1, acc[2] + e2 + c2)
        # The jacks driving joint i ride on the parent: their wrenches, in G_i.
        th = q[i] + L[i, L_OFF]
        fj0 = fj1 = fj2 = nj0 = nj1 = nj2 = tx = 0.0
        k0 = int(L[i, L_JACK0])
        for k in range(k0, k0 + int(L[i, L_NJACK])):
            ell, l1, l2, p1, p2, ux, uy = jack_geometry(J, k, th)
            for body in range(2):
                # The cylinder's centre is fixed along the jack from A; the piston's slides
                # with the length (s = ℓ − c, s′ = ℓ′, s″ = ℓ″).
                if body == 0:
                    off, s0, s1, s2 = K_CYL, J[k, K_CYL + B_DIST], 0.0, 0.0
                else:
                    off, s0, s1, s2 = K_PIS, ell - J[k, K_PIS + B_DIST], l1, l2
                a, b, c, d, e, f, t = _minor_body(
                    J, k, off, s0, s1, s2, ux, uy, p1, p2, wg, dwg, ag, qd[i], qdd[i]
                )
                fj0 += a
                fj1 += b
                fj2 += c
                nj0 += d
                nj1 += e
                nj2 += f
                tx += t
        ws[i, W_FJ], ws[i, W_FJ + 1], ws[i, W_FJ + 2] = fj0, fj1, fj2
        ws[i, W_NJ], ws[i, W_NJ + 1], ws[i, W_NJ + 2] = nj0, nj1, nj2
        ws[i, W_TX] = tx
        # Into F_i: R = R_c Rot(z, θ).
        ct = math.cos(th)
        st = math.sin(th)
        o = W_RZ
        for r in range(3):
            rc0 = L[i, L_R + 3 * r]
            rc1 = L[i, L_R + 3 * r + 1]
            ws[i, o + 3 * r] = rc0 * ct + rc1 * st
            ws[i, o + 3 * r + 1] = -rc0 * st + rc1 * ct
            ws[i, o + 3 * r + 2] = L[i, L_R + 3 * r + 2]
        wz0, wz1, wz2 = ct * wg[0] + st * wg[1], -st * wg[0] + ct * wg[1], wg[2]
        h0, h1, h2 = cross(wz0, wz1, wz2, 0.0, 0.0, qd[i])
        dw = (
            ct * dwg[0] + st * dwg[1] + h0,
            -st * dwg[0] + ct * dwg[1] + h1,
            dwg[2] + h2 + qdd[i],
        )
        w = (wz0, wz1, wz2 + qd[i])
        acc = (ct * ag[0] + st * ag[1], -st * ag[0] + ct * ag[1], ag[2])
        ws[i, W_OM], ws[i, W_OM + 1], ws[i, W_OM + 2] = w
        ws[i, W_DOM], ws[i, W_DOM + 1], ws[i, W_DOM + 2] = dw
        ws[i, W_ACC], ws[i, W_ACC + 1], ws[i, W_ACC + 2] = acc
    for i in range(n - 1, -1, -1):
        w = (ws[i, W_OM], ws[i, W_OM + 1], ws[i, W_OM + 2])
        dw = (ws[i, W_DOM], ws[i, W_DOM + 1], ws[i, W_DOM + 2])
        m = L[i, L_MASS]
        cx, cy, cz = L[i, L_COM], L[i, L_COM + 1], L[i, L_COM + 2]
        t0, t1, t2 = cross(w[0], w[1], w[2], cx, cy, cz)
        c0, c1, c2 = cross(w[0], w[1], w[2], t0, t1, t2)
        e0, e1, e2 = cross(dw[0], dw[1], dw[2], cx, cy, cz)
        f0 = m * (ws[i, W_ACC] + e0 + c0)
        f1 = m * (ws[i, W_ACC + 1] + e1 + c1)
        f2 = m * (ws[i, W_ACC + 2] + e2 + c2)
        ixx, iyy, izz = L[i, L_INERTIA], L[i, L_INERTIA + 1], L[i, L_INERTIA + 2]
        ixy, ixz, iyz = L[i, L_INERTIA + 3], L[i, L_INERTIA + 4], L[i, L_INERTIA + 5]
        l0 = ixx * w[0] + ixy * w[1] + ixz * w[2]
        l1 = ixy * w[0] + iyy * w[1] + iyz * w[2]
        l2 = ixz * w[0] + iyz * w[1] + izz * w[2]
        g0, g1, g2 = cross(w[0], w[1], w[2], l0, l1, l2)
        r0, r1, r2 = cross(cx, cy, cz, f0, f1, f2)
        n0 = ixx * dw[0] + ixy * dw[1] + ixz * dw[2] + g0 + r0
        n1 = ixy * dw[0] + iyy * dw[1] + iyz * dw[2] + g1 + r1
        n2 = ixz * dw[0] + iyz * dw[1] + izz * dw[2] + g2 + r2
        if i + 1 < n:
            # The child link (in F_{i+1}) and the jacks of joint i+1 (in G_{i+1}).
            j = i + 1
            cf = mat_vec(ws[j], W_RZ, ws[j, W_F], ws[j, W_F + 1], ws[j, W_F + 2])
            cn = mat_vec(ws[j], W_RZ, ws[j, W_N], ws[j, W_N + 1], ws[j, W_N + 2])
            jf = mat_vec(L[j], L_R, ws[j, W_FJ], ws[j, W_FJ + 1], ws[j, W_FJ + 2])
            jn = mat_vec(L[j], L_R, ws[j, W_NJ], ws[j, W_NJ + 1], ws[j, W_NJ + 2])
            s0 = cf[0] + jf[0]
            s1 = cf[1] + jf[1]
            s2 = cf[2] + jf[2]
            x0, x1, x2 = cross(L[j, L_P], L[j, L_P + 1], L[j, L_P + 2], s0, s1, s2)
            f0 += s0
            f1 += s1
            f2 += s2
            n0 += cn[0] + jn[0] + x0
            n1 += cn[1] + jn[1] + x1
            n2 += cn[2] + jn[2] + x2
        ws[i, W_F], ws[i, W_F + 1], ws[i, W_F + 2] = f0, f1, f2
        ws[i, W_N], ws[i, W_N + 1], ws[i, W_N + 2] = n0, n1, n2
        tau[i] = n2 + ws[i, W_TX] + L[i, L_ARMATURE] * qdd[i]


@njit
def mass_matrix(
    C: np.ndarray, L: np.ndarray, J: np.ndarray, q: np.ndarray, ws: np.ndarray, M: np.ndarray
):
    """M(q), column by column: τ at q̇ = 0, q̈ = e_j, without gravity (ws[:, W_ZERO] and
    ws[:, W_QDD] hold the zero velocity and the unit acceleration)."""
    n = int(C[C_N])
    zero = ws[:, W_ZERO]
    for i in range(n):
        zero[i] = 0.0
    for j in range(n):
        for i in range(n):
            ws[i, W_QDD] = 1.0 if i == j else 0.0
        rnea(C, L, J, q, zero, ws[:, W_QDD], 0.0, ws, M[:, j])


@njit
def forward_dynamics(
    C: np.ndarray, L: np.ndarray, J: np.ndarray, q: np.ndarray, qd: np.ndarray, ws: np.ndarray
):
    """q̈ = M⁻¹ (τ − c − g) with τ in ws[:, W_TAU]; q̈ left in ws[:, W_RHS]. The mass matrix
    is the (n, n) block after column WS_STRIDE."""
    n = int(C[C_N])
    bias = ws[:, W_BIAS]
    rhs = ws[:, W_RHS]
    for i in range(n):
        rhs[i] = 0.0
    rnea(C, L, J, q, qd, rhs, 1.0, ws, bias)
    M = ws[:, WS_STRIDE : WS_STRIDE + n]
    mass_matrix(C, L, J, q, ws, M)
    for i in range(n):
        rhs[i] = ws[i, W_TAU] - bias[i]
    cholesky_solve(M, rhs, n)


@njit
def cholesky_solve(M: np.ndarray, b: np.ndarray, n: int) -> None:
    """Solve M x = b in place (x in b; M overwritten by its Cholesky factor L, lower)."""
    for j in range(n):
        s = M[j, j]
        for k in range(j):
            s -= M[j, k] * M[j, k]
        d = math.sqrt(s)
        M[j, j] = d
        for i in range(j + 1, n):
            s = M[i, j]
            for k in range(j):
                s -= M[i, k] * M[j, k]
            M[i, j] = s / d
    for i in range(n):
        s = b[i]
        for k in range(i):
            s -= M[i, k] * b[k]
        b[i] = s / M[i, i]
    for i in range(n - 1, -1, -1):
        s = b[i]
        for k in range(i + 1, n):
            s -= M[k, i] * b[k]
        b[i] = s / M[i, i]
