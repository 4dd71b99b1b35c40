"""Identification experiments for a serial chain with jacks and motors (the thesis's excavator).

Two designs, both within every joint's angle window (the jack strokes' range, `stroke_limits`,
less a margin), velocity and acceleration limits:

* **link by link** (thesis §3.5.2 and §4.5, Figures 16–18 and 35): one joint moves at a time,
  starting from the end effector, the others held at the centre. Each joint's motion is a
  modified Fourier series (starts and ends at rest, seed 004), so the segments join smoothly;
* **optimised multisine over all joints**: `controller.excitation.optimise_mfs` with any cost
  of the planned samples (the condition number of the chain's regressor, or the predicted σ of
  chosen parameters: estimator.predict.sigma_cost).

Pure code: trajectories and limits; no plant is stepped here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from controller.excitation import MfsResult, optimise_mfs
from controller.experiment import Experiment
from controller.limits import JointLimits
from controller.plant.chain.model import Chain, Jack, Motor
from controller.plant.chain.plant import ChainPlant, stroke_limits
from controller.trajectories import (
    HarmonicSum,
    Trajectory,
    mfs_coefficients,
    modified_fourier_series,
)

#: A motor's joint has no stroke: its window is this far either side of the centre (rad).
MOTOR_WINDOW = math.radians(30.0)


def chain_limits(
    chain: Chain,
    center: Sequence[float],
    *,
    margin: float = math.radians(3.0),
    speed_fraction: float = 0.5,
    accel_per_speed: float = 3.0,
    valve_max_v: float = 10.0,
) -> list[JointLimits]:
    """Per joint: the angle window the jack strokes allow around `center` (±MOTOR_WINDOW for a
    motor) less `margin`; the velocity `speed_fraction` of what the valve can feed at the
    centre (one metering edge at half the supply pressure: Q = C_f u_max √(p_s/2), over the
    larger area's displacement per radian); the acceleration `accel_per_speed` (1/s) times it."""
    c = np.asarray(center, dtype=float)
    win = stroke_limits(ChainPlant(chain), c)
    out = []
    for i, j in enumerate(chain.joints):
        lo, hi = win[i]
        if not np.isfinite(lo):
            lo, hi = c[i] - MOTOR_WINDOW, c[i] + MOTOR_WINDOW
        if j.valve is None or j.drive is None:
            raise ValueError(f"joint {j.link.name!r} has no valve and drive: it cannot move")
        q_max = max(j.valve.flow_gains) * j.valve.spool_max * math.sqrt(chain.supply_pressure / 2)
        if isinstance(j.drive, Motor):
            disp = j.drive.displacement * j.drive.gear_ratio
        else:
            disp = sum(k.area_cap * abs(_lever(chain, i, k, c[i])) for k in j.drive)
        v = speed_fraction * q_max / disp
        out.append(JointLimits(lo + margin, hi - margin, v, accel_per_speed * v, valve_max_v))
    return out


def _lever(chain: Chain, i: int, jack: Jack, q: float) -> float:
    """ℓ′ = dℓ/dq of a jack at joint angle q (thesis §2.4's triangle)."""
    th = q + chain.joints[i].link.dh.theta_offset
    bx, by = jack.pin_child[0], jack.pin_child[1]
    x = bx * math.cos(th) - by * math.sin(th)
    y = bx * math.sin(th) + by * math.cos(th)
    dx, dy = x - jack.pin_parent[0], y - jack.pin_parent[1]
    return (dx * -y + dy * x) / math.hypot(dx, dy)


@dataclass(frozen=True)
class Piecewise(Trajectory):
    """Segments played one after another (each from its own t = 0), holding `center` after."""

    center: tuple[float, ...]
    segments: tuple[tuple[float, Trajectory], ...]  # (duration, trajectory)
    #: The MFS coefficients (joint, a, b in rad/s) of each moving joint, in playing order.
    coefficients: tuple[tuple[int, np.ndarray, np.ndarray], ...] = ()
    base_hz: float = 0.1
    repeats: int = 1

    @property
    def n(self) -> int:  # type: ignore[override]
        return len(self.center)

    @property
    def duration(self) -> float:  # type: ignore[override]
        return float(sum(d for d, _ in self.segments))

    def eval(self, t: float, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> None:
        t0 = 0.0
        for d, tr in self.segments:
            if t < t0 + d:
                tr.eval(t - t0, q, qd, qdd)
                return
            t0 += d
        q[:] = self.center
        qd[:] = 0.0
        qdd[:] = 0.0

    def sample(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t = np.asarray(t, dtype=float).ravel()
        q = np.tile(np.asarray(self.center), (t.size, 1))
        qd = np.zeros_like(q)
        qdd = np.zeros_like(q)
        t0 = 0.0
        for d, tr in self.segments:
            sel = (t >= t0) & (t < t0 + d)
            if np.any(sel):
                q[sel], qd[sel], qdd[sel] = tr.sample(t[sel] - t0)
            t0 += d
        return q, qd, qdd


def _fit_scale(traj: HarmonicSum, lim: Sequence[JointLimits], fraction: float) -> float:
    """Largest factor on the harmonics (about the centre) keeping every limit, on a fine grid."""
    t = np.linspace(0.0, traj.duration, 4000, endpoint=False)
    q, qd, qdd = traj.sample(t)
    c = traj.center_arr
    s = np.inf
    for j, lm in enumerate(lim):
        dq = q[:, j] - c[j]
        if np.any(dq > 0):
            s = min(s, (lm.position_max - c[j]) / dq.max())
        if np.any(dq < 0):
            s = min(s, (c[j] - lm.position_min) / -dq.min())
        if np.abs(qd[:, j]).max() > 0:
            s = min(s, fraction * lm.max_velocity / np.abs(qd[:, j]).max())
        if np.abs(qdd[:, j]).max() > 0:
            s = min(s, fraction * lm.max_acceleration / np.abs(qdd[:, j]).max())
    return float(s) * (1.0 - 1e-3)


def link_by_link(
    center: Sequence[float],
    limits: Sequence[JointLimits],
    *,
    order: Sequence[int] | None = None,
    base_hz: float = 0.1,
    n_harmonics: int = 5,
    repeats: int = 2,
    fraction: float = 0.9,
    seed: int = 0,
) -> Piecewise:
    """One joint at a time, from the end effector inward (`order` None: n−1 … 0): each an MFS
    of `n_harmonics` of `base_hz` scaled to its limits, played `repeats` times."""
    c = [float(x) for x in center]
    n = len(c)
    if len(limits) != n:
        raise ValueError(f"one JointLimits per joint: got {len(limits)} for {n} joints")
    for j, lm in enumerate(limits):
        if not lm.position_min < c[j] < lm.position_max:
            raise ValueError(
                f"joint {j}: centre {c[j]:.4g} rad outside its window "
                f"[{lm.position_min:.4g}, {lm.position_max:.4g}]"
            )
    order = list(range(n - 1, -1, -1)) if order is None else list(order)
    if sorted(order) != sorted(set(order)) or not all(0 <= j < n for j in order):
        raise ValueError(f"order must list distinct joints in 0 … {n - 1}, got {order}")
    rng = np.random.default_rng(seed)
    segs: list[tuple[float, Trajectory]] = []
    coefs = []
    for j in order:
        za = np.zeros((n, n_harmonics - 1))
        zb = np.zeros((n, n_harmonics - 2))
        za[j] = rng.standard_normal(n_harmonics - 1)
        zb[j] = rng.standard_normal(n_harmonics - 2)
        a, b = mfs_coefficients(za, zb)
        tr = modified_fourier_series(c, base_hz, a, b)
        s = _fit_scale(tr, limits, fraction)
        tr = modified_fourier_series(c, base_hz, a * s, b * s)
        segs += [(1.0 / base_hz, tr)] * repeats
        coefs.append((j, a * s, b * s))
    return Piecewise(tuple(c), tuple(segs), tuple(coefs), base_hz, repeats)


def experiment_dict(
    name: str,
    description: str,
    center: Sequence[float],
    segments: Sequence[tuple[str, np.ndarray, np.ndarray]],
    base_hz: float,
    repeats: int,
) -> dict[str, object]:
    """An experiment file's table (controller.experiment's format, angles in degrees) of MFS
    segments (name, a, b in rad/s) under the rig's PID, between two settling holds."""
    deg = 180.0 / math.pi

    def mat(x: np.ndarray) -> list[list[float]]:
        return [[round(float(v) * deg, 6) for v in row] for row in x]

    hold = {"name": "settle", "duration_s": 2.0, "trajectory": {"kind": "hold"},
            "controller": {"kind": "pid"}}  # fmt: skip
    segs: list[dict[str, object]] = [hold]
    for nm, a, b in segments:
        segs.append({
            "name": nm, "duration_s": 1.0 / base_hz, "repeats": repeats,
            "controller": {"kind": "pid"},
            "trajectory": {"kind": "mfs", "base_hz": base_hz, "a_deg_s": mat(a), "b_deg_s": mat(b)},
        })  # fmt: skip
    segs.append(hold)
    return {"name": name, "description": description,
            "home_deg": [round(float(x) * deg, 6) for x in center], "segments": segs}  # fmt: skip


def all_joints_mfs(
    center: Sequence[float],
    limits: Sequence[JointLimits],
    *,
    base_hz: float = 0.1,
    n_harmonics: int = 5,
    fraction: float = 0.9,
    seed: int = 0,
) -> tuple[HarmonicSum, np.ndarray, np.ndarray]:
    """Every joint at once, each a random MFS, the whole scaled to the first limit it meets:
    the unoptimised multisine (the optimiser's baseline). Returns (trajectory, a, b)."""
    c = [float(x) for x in center]
    n = len(c)
    rng = np.random.default_rng(seed)
    a, b = mfs_coefficients(
        rng.standard_normal((n, n_harmonics - 1)), rng.standard_normal((n, n_harmonics - 2))
    )
    # Per joint first (each to its own room), then together.
    for j in range(n):
        one = np.zeros(n)
        one[j] = 1.0
        s = _fit_scale(modified_fourier_series(c, base_hz, a * one[:, None], b * one[:, None]),
                       limits, fraction)  # fmt: skip
        a[j] *= s
        b[j] *= s
    s = _fit_scale(modified_fourier_series(c, base_hz, a, b), limits, fraction)
    return modified_fourier_series(c, base_hz, a * s, b * s), a * s, b * s


Cost = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], float]


def optimised_multisine(
    center: Sequence[float],
    limits: Sequence[JointLimits],
    cost: Cost,
    *,
    base_hz: float = 0.1,
    n_harmonics: int = 5,
    fraction: float = 0.9,
    seed: int = 0,
    n_samples: int = 120,
    maxiter: int = 40,
    restarts: int = 1,
) -> MfsResult:
    """All joints at once: an MFS minimising `cost(t, q, q̇, q̈)` within the limits."""
    return optimise_mfs(
        center, base_hz, n_harmonics, limits, cost=cost, seed=seed, n_samples=n_samples,
        fraction=fraction, position_margin=0.0, maxiter=maxiter, restarts=restarts,
    )  # fmt: skip


def experiment_trajectory(exp: Experiment) -> Piecewise:
    """The whole planned reference of an experiment (every segment × its repeats) as one
    trajectory; a segment without a planned motion (open loop) holds its start."""
    segs: list[tuple[float, Trajectory]] = []
    for seg in exp.segments:
        segs += [(seg.duration, seg.trajectory)] * seg.repeats
    return Piecewise(tuple(exp.home), tuple(segs))
