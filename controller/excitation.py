"""Excitation design: observation matrices of a trajectory and MFS optimisation.

The MFS paper (seed 004, Sec. 3) and Swevers: choose the Fourier coefficients that minimise the
condition number of the observation matrix, subject to the joint's position, velocity and
acceleration limits; the MFS form adds the boundary conditions (start and end at rest), which
`trajectories.mfs_basis` removes from the search by parameterising its null space.

Models (`model=`):
- "mechanical": Φm of DESIGN §2.1 at the trajectory's samples;
- "fluid": Φf of DESIGN §2.2 at the signals the plant would show tracking the trajectory,
  predicted from the inverse dynamics and the valve's steady state (`predicted_fluid_signals`);
- "both": the objective is the sum of both log condition numbers.

Columns are scaled by the nominal parameters (Φ·diag θ) when parameters are given: the
condition number then compares contributions in output units, not the parameters' units (1/b
is ~1e-9, Cf ~1e-7: unscaled, the fluid matrix's condition number would only measure units).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.optimize

from controller.limits import JointLimits
from controller.plant.dynamics import cylinder, inverse_dynamics
from controller.plant.regressors import fluid_regressor, mechanical_regressor
from controller.trajectories import HarmonicSum, Trajectory, mfs_basis, modified_fourier_series

log = logging.getLogger(__name__)
MODELS = ("mechanical", "fluid", "both")


def predicted_fluid_signals(
    params: Any, t: np.ndarray, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray
) -> dict[str, np.ndarray]:
    """s, ṡ, u, p⁺, p⁻, ṗ⁺, ṗ⁻ (each (N, n)) of the plant following (q, q̇, q̈) at the valve's
    steady state (see `controller.feedforward`). Pressure rates by central differences of t."""
    s, r = cylinder(params, q)
    sd = r * qd
    force = inverse_dynamics(params, q, qd, qdd) / r
    ac, ar, ps, cf = params.area_cap, params.area_rod, params.supply_pressure, params.flow_gains
    k_ext = ac**3 / cf[:, 0] ** 2 + ar**3 / cf[:, 2] ** 2
    k_ret = ac**3 / cf[:, 1] ** 2 + ar**3 / cf[:, 3] ** 2
    m_ext = np.maximum(ac * ps - force, 1e-3 * ac * ps)
    m_ret = np.maximum(force + ar * ps, 1e-3 * ar * ps)
    u = np.where(sd >= 0, sd * np.sqrt(k_ext / m_ext), sd * np.sqrt(k_ret / m_ret))
    pc_ext = ps - ac**2 * m_ext / (cf[:, 0] ** 2 * k_ext)
    pr_ext = ar**2 * m_ext / (cf[:, 2] ** 2 * k_ext)
    pc_ret = ac**2 * m_ret / (cf[:, 1] ** 2 * k_ret)
    pr_ret = ps - ar**2 * m_ret / (cf[:, 3] ** 2 * k_ret)
    # The chambers swap from one steady state to the other as the piston reverses; blend over
    # 5 % of the peak speed instead of jumping (the real switch takes a few ms of compression).
    eps = 0.05 * np.maximum(np.abs(sd).max(axis=0), 1e-9)
    w = 0.5 * (1.0 + np.tanh(sd / eps))
    pc = w * pc_ext + (1 - w) * pc_ret
    pr = w * pr_ext + (1 - w) * pr_ret
    return {
        "s": s,
        "sd": sd,
        "u": u,
        "p_cap": pc,
        "p_rod": pr,
        "pd_cap": np.gradient(pc, t, axis=0),
        "pd_rod": np.gradient(pr, t, axis=0),
    }


def observation_matrix(
    model: str,
    t: np.ndarray,
    q: np.ndarray,
    qd: np.ndarray,
    qdd: np.ndarray,
    params: Any | None = None,
    gravity: float = 9.81,
) -> np.ndarray:
    """Stacked (N·rows, n_params) observation matrix of `model` ("mechanical" or "fluid"),
    columns scaled by the nominal parameters when `params` is given."""
    if model == "mechanical":
        g = float(params.gravity) if params is not None else gravity
        phi = mechanical_regressor(q, qd, qdd, g)
        theta = params.theta_mech() if params is not None else None
    elif model == "fluid":
        if params is None:
            raise ValueError("the fluid observation matrix needs plant parameters")
        sig = predicted_fluid_signals(params, t, q, qd, qdd)
        phi, _ = fluid_regressor(
            params,
            sig["s"],
            sig["sd"],
            sig["u"],
            sig["p_cap"],
            sig["p_rod"],
            sig["pd_cap"],
            sig["pd_rod"],
        )
        theta = params.theta_fluid()
    else:
        raise ValueError(f"model must be 'mechanical' or 'fluid', not {model!r}")
    phi = phi.reshape(-1, phi.shape[-1])
    return phi * theta[None, :] if theta is not None else phi


def condition_number(phi: np.ndarray) -> float:
    sv = np.linalg.svd(phi, compute_uv=False)
    return float(sv[0] / sv[-1]) if sv[-1] > 0 else float("inf")


def trajectory_condition(
    traj: Trajectory,
    model: str,
    params: Any | None = None,
    n_samples: int = 400,
    duration: float | None = None,
) -> float:
    """Condition number of `model`'s observation matrix over one period of `traj`."""
    dur = traj.duration if duration is None else duration
    t = np.linspace(0.0, dur, n_samples, endpoint=False)
    q, qd, qdd = traj.sample(t)
    if model == "both":
        return max(
            condition_number(observation_matrix(m, t, q, qd, qdd, params))
            for m in ("mechanical", "fluid")
        )
    return condition_number(observation_matrix(model, t, q, qd, qdd, params))


