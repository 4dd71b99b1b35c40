"""Trajectories compiled to coefficient arrays when the experiment is loaded, and their
evaluation as compiled code (`controller.trajectories`, `controller.moves`).

`compile_trajectory(traj)` → (kind, coef) with `coef[j, :]` joint j's numbers; `traj_eval` is the
class's `eval`, the same operations in the same order. A trajectory class not listed here gives
None: the loop then runs that runner on the Python path (docs/loop.md).
"""

from __future__ import annotations

import math

import numpy as np

from controller.compiled.jit import kernel
from controller.moves import TrapezoidPath
from controller.trajectories import HarmonicSum, Hold, Trajectory, _Chirp

HOLD, HARMONIC, CHIRP, TRAPEZOID = 0, 1, 2, 3
#: Columns per trapezoidal move: x0, sign, dist, a, t0, t_acc, t_cruise, t_total, vpk.
MOVE_COLS = 9


def compile_trajectory(traj: Trajectory) -> tuple[int, np.ndarray] | None:
    """(kind, coefficients) of `traj`, or None for a class without a compiled form."""
    n = traj.n
    if type(traj) is Hold:
        return HOLD, np.array(traj.position, dtype=float).reshape(n, 1)
    if type(traj) is HarmonicSum:
        k = max(len(r) for r in traj._rows) if n else 0
        coef = np.zeros((n, 2 + 3 * k))
        for j in range(n):
            coef[j, 0] = traj._center[j]
            coef[j, 1] = len(traj._rows[j])
            for i, (w, s, c) in enumerate(traj._rows[j]):
                coef[j, 2 + 3 * i : 5 + 3 * i] = (w, s, c)
        return HARMONIC, coef
    if type(traj) is _Chirp:
        coef = np.zeros((n, 4))
        for j in range(n):
            coef[j] = (traj.center[j], traj.amp[j], traj.f0, traj.k)
        return CHIRP, coef
    if type(traj) is TrapezoidPath:
        m = max(len(c) for c in traj._moves) if n else 0
        coef = np.zeros((n, 2 + MOVE_COLS * m))
        fill_trapezoid(traj, coef)
        return TRAPEZOID, coef
    return None


def fill_trapezoid(traj: TrapezoidPath, coef: np.ndarray) -> None:
    """Write a (re)planned path's moves into `coef` in place (the recovery move's replan)."""
    for j, chain in enumerate(traj._moves):
        coef[j, 0] = traj._start[j]
        coef[j, 1] = len(chain)
        for i, mv in enumerate(chain):
            c = 2 + MOVE_COLS * i
            coef[j, c : c + MOVE_COLS] = (
                mv.x0, mv.sign, mv.dist, mv.a, mv.t0, mv.t_acc, mv.t_cruise, mv.t_total, mv.vpk,
            )  # fmt: skip


@kernel
def _move_at(coef: np.ndarray, j: int, c: int, tau: float) -> tuple[float, float, float]:
    """`controller.moves._Move.at`."""
    ta, tc, a, vp = coef[j, c + 5], coef[j, c + 6], coef[j, c + 3], coef[j, c + 8]
    if tau <= 0.0:
        return 0.0, 0.0, 0.0
    if tau < ta:
        return 0.5 * a * tau * tau, a * tau, a
    if tau < ta + tc:
        return 0.5 * a * ta * ta + vp * (tau - ta), vp, 0.0
    if tau < coef[j, c + 7]:
        r = coef[j, c + 7] - tau
        return coef[j, c + 2] - 0.5 * a * r * r, a * r, -a
    return coef[j, c + 2], 0.0, 0.0


@kernel
def traj_eval(
    kind: int, coef: np.ndarray, t: float, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray
) -> None:
    """Reference position, velocity, acceleration of every joint at `t` (the class's `eval`)."""
    n = coef.shape[0]
    if kind == HOLD:
        for j in range(n):
            q[j] = coef[j, 0]
            qd[j] = 0.0
            qdd[j] = 0.0
    elif kind == HARMONIC:
        for j in range(n):
            x = coef[j, 0]
            v = 0.0
            a = 0.0
            for i in range(int(coef[j, 1])):
                w, s, c = coef[j, 2 + 3 * i], coef[j, 3 + 3 * i], coef[j, 4 + 3 * i]
                sn = math.sin(w * t)
                cs = math.cos(w * t)
                x += s * sn + c * cs
                v += w * (s * cs - c * sn)
                a -= w * w * (s * sn + c * cs)
            q[j] = x
            qd[j] = v
            qdd[j] = a
    elif kind == CHIRP:
        for j in range(n):
            f0, k = coef[j, 2], coef[j, 3]
            phi = 2 * math.pi * (f0 * t + 0.5 * k * t * t)
            w = 2 * math.pi * (f0 + k * t)
            wd = 2 * math.pi * k
            sn, cs = math.sin(phi), math.cos(phi)
            amp = coef[j, 1]
            q[j] = coef[j, 0] + amp * sn
            qd[j] = amp * w * cs
            qdd[j] = amp * (wd * cs - w * w * sn)
    else:  # TRAPEZOID
        for j in range(n):
            x, v, acc = coef[j, 0], 0.0, 0.0
            for i in range(int(coef[j, 1])):
                c = 2 + MOVE_COLS * i
                if t < coef[j, c + 4]:
                    break
                d, v, acc = _move_at(coef, j, c, t - coef[j, c + 4])
                sign = coef[j, c + 1]
                x = coef[j, c] + sign * d
                v *= sign
                acc *= sign
            q[j], qd[j], qdd[j] = x, v, acc
