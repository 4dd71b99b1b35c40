"""`PhaseRunner`: the station's calibration moves, a schedule of phases in which each joint is
either held by its PID or driven open loop at a constant valve command (docs/operations.md,
"Calibration").

A calibration procedure needs motions no experiment describes: open the valves to drain the
chambers with the power off, push a piston slowly onto its end stops and dwell there, hold with
a slow integral at a pose. Each phase: a duration and, per joint, `None` (hold the position
measured when the phase began, PID with the given gains) or a valve voltage. A driven joint's
reference is its measured angle (no following error to trip on); a square-wave phase
alternates the sign of its voltages every `period_s` (draining: both metering edges open in
turn). `step` returns False after the last phase; nothing is allocated there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from controller.feedback import Feedback
from controller.laws import PidLaw
from controller.limits import JointLimits
from controller.pid import PidParams


@dataclass(frozen=True)
class Phase:
    name: str
    duration_s: float
    #: Per joint: None = hold (PID), else the valve command in volts.
    volts: tuple[float | None, ...]
    #: > 0: the driven joints' commands flip sign every `square_s` seconds.
    square_s: float = 0.0
    #: > 0: a driven joint's command starts at its `volts` and integrates the chambers'
    #: imbalance, u̇ = −balance_i·(p_cap − p_rod) (V/(Pa·s)): on an end stop it settles where
    #: both chambers stand at the same pressure (the valve-null procedure).
    balance_i: float = 0.0
    #: True: a driven joint's command is its `volts` added to where the last balance ended.
    from_balance: bool = False


class PhaseRunner:
    def __init__(
        self,
        phases: Sequence[Phase],
        gains: Sequence[PidParams],
        limits: Sequence[JointLimits],
        period: float,
        max_rate_v_per_s: float = 1000.0,
    ) -> None:
        self.law = PidLaw(gains, limits, period)
        self.n = self.law.n
        for ph in phases:
            if len(ph.volts) != self.n or not ph.duration_s > 0:
                raise ValueError(f"phase {ph.name!r}: needs one entry per joint and a duration")
        self.phases = list(phases)
        self._period = period
        #: The command moves at most this fast (the loop trips on a faster slew).
        self._dv = max_rate_v_per_s * period
        self._hold = np.zeros(self.n)
        self._zero = np.zeros(self.n)
        self._v = np.zeros(self.n)
        self._bal = np.zeros(self.n)
        self.segment_index = 0
        self.segment_name = self.phases[0].name if self.phases else ""
        self.elapsed = self.time_in_segment = 0.0
        self.segment_duration = self.phases[0].duration_s if self.phases else 0.0
        self.total_duration = float(sum(p.duration_s for p in self.phases))
        self._new_phase = True

    def enable(self, fb: Feedback) -> None:
        if fb.n_joints != self.n or not np.all(np.isfinite(fb.q)):
            raise ValueError(f"joint positions are not all finite ({fb.q.tolist()})")
        self._hold[:] = fb.q
        self.law.enable(fb, self._hold)
        self.segment_index, self.elapsed, self.time_in_segment = 0, 0.0, 0.0
        self._new_phase = True
        self._v[:] = 0.0

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
        if self.segment_index >= len(self.phases):
            volts_out.fill(0.0)  # after the schedule: valves at null until the loop switches
            ref_out[:] = fb.q
            return False
        ph = self.phases[self.segment_index]
        if self._new_phase:
            self._hold[:] = fb.q  # each phase holds where the previous one left the joint
            self.law.enable(fb, self._hold)
            self._new_phase = False
            if ph.balance_i > 0:
                for j in range(self.n):
                    v0 = ph.volts[j]
                    self._bal[j] = v0 if v0 is not None else 0.0
        flip = ph.square_s > 0 and math.floor(self.time_in_segment / ph.square_s) % 2 == 1
        for j in range(self.n):
            v = ph.volts[j]
            if v is None:
                ref_out[j] = self._hold[j]
                target = self.law.pids[j].update(self._hold[j], fb.q[j])
            elif ph.balance_i > 0:
                ref_out[j] = fb.q[j]
                dp = fb.p_cap[j] - fb.p_rod[j]
                if dp == dp:  # not NaN
                    self._bal[j] -= ph.balance_i * dp * self._period
                target = self._bal[j]
            else:
                ref_out[j] = fb.q[j]
                target = -v if flip else v
                if ph.from_balance:
                    target += self._bal[j]
            # Slew-limited towards the phase's command (a square wave must not trip the rate).
            self._v[j] += min(max(target - self._v[j], -self._dv), self._dv)
            volts_out[j] = self.law._clamp(j, self._v[j])
        self.elapsed += self._period
        self.time_in_segment += self._period
        if self.time_in_segment >= ph.duration_s:
            self.segment_index += 1
            self.time_in_segment = 0.0
            self._new_phase = True
            if self.segment_index < len(self.phases):
                nxt = self.phases[self.segment_index]
                self.segment_name, self.segment_duration = nxt.name, nxt.duration_s
        return self.segment_index < len(self.phases)

    def disable(self) -> None:
        self.law.disable()
