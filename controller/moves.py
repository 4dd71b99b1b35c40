"""Point-to-point motion: trapezoidal-velocity moves and Lin's constant-velocity sweeps.

Each joint follows its own chain of moves through waypoints; a move accelerates at `a` to the
cruise velocity `v`, cruises, and decelerates to rest at the next waypoint (triangular when the
distance is too short to reach `v`). A joint whose chain ends early holds its last waypoint.
Lin (1994, Sec. IV) drives one joint at a time through its range at constant velocity in both
directions while the others hold: `sweep()` builds exactly that.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from controller.trajectories import Array, Trajectory


class _Move:
    __slots__ = ("a", "dist", "sign", "t0", "t_acc", "t_cruise", "t_total", "v", "vpk", "x0")

    def __init__(self, x0: float, x1: float, v: float, a: float, t0: float) -> None:
        self.v = v
        self.plan(x0, x1, v, a, t0)

    def plan(self, x0: float, x1: float, v: float, a: float, t0: float) -> None:
        d = abs(x1 - x0)
        self.x0, self.sign, self.dist, self.a, self.t0 = x0, (1.0 if x1 >= x0 else -1.0), d, a, t0
        if d * a >= v * v:  # reaches the cruise velocity
            self.t_acc, self.vpk = v / a, v
            self.t_cruise = (d - v * v / a) / v
        else:
            self.t_acc = math.sqrt(d / a)
            self.vpk = a * self.t_acc
            self.t_cruise = 0.0
        self.t_total = 2.0 * self.t_acc + self.t_cruise

    def at(self, tau: float) -> tuple[float, float, float]:
        """Displacement, velocity, acceleration along the move `tau` s after its start."""
        ta, tc, a, vp = self.t_acc, self.t_cruise, self.a, self.vpk
        if tau <= 0.0:
            return 0.0, 0.0, 0.0
        if tau < ta:
            return 0.5 * a * tau * tau, a * tau, a
        if tau < ta + tc:
            return 0.5 * a * ta * ta + vp * (tau - ta), vp, 0.0
        if tau < self.t_total:
            r = self.t_total - tau
            return self.dist - 0.5 * a * r * r, a * r, -a
        return self.dist, 0.0, 0.0


class TrapezoidPath(Trajectory):
    """Per joint a chain of trapezoidal moves through `waypoints[j]` (rad)."""

    def __init__(
        self,
        waypoints: Sequence[Sequence[float]],
        velocity: Sequence[float],
        acceleration: Sequence[float],
        dwell: float = 0.0,
    ) -> None:
        self.n = len(waypoints)
        if len(velocity) != self.n or len(acceleration) != self.n:
            raise ValueError("velocity and acceleration need one entry per joint")
        self._moves: list[list[_Move]] = []
        self._start = [float(w[0]) for w in waypoints]
        end = 0.0
        for j, wps in enumerate(waypoints):
            v, a = float(velocity[j]), float(acceleration[j])
            if len(wps) < 1:
                raise ValueError(f"joint {j}: needs at least one waypoint")
            if len(wps) > 1 and not (v > 0 and a > 0):
                raise ValueError(f"joint {j}: velocity and acceleration must be > 0")
            t, chain = 0.0, []
            for x0, x1 in itertools.pairwise(wps):
                m = _Move(float(x0), float(x1), v, a, t)
                chain.append(m)
                t += m.t_total + dwell
            self._moves.append(chain)
            end = max(end, t)
        self.duration = end

    def eval(self, t: float, q: Array, qd: Array, qdd: Array) -> None:
        for j in range(self.n):
            x, v, acc = self._start[j], 0.0, 0.0
            for m in self._moves[j]:
                if t < m.t0:
                    break
                d, v, acc = m.at(t - m.t0)
                x = m.x0 + m.sign * d
                v *= m.sign
                acc *= m.sign
            q[j], qd[j], qdd[j] = x, v, acc

    def start(self) -> Array:
        return np.asarray(self._start)

    def brake(
        self, q: Array, v: Array, decel: Sequence[float], end: Array, lead: float = 0.0
    ) -> None:
        """Replan a one-move-per-joint path, in place, as a stop from position `q` moving at
        `v` (rad, rad/s) at deceleration `decel` (rad/s²): the second half of a triangular
        move whose peak is (q, v) at t = −`lead` (a loop's last reference was one period
        before the brake's first), so the reference goes on from `q` at `v` with no step in
        either and comes to rest v²/(2a) further on, written into `end`. A joint at rest holds
        `q`. No allocation (the loop runs it when an experiment ends)."""
        self.duration = 0.0
        for j in range(self.n):
            m = self._moves[j][0]
            speed, a = abs(float(v[j])), float(decel[j])
            half = speed * speed / (2.0 * a)
            sign = 1.0 if v[j] >= 0.0 else -1.0
            x = float(q[j])
            if speed > 0.0:
                m.plan(x - sign * half, x + sign * half, speed, a, 0.0)
                m.t0 = -m.t_acc - lead  # the peak at t = −lead
                if m.t_acc - lead > self.duration:
                    self.duration = m.t_acc - lead
            else:
                m.plan(x, x, m.v, m.a, 0.0)
            self._start[j] = x
            end[j] = x + sign * half

    def replan(self, start: Array, end: Array) -> None:
        """New start and end of a one-move-per-joint path, in place (no allocation: the loop
        uses it to recover from wherever an open-loop segment left the joints)."""
        self.duration = 0.0
        for j in range(self.n):
            m = self._moves[j][0]
            m.plan(float(start[j]), float(end[j]), m.v, m.a, 0.0)
            self._start[j] = float(start[j])
            if m.t_total > self.duration:
                self.duration = m.t_total


def trapezoid(
    start: Sequence[float],
    end: Sequence[float],
    velocity: Sequence[float],
    acceleration: Sequence[float],
) -> TrapezoidPath:
    """One move per joint from `start` to `end`."""
    return TrapezoidPath([[s, e] for s, e in zip(start, end, strict=True)], velocity, acceleration)


def sweep(
    center: Sequence[float],
    joint: int,
    low: float,
    high: float,
    velocity: float,
    acceleration: float,
    cycles: int = 1,
    dwell: float = 0.0,
) -> TrapezoidPath:
    """Lin's constant-velocity sweep of one joint: centre → high → low (… × cycles) → centre,
    the other joints holding `center`. Both directions at the same cruise speed."""
    n = len(center)
    if not 0 <= joint < n:
        raise ValueError(f"sweep joint index {joint} out of range for {n} joints")
    if not low < center[joint] < high:
        raise ValueError("sweep needs low < center < high for the swept joint")
    wps: list[list[float]] = [[float(c)] for c in center]
    wps[joint] = (
        [float(center[joint])] + [float(high), float(low)] * cycles + [float(center[joint])]
    )
    vel = [float(velocity)] * n
    acc = [float(acceleration)] * n
    return TrapezoidPath(wps, vel, acc, dwell=dwell)
