"""One joint's servo loop linearised about an operating point (DESIGN §1.1–1.2), for tuning.

States (per joint, the other joint held):

    x = [δs, ṡ, p⁺, p⁻, u, w, z, ξ]
    m ṡ̇  = A⁺p⁺ − A⁻p⁻ − c ṡ − k_g δs                  (mechanics, reflected to the piston)
    ṗ⁺   = b/V⁺ (K⁺ u − A⁺ ṡ)                          (cap chamber)
    ṗ⁻   = b/V⁻ (A⁻ ṡ − K⁻ u)                          (rod chamber)
    u̇    = (v_applied − u)/τ_v                         (valve, first order; u in command volts)
    v_applied = 2w − v,  ẇ = 2(v − w)/T_d              (first-order Padé of the loop's delay)
    ż    = ω_hp (F − z),  F = A⁺p⁺ − A⁻p⁻               (ΔP high-pass: HP(F) = F − z)
    ξ̇    = q_ref − q,  q = δs / r
    v    = P (q_ref − q) + I ξ + FF1 q̇_ref − k_Δp (F − z)

with m = M_jj/r², c = Fv/r², k_g = W g cos q/r² (gravity's stiffness), V± the chamber volumes
at the operating stroke, and K± the valve's flow gains per volt at the operating pressures
(the mean of the two spool directions; a critically lapped valve has no flow-pressure
coefficient at null, so the model's only damping is the seals' viscous friction). The
operating pressures follow from the held load and the null-flow balance of the two edges.

`hydraulic_mode` gives the oil column's natural frequency ω_h = √(k_h/m), k_h = b(A⁺²/V⁺ +
A⁻²/V⁻), and its damping c/(2√(k_h m)); `closed_loop_poles`, `frequency_response` and
`step_overshoot_pct` the loop's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg

from controller.feedforward import PlantModel

#: Loop delay modelled: one sample of computation plus half a sample of zero-order hold.
DELAY_SAMPLES = 1.5


@dataclass(frozen=True)
class JointLinear:
    """The linearised joint's physical numbers (SI, piston side)."""

    r: float  # moment arm ds/dq, m/rad
    m: float  # reflected mass, kg
    c: float  # reflected viscous friction, N·s/m
    k_g: float  # gravity stiffness, N/m
    ac: float
    ar: float
    vc: float  # chamber volumes, m³
    vr: float
    b: float  # bulk modulus, Pa
    kqc: float  # flow gain per command volt into the cap side, m³/(s·V)
    kqr: float  # out of the rod side
    tau_v: float  # valve time constant, s
    p_cap: float  # operating pressures, Pa
    p_rod: float

    @property
    def k_h(self) -> float:
        """The oil column's stiffness, N/m."""
        return self.b * (self.ac**2 / self.vc + self.ar**2 / self.vr)

    @property
    def omega_h(self) -> float:
        return math.sqrt(self.k_h / self.m)

    @property
    def zeta_h(self) -> float:
        return self.c / (2.0 * math.sqrt(self.k_h * self.m))

    @property
    def velocity_gain(self) -> float:
        """Joint velocity per command volt in steady state, rad/(s·V) (mean of the sides)."""
        return 0.5 * (self.kqc / self.ac + self.kqr / self.ar) / self.r