@dataclass(frozen=True)
class MfsResult:
    trajectory: HarmonicSum
    a: np.ndarray  # (n, N) rad/s
    b: np.ndarray
    condition: float
    seconds: float  # optimisation wall time
    success: bool
    message: str


def _margins(
    q: np.ndarray, qd: np.ndarray, qdd: np.ndarray, limits: Sequence[JointLimits], fraction: float
) -> np.ndarray:
    """≥ 0 where every sample is inside the limits (scaled by `fraction`), per joint and kind."""
    out = []
    for j, lim in enumerate(limits):
        out += [
            lim.position_max - q[:, j].max(),
            q[:, j].min() - lim.position_min,
            fraction * lim.max_velocity - np.abs(qd[:, j]).max(),
            fraction * lim.max_acceleration - np.abs(qdd[:, j]).max(),
        ]
    return np.asarray(out)


def optimise_mfs(
    center: Sequence[float],
    base_hz: float,
    n_harmonics: int,
    limits: Sequence[JointLimits],
    model: str = "mechanical",
    params: Any | None = None,
    seed: int = 0,
    n_samples: int = 200,
    fraction: float = 0.9,
    position_margin: float = 0.02,
    maxiter: int = 200,
    restarts: int = 3,
    cost: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], float] | None = None,
) -> MfsResult:
    """MFS around `center` (rad) minimising the condition number of `model`'s observation
    matrix within `fraction` of the velocity/acceleration limits and `position_margin` (rad)
    inside the position limits. SLSQP from `restarts` random feasible starts; deterministic
    for a given seed.

    `cost(t, q, q̇, q̈) -> float` replaces the condition number as the objective (e.g. the
    predicted σ of chosen parameters, estimator.predict.sigma_cost, or a chain's regressor);
    `MfsResult.condition` then holds the cost's final value."""
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, not {model!r}")
    n = len(center)
    if len(limits) != n:
        raise ValueError(f"one JointLimits per joint: got {len(limits)} for {n} joints")
    c = np.asarray(center, dtype=float)
    lims = [
        JointLimits(
            lim.position_min + position_margin,
            lim.position_max - position_margin,
            lim.max_velocity,
            lim.max_acceleration,
            lim.valve_max_v,
        )
        for lim in limits
    ]
    for j, lim in enumerate(lims):
        if not lim.position_min < c[j] < lim.position_max:
            raise ValueError(f"joint {j}: centre {c[j]:.3f} rad is outside its limits")
    na, nb = mfs_basis(n_harmonics)
    ka, kb = na.shape[1], nb.shape[1]
    period = 1.0 / base_hz
    t = np.linspace(0.0, period, n_samples, endpoint=False)
    t_check = np.linspace(0.0, period, 20 * n_samples, endpoint=False)

    c_list = c.tolist()

    def build(z: np.ndarray) -> HarmonicSum:
        z = z.reshape(n, ka + kb)
        return modified_fourier_series(c_list, base_hz, z[:, :ka] @ na.T, z[:, ka:] @ nb.T)

    def objective(z: np.ndarray) -> float:
        q, qd, qdd = build(z).sample(t)
        if cost is not None:
            return float(cost(t, q, qd, qdd))
        ms = ("mechanical", "fluid") if model == "both" else (model,)
        return sum(
            np.log(condition_number(observation_matrix(m, t, q, qd, qdd, params))) for m in ms
        )

    def cons(z: np.ndarray) -> np.ndarray:
        return _margins(*build(z).sample(t), lims, fraction)

    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    best: tuple[float, np.ndarray, str, bool] | None = None
    for _ in range(restarts):
        z0 = rng.standard_normal(n * (ka + kb))
        for _ in range(60):  # shrink until feasible at the samples (the centre is)
            if cons(z0).min() >= 0:
                break
            z0 *= 0.7
        res = scipy.optimize.minimize(
            objective,
            z0,
            method="SLSQP",
            constraints=[{"type": "ineq", "fun": cons}],
            options={"maxiter": maxiter, "ftol": 1e-6},
        )
        z, ok, msg = res.x, bool(res.success), str(res.message)
        # The constraints hold at the samples; between them the path may overshoot a little.
        # Shrink about the centre until they also hold on a 20× finer grid. This terminates:
        # the centre itself (z = 0) is strictly inside every limit. The finer grid still misses
        # peaks between its own samples (relative error ~ (ω·h)²/8), hence the 0.1 % guard.
        shrink = 1.0
        while _margins(*build(z).sample(t_check), lims, fraction * (1.0 - 1e-3)).min() < 0:
            z = 0.98 * z
            shrink *= 0.98
            if shrink < 1e-6:
                z, ok, msg = 0.0 * z, False, "no excitation fits the limits"
                break
        if shrink < 1.0:
            msg += f" (scaled by {shrink:.3f} to hold between samples)"
        f = objective(z)
        if best is None or f < best[0]:
            best = (f, z, msg, ok)
    assert best is not None
    traj = build(best[1])
    zz = best[1].reshape(n, ka + kb)
    return MfsResult(
        traj,
        zz[:, :ka] @ na.T,
        zz[:, ka:] @ nb.T,
        best[0] if cost is not None else trajectory_condition(traj, model, params, n_samples),
        time.perf_counter() - t0,
        best[3],
        best[2],
    )


def max_single_sine(
    center: Sequence[float],
    frequency_hz: float,
    limits: Sequence[JointLimits],
    fraction: float = 0.9,
    position_margin: float = 0.02,
) -> HarmonicSum:
    """The largest single sine per joint at `frequency_hz` inside the same limits as
    `optimise_mfs` (the reference that an optimised MFS is compared against)."""
    from controller.trajectories import sine

    w = 2 * np.pi * frequency_hz
    amp = []
    for cj, lim in zip(center, limits, strict=True):
        room = min(lim.position_max - position_margin - cj, cj - lim.position_min - position_margin)
        amp.append(
            min(room, fraction * lim.max_velocity / w, fraction * lim.max_acceleration / w**2)
        )
    ph = np.arange(len(amp)) * np.pi / 2  # a quarter period apart: the joints are not collinear
    return sine(center, amp, [frequency_hz] * len(amp), ph.tolist())
