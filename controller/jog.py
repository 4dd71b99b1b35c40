"""`JogRunner`: one joint moved slowly to a target while the others hold (station set-up).

Jogging is what a station does at low pressure before a test: bring an actuator off its end
stop or back inside its soft limits. The joint follows a trapezoidal move (controller.moves)
at the jog velocity from where it stands at `enable`, the others hold the position measured
then; every joint is under its PID, as in `HoldRunner`. At the target it holds (`done`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from controller.feedback import Feedback
from controller.laws import PidLaw
from controller.limits import JointLimits
from controller.moves import TrapezoidPath, trapezoid
from controller.pid import PidParams


class JogRunner:
    def __init__(
        self,
        gains: Sequence[PidParams],
        limits: Sequence[JointLimits],
        period: float,
        joint: int,
        target: float,
        velocity: float,
        acceleration: float,
    ) -> None:
        """`target` rad, `velocity` rad/s, `acceleration` rad/s² (both > 0)."""
        if not (velocity > 0.0 and acceleration > 0.0):
            raise ValueError("jog velocity and acceleration must be > 0")
        self.law = PidLaw(gains, limits, period)
        self.n = self.law.n
        if not 0 <= joint < self.n:
            raise ValueError(f"jog joint index {joint} outside 0…{self.n - 1}")
        self.joint, self.target = joint, float(target)
        self.velocity, self.acceleration = float(velocity), float(acceleration)
        self._period = period
        self._q = np.zeros(self.n)
        self._qd = np.zeros(self.n)
        self._qdd = np.zeros(self.n)
        self.path: TrapezoidPath | None = None
        self.segment_index, self.segment_name = 0, "jog"
        self.time_in_segment = self.elapsed = 0.0
        self.total_duration = 0.0
        self.done = False

    def enable(self, fb: Feedback) -> None:
        if fb.n_joints != self.n or not np.all(np.isfinite(fb.q)):
            raise ValueError(f"cannot jog: joint positions are not all finite ({fb.q.tolist()})")
        start = np.array(fb.q, dtype=float)
        end = start.copy()
        end[self.joint] = self.target
        n = self.n
        self.path = trapezoid(
            start.tolist(), end.tolist(), [self.velocity] * n, [self.acceleration] * n
        )
        self.total_duration = self.path.duration
        self.elapsed = self.time_in_segment = 0.0
        self.done = False
        self.law.enable(fb, start)

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
        path = self.path
        assert path is not None
        path.eval(self.elapsed, self._q, self._qd, self._qdd)
        ref_out[:] = self._q
        self.law.update(self.elapsed, fb, self._q, self._qd, self._qdd, volts_out)
        self.elapsed += self._period
        self.time_in_segment = self.elapsed
        if self.elapsed >= self.total_duration:
            self.done = True
        return True

    def disable(self) -> None:
        self.law.disable()
