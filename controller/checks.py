"""Refuse an experiment before anything moves: joint, velocity, acceleration and valve limits.

`check_experiment(exp, limits, params)` samples every segment's reference (one repeat: the
others are identical) and reports, per segment, joint and limit, the first time the limit is
exceeded and the worst value. With plant parameters it also checks the valve capacity: the
piston speed the reference needs against the steady-state speed at full spool (DESIGN §1.2,
closed form in `controller.feedforward`), given the force the inverse dynamics need at that
instant. Open-loop valve segments have no position reference: their motion is predicted by
integrating the valve's steady-state velocity (with the segment's centering gain).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from controller.experiment import Experiment, Segment
from controller.feedforward import PlantModel
from controller.limits import JointLimits
from controller.plant.dynamics import cylinder, inverse_dynamics


@dataclass(frozen=True)
class Violation:
    segment: int
    segment_name: str
    time: float  # s into the segment (first exceedance)
    joint: int
    #: position_max | position_min | velocity | acceleration | valve_voltage | valve_capacity
    limit: str
    value: float  # worst value found (SI units)
    bound: float

    def __str__(self) -> str:
        return (
            f"segment {self.segment} ({self.segment_name!r}) at t={self.time:.3f} s: joint "
            f"{self.joint} {self.limit} {self.value:.4g} beyond {self.bound:.4g}"
        )


def _report(
    out: list[Violation],
    i: int,
    seg: Segment,
    j: int,
    name: str,
    t: np.ndarray,
    value: np.ndarray,
    bound: float,
    sign: float = 1.0,
) -> None:
    """Append a violation where sign·value > sign·bound anywhere."""
    bad = sign * value > sign * bound + 1e-9 * max(1.0, abs(bound))
    if np.any(bad):
        k = int(np.argmax(bad))
        worst = float(value[np.argmax(sign * value)])
        out.append(Violation(i, seg.name, float(t[k]), j, name, worst, float(bound)))


def check_experiment(
    exp: Experiment,
    limits: Sequence[JointLimits],
    params: Any | None = None,
    rate_hz: float = 500.0,
) -> list[Violation]:
    """All limit violations of `exp` (empty list: safe to run)."""
    n = exp.n_joints
    if len(limits) != n:
        raise ValueError(f"experiment '{exp.name}' has {n} joints, {len(limits)} limits given")
    model = PlantModel(params) if params is not None else None
    out: list[Violation] = []
    for i, seg in enumerate(exp.segments):
        t = np.arange(0.0, seg.duration + 0.5 / rate_hz, 1.0 / rate_hz)
        t = t[t <= seg.duration]
        if seg.controller["kind"] == "valve_sine":
            q, qd, qdd = _predict_valve_sine(seg, limits, model, t)
            amp, off = seg.controller["amplitude_v"], seg.controller.get("offset_v") or [0.0] * n
            for j in range(n):
                _report(
                    out,
                    i,
                    seg,
                    j,
                    "valve_voltage",
                    t[:1],
                    np.array([abs(amp[j]) + abs(off[j])]),
                    limits[j].valve_max_v,
                )
        else:
            q, qd, qdd = seg.trajectory.sample(t)
        for j, lim in enumerate(limits):
            _report(out, i, seg, j, "position_max", t, q[:, j], lim.position_max)
            _report(out, i, seg, j, "position_min", t, q[:, j], lim.position_min, -1.0)
            _report(out, i, seg, j, "velocity", t, np.abs(qd[:, j]), lim.max_velocity)
            _report(out, i, seg, j, "acceleration", t, np.abs(qdd[:, j]), lim.max_acceleration)
        if model is not None and seg.controller["kind"] != "valve_sine":
            _check_capacity(out, i, seg, limits, params, t, q, qd, qdd)
    return out


def _check_capacity(
    out: list[Violation],
    i: int,
    seg: Segment,
    limits: Sequence[JointLimits],
    params: Any,
    t: np.ndarray,
    q: np.ndarray,
    qd: np.ndarray,
    qdd: np.ndarray,
) -> None:
    """Required piston speed / steady-state speed at full spool (> 1: the valve cannot)."""
    _, r = cylinder(params, q)
    sd = r * qd
    force = inverse_dynamics(params, q, qd, qdd) / r
    ac, ar, ps, cf = params.area_cap, params.area_rod, params.supply_pressure, params.flow_gains
    spool = np.minimum(
        params.spool_max, params.valve_gain * np.array([lim.valve_max_v for lim in limits])
    )
    k_ext = ac**3 / cf[:, 0] ** 2 + ar**3 / cf[:, 2] ** 2
    k_ret = ac**3 / cf[:, 1] ** 2 + ar**3 / cf[:, 3] ** 2
    ext = spool * np.sqrt(np.maximum(ac * ps - force, 0.0) / k_ext)
    ret = spool * np.sqrt(np.maximum(force + ar * ps, 0.0) / k_ret)
    avail = np.where(sd >= 0, ext, ret)
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.where(avail > 0, np.abs(sd) / avail, np.inf)
    for j in range(q.shape[1]):
        _report(out, i, seg, j, "valve_capacity", t, need[:, j], 1.0)


def _predict_valve_sine(
    seg: Segment, limits: Sequence[JointLimits], model: PlantModel | None, t: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Driven joints: q̇ = ṡ(u)/r with u = k_v·v at the steady state against gravity; held
    joints stay at the reference. Without plant parameters nothing can be predicted: the
    reference is returned and only the valve voltage is checked."""
    q, qd, qdd = seg.trajectory.sample(t)
    if model is None or t.size < 2:
        return q, qd, qdd
    c = seg.controller
    n, dt = model.n, float(t[1] - t[0])
    amp, freq = c["amplitude_v"], c["frequency_hz"]
    off = c.get("offset_v") or [0.0] * n
    cen = c.get("centering_v_per_rad") or [0.0] * n
    tau = [0.0] * n
    x = q[0].astype(float).copy()
    home = q[0].astype(float).tolist()
    zero = [0.0] * n
    for k in range(t.size):
        q[k] = x
        model.inverse_dynamics(x, zero, zero, tau)
        for j in range(n):
            if amp[j] == 0.0:
                continue
            v = off[j] + amp[j] * math.sin(2 * math.pi * freq[j] * t[k]) + cen[j] * (home[j] - x[j])
            v = max(-limits[j].valve_max_v, min(limits[j].valve_max_v, v))
            u = max(-model.umax[j], min(model.umax[j], model.kv[j] * v))
            _, r = model.cylinder(j, float(x[j]))
            ext, ret = model.max_piston_speed(j, tau[j] / r, abs(u))
            qd[k, j] = (ext if u >= 0 else -ret) / r
        x = x + qd[k] * dt
    qdd[1:] = np.diff(qd, axis=0) / dt
    qdd[0] = qdd[1]
    return q, qd, qdd
