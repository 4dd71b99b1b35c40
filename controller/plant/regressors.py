"""Linear-in-parameters forms of the rig's equations (DESIGN.md §2), for identification and
excitation design. Inputs are arrays of shape (N, n) (N samples, n joints)."""

from __future__ import annotations

import math

import numpy as np

from controller.plant.dynamics import cylinder, orifice_terms
from controller.plant.jit import njit
from controller.plant.params import PlantParams


@njit
def _mech_rows(q: np.ndarray, qd: np.ndarray, qdd: np.ndarray, g: float, out: np.ndarray) -> None:
    n = q.shape[1]
    for k in range(q.shape[0]):
        if n == 1:
            out[k, 0, 0] = qdd[k, 0]
            out[k, 0, 1] = qd[k, 0]
            out[k, 0, 2] = g * math.sin(q[k, 0])
            continue
        q1, q2 = q[k, 0], q[k, 1]
        qd1, qd2 = qd[k, 0], qd[k, 1]
        qdd1, qdd2 = qdd[k, 0], qdd[k, 1]
        c2 = math.cos(q2)
        s2 = math.sin(q2)
        g12 = g * math.sin(q1 + q2)
        # τ1 = [q̈1, q̈2, 2c2 q̈1 + c2 q̈2 − 2 q̇1 q̇2 s2 − q̇2² s2, q̇1, 0, g sin q1, g sin(q1+q2)]·θm
        out[k, 0, 0] = qdd1
        out[k, 0, 1] = qdd2
        out[k, 0, 2] = 2.0 * c2 * qdd1 + c2 * qdd2 - 2.0 * qd1 * qd2 * s2 - qd2 * qd2 * s2
        out[k, 0, 3] = qd1
        out[k, 0, 4] = 0.0
        out[k, 0, 5] = g * math.sin(q1)
        out[k, 0, 6] = g12
        # τ2 = [0, q̈1 + q̈2, c2 q̈1 + q̇1² s2, 0, q̇2, 0, g sin(q1+q2)]·θm
        out[k, 1, 0] = 0.0
        out[k, 1, 1] = qdd1 + qdd2
        out[k, 1, 2] = c2 * qdd1 + qd1 * qd1 * s2
        out[k, 1, 3] = 0.0
        out[k, 1, 4] = qd2
        out[k, 1, 5] = 0.0
        out[k, 1, 6] = g12


def n_mech(n_joints: int) -> int:
    return 3 if n_joints == 1 else 7


def n_fluid(n_joints: int) -> int:
    return 1 + 4 * n_joints


def mechanical_regressor(
    q: np.ndarray, qd: np.ndarray, qdd: np.ndarray, gravity: float = 9.81
) -> np.ndarray:
    """Φm of shape (N, n, n_mech) with τ = Φm θm (DESIGN §2.1; [M1, Fv1, W1] for one joint)."""
    q = np.atleast_2d(np.asarray(q, dtype=float))
    n = q.shape[1]
    out = np.empty((q.shape[0], n, n_mech(n)))
    _mech_rows(
        np.ascontiguousarray(q),
        np.ascontiguousarray(np.atleast_2d(qd), dtype=float),
        np.ascontiguousarray(np.atleast_2d(qdd), dtype=float),
        gravity,
        out,
    )
    return out


def mechanical_output(
    params: PlantParams, q: np.ndarray, p_cap: np.ndarray, p_rod: np.ndarray
) -> np.ndarray:
    """τ (N, n) from measured pressures through the known moment arm: r (A⁺p⁺ − A⁻p⁻)."""
    _, r = cylinder(params, np.atleast_2d(q))
    return r * (params.area_cap * np.atleast_2d(p_cap) - params.area_rod * np.atleast_2d(p_rod))


@njit
def _fluid_rows(
    ps: float,
    acap: np.ndarray,
    arod: np.ndarray,
    v0: np.ndarray,
    stroke: np.ndarray,
    s: np.ndarray,
    sd: np.ndarray,
    u: np.ndarray,
    pc: np.ndarray,
    pr: np.ndarray,
    pdc: np.ndarray,
    pdr: np.ndarray,
    phi: np.ndarray,
    y: np.ndarray,
) -> None:
    n = s.shape[1]
    for k in range(s.shape[0]):
        for i in range(n):
            half = 0.5 * stroke[i]
            vcap = v0[i] + (half + s[k, i]) * acap[i]
            vrod = v0[i] + (half - s[k, i]) * arod[i]
            hpp, hpm, hmp, hmm = orifice_terms(ps, u[k, i], pc[k, i], pr[k, i])
            rc = 2 * i
            rr = 2 * i + 1
            c = 1 + 4 * i
            # −ṗ⁺V⁺·(1/b) + h⁺⁺u·Cf⁺⁺ + h⁺⁻u·Cf⁺⁻ = +A⁺ṡ
            phi[k, rc, 0] = -pdc[k, i] * vcap
            phi[k, rc, c] = hpp * u[k, i]
            phi[k, rc, c + 1] = hpm * u[k, i]
            y[k, rc] = acap[i] * sd[k, i]
            # −ṗ⁻V⁻·(1/b) − h⁻⁺u·Cf⁻⁺ − h⁻⁻u·Cf⁻⁻ = −A⁻ṡ
            phi[k, rr, 0] = -pdr[k, i] * vrod
            phi[k, rr, c + 2] = -hmp * u[k, i]
            phi[k, rr, c + 3] = -hmm * u[k, i]
            y[k, rr] = -arod[i] * sd[k, i]


def fluid_regressor(
    params: PlantParams,
    s: np.ndarray,
    sd: np.ndarray,
    u: np.ndarray,
    p_cap: np.ndarray,
    p_rod: np.ndarray,
    pd_cap: np.ndarray,
    pd_rod: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Φf (N, 2n, 1+4n) and y (N, 2n) of DESIGN §2.2: rows [cap₁, rod₁, cap₂, rod₂]; θf =
    [1/b, Cf⁺⁺₁, Cf⁺⁻₁, Cf⁻⁺₁, Cf⁻⁻₁, …]. The bulk modulus column is shared by every joint's
    rows, so stacking all joints estimates one b (Sakai's key point)."""
    arrs = [
        np.ascontiguousarray(np.atleast_2d(a), dtype=float)
        for a in (s, sd, u, p_cap, p_rod, pd_cap, pd_rod)
    ]
    N, n = arrs[0].shape
    phi = np.zeros((N, 2 * n, n_fluid(n)))
    y = np.empty((N, 2 * n))
    _fluid_rows(  # type: ignore[call-arg]
        params.supply_pressure,
        params.area_cap,
        params.area_rod,
        params.dead_volume,
        params.stroke,
        *arrs,
        phi,
        y,
    )
    return phi, y