def linearise(params: Any, j: int, q: np.ndarray) -> JointLinear:
    """Joint j about the pose q (rad, all joints), at rest."""
    m = PlantModel(params)
    qj = float(q[j])
    s, r = m.cylinder(j, qj)
    tau = [0.0] * m.n
    zero = [0.0] * m.n
    m.inverse_dynamics(q, zero, zero, tau)  # gravity only, at rest
    force = tau[j] / r
    if m.n == 2 and j == 0:
        mjj = m.M[0] + 2.0 * m.r12 * math.cos(float(q[1]))
        kgq = m.W[0] * m.g * math.cos(qj) + m.W[1] * m.g * math.cos(float(q[0] + q[1]))
    elif m.n == 2:
        mjj = m.M[1]
        kgq = m.W[1] * m.g * math.cos(float(q[0] + q[1]))
    else:
        mjj, kgq = m.M[0], m.W[0] * m.g * math.cos(qj)
    fv = m.Fv[j] if m.lin is None else 0.5 * (m.lin[j][0] + m.lin[j][1])
    ac, ar, ps, cf = m.Ac[j], m.Ar[j], m.ps, m.cf[j]
    # Null-flow balance (both edges of one spool direction pass the same piston speed) and the
    # held force: A⁺p⁺ − A⁻p⁻ = F. One solution per spool direction; their mean.
    pcs, prs = [], []
    for c_in, c_out in ((cf[0], cf[2]), (cf[3], cf[1])):
        a = (c_in * ar / (c_out * ac)) ** 2
        pc = (force + ar * a * ps) / (ac + ar * a)
        pc = min(max(pc, 0.02 * ps), 0.98 * ps)
        pcs.append(pc)
        prs.append(min(max((ac * pc - force) / ar, 0.02 * ps), 0.98 * ps))
    pc, pr = float(np.mean(pcs)), float(np.mean(prs))
    kv = m.kv[j]
    kqc = 0.5 * kv * (cf[0] * math.sqrt(ps - pc) + cf[1] * math.sqrt(pc))
    kqr = 0.5 * kv * (cf[2] * math.sqrt(pr) + cf[3] * math.sqrt(ps - pr))
    vc = m.V0[j] + (0.5 * m.L[j] + s) * ac
    vr = m.V0[j] + (0.5 * m.L[j] - s) * ar
    tau_v = float(params.valve_tau[j])
    return JointLinear(
        r, mjj / r**2, fv / r**2, kgq / r**2, ac, ar, vc, vr, m.b, kqc, kqr, tau_v, pc, pr
    )


def hydraulic_mode(params: Any, j: int, q: np.ndarray) -> tuple[float, float]:
    """(natural frequency Hz, damping ratio) of joint j's oil column at the pose q."""
    lin = linearise(params, j, q)
    return lin.omega_h / (2.0 * math.pi), lin.zeta_h


@dataclass(frozen=True)
class LoopGains:
    p: float  # V/rad
    i: float = 0.0  # V/(rad·s)
    ff1: float = 0.0  # V·s/rad
    dp: float = 0.0  # V/kN
    dp_hp_hz: float = 0.0


