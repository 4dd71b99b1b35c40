"""`controller.feedforward.PlantModel` as compiled code: per-joint columns `mp[j, M_*]` and the
scalars `ms[G_*]`. Each function is its `PlantModel` method, same operations in the same order."""

from __future__ import annotations

import math

import numpy as np

from controller.compiled.jit import kernel
from controller.feedforward import COULOMB_SMOOTH_M_S, PlantModel

M_M, M_FV, M_W, M_AC, M_AR, M_V0, M_L, M_PA, M_PB, M_LC, M_TH0, M_KV, M_UMAX = range(13)
M_CF0, M_CF1, M_CF2, M_CF3, M_KEXT, M_KRET, M_LIN0, M_LIN1, M_LIN2, M_LIN3 = range(13, 23)
N_MP = 23
G_G, G_PS, G_B, G_R12, G_HAS_LIN, G_N = range(6)
N_MS = 6
_EPS_H = 1.0  # as controller.feedforward._EPS_H


def model_arrays(m: PlantModel | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(mp, ms) of a `PlantModel`; zeros (never read) for a law without a model."""
    mp, ms = np.zeros((n, N_MP)), np.zeros(N_MS)
    if m is None:
        return mp, ms
    for j in range(m.n):
        mp[j, :M_CF0] = (
            m.M[j], m.Fv[j], m.W[j], m.Ac[j], m.Ar[j], m.V0[j], m.L[j], m.pa[j], m.pb[j],
            m.lc[j], m.th0[j], m.kv[j], m.umax[j],
        )  # fmt: skip
        mp[j, M_CF0 : M_CF0 + 4] = m.cf[j][:4]
        mp[j, M_KEXT], mp[j, M_KRET] = m.k_ext[j], m.k_ret[j]
        if m.lin is not None:
            mp[j, M_LIN0 : M_LIN0 + 4] = m.lin[j][:4]
    ms[:] = (m.g, m.ps, m.b, m.r12, 0.0 if m.lin is None else 1.0, m.n)
    return mp, ms


@kernel
def cylinder(mp: np.ndarray, j: int, q: float) -> tuple[float, float]:
    """`PlantModel.cylinder`: piston displacement s (m) and moment arm r (m/rad)."""
    a, b = mp[j, M_PA], mp[j, M_PB]
    th = q + mp[j, M_TH0]
    ell = math.sqrt(a * a + b * b - 2.0 * a * b * math.cos(th))
    return ell - (mp[j, M_LC] + 0.5 * mp[j, M_L]), a * b * math.sin(th) / ell


@kernel
def inverse_dynamics(
    mp: np.ndarray, ms: np.ndarray, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray, tau: np.ndarray
) -> None:
    """`PlantModel.inverse_dynamics` (DESIGN §1.1; the model has 1 or 2 joints)."""
    g = ms[G_G]
    if ms[G_N] == 1.0:
        tau[0] = mp[0, M_M] * qdd[0] + mp[0, M_FV] * qd[0] + mp[0, M_W] * g * math.sin(q[0])
        return
    q1, q2, d1, d2, a1, a2 = q[0], q[1], qd[0], qd[1], qdd[0], qdd[1]
    R, c2, s2 = ms[G_R12], math.cos(q2), math.sin(q2)
    g12 = mp[1, M_W] * g * math.sin(q1 + q2)
    tau[0] = (
        (mp[0, M_M] + 2 * R * c2) * a1
        + (mp[1, M_M] + R * c2) * a2
        - R * s2 * (2 * d1 * d2 + d2 * d2)
        + mp[0, M_FV] * d1
        + mp[0, M_W] * g * math.sin(q1)
        + g12
    )
    tau[1] = (
        (mp[1, M_M] + R * c2) * a1 + mp[1, M_M] * a2 + R * d1 * d1 * s2 + mp[1, M_FV] * d2 + g12
    )


@kernel
def friction(mp: np.ndarray, ms: np.ndarray, j: int, q: float, qd: float) -> float:
    """`PlantModel.friction`."""
    if ms[G_HAS_LIN] == 0.0:
        return mp[j, M_FV] * qd
    fv_p, fv_m, fc_p, fc_m = mp[j, M_LIN0], mp[j, M_LIN1], mp[j, M_LIN2], mp[j, M_LIN3]
    _, r = cylinder(mp, j, q)
    sd = r * qd
    sgn = math.tanh(sd / COULOMB_SMOOTH_M_S)
    return (fv_p * qd + fc_p * r * sgn) if sd >= 0.0 else (fv_m * qd + fc_m * r * sgn)


@kernel
def gravity_friction(
    mp: np.ndarray, ms: np.ndarray, q: np.ndarray, qd: np.ndarray, tau: np.ndarray
) -> None:
    """`PlantModel.gravity_friction` (Lin eq. 37's compensation)."""
    g = ms[G_G]
    if ms[G_N] == 1.0:
        tau[0] = mp[0, M_W] * g * math.sin(q[0]) + friction(mp, ms, 0, q[0], qd[0])
        return
    g12 = mp[1, M_W] * g * math.sin(q[0] + q[1])
    tau[0] = mp[0, M_W] * g * math.sin(q[0]) + g12 + friction(mp, ms, 0, q[0], qd[0])
    tau[1] = g12 + friction(mp, ms, 1, q[1], qd[1])


@kernel
def spool_measured(
    mp: np.ndarray,
    ms: np.ndarray,
    j: int,
    s: float,
    sd: float,
    pd_cap: float,
    pd_rod: float,
    p_cap: float,
    p_rod: float,
) -> float:
    """`PlantModel.spool_measured` (DESIGN §1.2)."""
    ac, ar, ps = mp[j, M_AC], mp[j, M_AR], ms[G_PS]
    vc = mp[j, M_V0] + (0.5 * mp[j, M_L] + s) * ac
    vr = mp[j, M_V0] + (0.5 * mp[j, M_L] - s) * ar
    need = (ac + ar) * sd + (vc * pd_cap - vr * pd_rod) / ms[G_B]
    pc = min(max(p_cap, 0.0), ps)
    pr = min(max(p_rod, 0.0), ps)
    if need >= 0.0:
        gain = mp[j, M_CF0] * max(math.sqrt(ps - pc), _EPS_H) + mp[j, M_CF2] * max(
            math.sqrt(pr), _EPS_H
        )
    else:
        gain = mp[j, M_CF1] * max(math.sqrt(pc), _EPS_H) + mp[j, M_CF3] * max(
            math.sqrt(ps - pr), _EPS_H
        )
    return need / gain


@kernel
def spool_steady(mp: np.ndarray, ms: np.ndarray, j: int, force: float, sd: float) -> float:
    """`PlantModel.spool_steady` (closed form, DESIGN §1.2)."""
    ps = ms[G_PS]
    if sd >= 0.0:
        margin = max(mp[j, M_AC] * ps - force, 1e-3 * mp[j, M_AC] * ps)
        return sd * math.sqrt(mp[j, M_KEXT] / margin)
    margin = max(force + mp[j, M_AR] * ps, 1e-3 * mp[j, M_AR] * ps)
    return sd * math.sqrt(mp[j, M_KRET] / margin)