def state_space(
    lin: JointLinear, g: LoopGains, period: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(A, B0, B1, C): ẋ = A x + B0 q_ref + B1 q̇_ref, q = C x."""
    n = 8
    A = np.zeros((n, n))
    B0, B1, C = np.zeros(n), np.zeros(n), np.zeros(n)
    S, SD, PC, PR, U, W, Z, XI = range(n)
    C[S] = 1.0 / lin.r
    kdp = g.dp * 1e-3
    # v = P(q_ref − s/r) + I ξ + FF1 q̇_ref − kdp (A⁺p⁺ − A⁻p⁻ − z)
    v = np.zeros(n)
    v[S] = -g.p / lin.r
    v[XI] = g.i
    v[PC], v[PR], v[Z] = -kdp * lin.ac, kdp * lin.ar, kdp
    v_r0, v_r1 = g.p, g.ff1  # v's dependence on q_ref, q̇_ref
    A[S, SD] = 1.0
    A[SD, PC], A[SD, PR] = lin.ac / lin.m, -lin.ar / lin.m
    A[SD, SD], A[SD, S] = -lin.c / lin.m, -lin.k_g / lin.m
    A[PC, U], A[PC, SD] = lin.b / lin.vc * lin.kqc, -lin.b / lin.vc * lin.ac
    A[PR, U], A[PR, SD] = -lin.b / lin.vr * lin.kqr, lin.b / lin.vr * lin.ar
    td = DELAY_SAMPLES * period
    # ẇ = 2(v − w)/T; v_applied = 2w − v; u̇ = (v_applied − u)/τ
    A[W] += 2.0 / td * v
    A[W, W] -= 2.0 / td
    B0[W], B1[W] = 2.0 / td * v_r0, 2.0 / td * v_r1
    A[U] -= v / lin.tau_v
    A[U, W] += 2.0 / lin.tau_v
    A[U, U] -= 1.0 / lin.tau_v
    B0[U], B1[U] = -v_r0 / lin.tau_v, -v_r1 / lin.tau_v
    if g.dp_hp_hz > 0.0:
        w_hp = 2.0 * math.pi * g.dp_hp_hz
        A[Z, PC], A[Z, PR], A[Z, Z] = w_hp * lin.ac, -w_hp * lin.ar, -w_hp
    else:
        A[Z, Z] = -1.0  # z stays 0 (decoupled, stable): the raw force is fed back
    A[XI, S] = -1.0 / lin.r
    B0[XI] = 1.0
    if g.i == 0.0:
        A[XI, XI] = -1.0  # no integral action: ξ is not used; keep it a stable spectator
    return A, B0, B1, C


def closed_loop_poles(lin: JointLinear, g: LoopGains, period: float) -> np.ndarray:
    return np.linalg.eigvals(state_space(lin, g, period)[0])


def is_stable(lin: JointLinear, g: LoopGains, period: float) -> bool:
    """All poles in the left half-plane. A critically lapped valve leaves one pole at 0 (the
    chambers' common pressure level, which no flow sets): marginal, bounded, accepted."""
    p = closed_loop_poles(lin, g, period)
    return bool(np.max(p.real) < 1e-9 * np.max(np.abs(p)))


def gain_margin(lin: JointLinear, g: LoopGains, period: float, top: float = 20.0) -> float:
    """The largest factor k ≤ `top` by which P, I and the ΔP gain may all be multiplied with
    the loop still stable (0 if unstable as given)."""
    if not is_stable(lin, g, period):
        return 0.0

    def ok(k: float) -> bool:
        return is_stable(lin, LoopGains(g.p * k, g.i * k, g.ff1, g.dp * k, g.dp_hp_hz), period)

    if ok(top):
        return top
    lo, hi = 1.0, top
    for _ in range(30):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def frequency_response(
    lin: JointLinear, g: LoopGains, period: float, freqs_hz: np.ndarray
) -> np.ndarray:
    """Complex q/q_ref at each frequency."""
    A, B0, B1, C = state_space(lin, g, period)
    eye = np.eye(A.shape[0])
    out = np.empty(len(freqs_hz), dtype=complex)
    for k, f in enumerate(freqs_hz):
        s = 2j * math.pi * f
        out[k] = C @ np.linalg.solve(s * eye - A, B0 + s * B1)
    return out


def bandwidth_hz(lin: JointLinear, g: LoopGains, period: float) -> float:
    """−3 dB frequency of the position loop alone (no feed-forward)."""
    fb = LoopGains(g.p, g.i, 0.0, g.dp, g.dp_hp_hz)
    f = np.logspace(-2, 2, 400)
    h = np.abs(frequency_response(lin, fb, period, f))
    below = np.nonzero(h < 1.0 / math.sqrt(2.0))[0]
    return float(f[below[0]]) if below.size else float(f[-1])


def min_damping(lin: JointLinear, g: LoopGains, period: float) -> float:
    """Smallest damping ratio over the loop's complex poles (1 if none)."""
    p = closed_loop_poles(lin, g, period)
    c = p[np.abs(p.imag) > 1e-6]
    return float(np.min(-c.real / np.abs(c))) if c.size else 1.0


def step_overshoot_pct(
    lin: JointLinear, g: LoopGains, period: float, horizon_s: float = 6.0
) -> float:
    """Peak of the loop's response to a unit step of q_ref (no feed-forward: a step's derivative
    is an impulse), in % over 1, within `horizon_s`. Exact for the linear model: the states are
    propagated with the matrix exponential over one loop period (zero-order hold of the step)."""
    A, B0, _, C = state_space(lin, LoopGains(g.p, g.i, 0.0, g.dp, g.dp_hp_hz), period)
    n = A.shape[0]
    aug = np.zeros((n + 1, n + 1))
    aug[:n, :n], aug[:n, n] = A * period, B0 * period
    e = scipy.linalg.expm(aug)
    ad, bd = e[:n, :n], e[:n, n]
    x = np.zeros(n)
    peak = 0.0
    for _ in range(round(horizon_s / period)):
        x = ad @ x + bd
        peak = max(peak, float(C @ x))
    return 100.0 * (peak - 1.0)
