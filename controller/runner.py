"""What the daq loop calls every cycle (docs/architecture.md, "Controller in the loop").

    runner.enable(fb)                               # bumpless: captures the measured position
    running = runner.step(fb, ref_out, volts_out)   # fills reference (rad) and valve volts
    runner.disable()

Everything is built in the constructor and in `enable`; `step` allocates nothing (the tests
check it with tracemalloc). Progress (`segment_index`, `segment_name`, `time_in_segment`,
`elapsed`, `total_duration`) is plain attributes the loop may read at any time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from controller.experiment import Experiment, Segment, build_law
from controller.feedback import Feedback
from controller.feedforward import PlantModel
from controller.laws import Law, PidLaw
from controller.limits import JointLimits
from controller.moves import TrapezoidPath
from controller.pid import PidParams
from controller.trajectories import Hold, Trajectory

log = logging.getLogger(__name__)

#: Approach moves (to the first segment's start, between mismatched segments) use this fraction
#: of the joint's velocity and acceleration limits.
APPROACH_FRACTION = 0.5
_TOL = 1e-4  # rad: smaller mismatches are not worth a move


class HoldRunner:
    """Holds the position measured at `enable` with each joint's PID."""

    def __init__(self, gains: Sequence[PidParams], limits: Sequence[JointLimits],
                 period: float) -> None:  # fmt: skip
        self.law = PidLaw(gains, limits, period)
        self.n = self.law.n
        self.position = np.zeros(self.n)
        self._zero = np.zeros(self.n)
        self.segment_index, self.segment_name = 0, "hold"
        self.time_in_segment = self.elapsed = 0.0
        self.total_duration = float("inf")
        self._period = period

    def enable(self, fb: Feedback) -> None:
        self.position[:] = fb.q
        self.law.enable(fb, self.position)
        self.time_in_segment = self.elapsed = 0.0

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
        ref_out[:] = self.position
        self.law.update(self.elapsed, fb, self.position, self._zero, self._zero, volts_out)
        self.elapsed += self._period
        self.time_in_segment = self.elapsed
        return True

    def disable(self) -> None:
        self.law.disable()


class _Phase:
    __slots__ = ("duration", "index", "law", "name", "repeats", "trajectory")

    def __init__(self, name: str, index: int, traj: Trajectory, law: Law, duration: float,
                 repeats: int) -> None:  # fmt: skip
        self.name, self.index, self.trajectory, self.law = name, index, traj, law
        self.duration, self.repeats = duration, repeats


class ExperimentRunner:
    """Runs an experiment's segments in order; between segments whose end and start differ (and
    from the measured position to the first segment) it inserts a trapezoidal approach move."""

    def __init__(self, experiment: Experiment, gains: Sequence[PidParams],
                 limits: Sequence[JointLimits], period: float,
                 params: object | None = None) -> None:  # fmt: skip
        n = experiment.n_joints
        if len(gains) != n or len(limits) != n:
            raise ValueError(f"experiment has {n} joints; got {len(gains)} gains, {len(limits)} limits")
        self.experiment, self.period, self.limits = experiment, period, list(limits)
        model = PlantModel(params) if params is not None else None
        self._hold_law = PidLaw(gains, limits, period)
        self._phases: list[_Phase] = []
        prev_end: np.ndarray | None = None
        for i, seg in enumerate(experiment.segments):
            law = build_law(seg, gains, limits, period, model)
            start = seg.trajectory.start()
            if prev_end is not None and np.abs(start - prev_end).max() > _TOL:
                self._phases.append(self._approach(prev_end, start, i, seg.name))
            self._phases.append(_Phase(seg.name, i, seg.trajectory, law, seg.duration, seg.repeats))
            prev_end = self._end(seg)
        self._first_start = experiment.segments[0].trajectory.start()
        self._final = prev_end if prev_end is not None else np.zeros(n)
        self._q = np.zeros(n)
        self._qd = np.zeros(n)
        self._qdd = np.zeros(n)
        self._zero = np.zeros(n)
        self._k = 0
        self._ip = 0
        self.finished = False
        self.segment_index, self.segment_name = 0, ""
        self.time_in_segment = self.elapsed = 0.0
        self.total_duration = sum(p.duration * p.repeats for p in self._phases)

    @staticmethod
    def _end(seg: Segment) -> np.ndarray:
        q, _, _ = seg.trajectory.sample(np.array([seg.duration]))
        if isinstance(seg.trajectory, Hold) or seg.controller["kind"] == "valve_sine":
            q, _, _ = seg.trajectory.sample(np.array([0.0]))
        return q[0]

    def _approach(self, a: np.ndarray, b: np.ndarray, index: int, name: str) -> _Phase:
        f = APPROACH_FRACTION
        path = TrapezoidPath([[x, y] for x, y in zip(a, b, strict=True)],
                             [f * lim.max_velocity for lim in self.limits],
                             [f * lim.max_acceleration for lim in self.limits])  # fmt: skip
        return _Phase(f"approach:{name}", index, path, self._hold_law, max(path.duration, self.period), 1)

    def enable(self, fb: Feedback) -> None:
        """Starts from the measured position: an approach move to the first segment's start
        (allocates; the loop calls this outside the steady state)."""
        if self._phases and self._phases[0].name.startswith("approach:start"):
            self._phases.pop(0)
        if np.abs(fb.q - self._first_start).max() > _TOL:
            ph = self._approach(np.array(fb.q, dtype=float), self._first_start, 0, "start")
            ph.name = "approach:start"
            self._phases.insert(0, ph)
        self.total_duration = sum(p.duration * p.repeats for p in self._phases)
        self._ip, self._k, self.elapsed, self.finished = 0, 0, 0.0, False
        self._enter(fb)

    def _enter(self, fb: Feedback) -> None:
        ph = self._phases[self._ip]
        ph.trajectory.eval(0.0, self._q, self._qd, self._qdd)
        ph.law.enable(fb, self._q)
        self.segment_index, self.segment_name = ph.index, ph.name
        self._k = 0

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
        """One cycle. Returns False once the experiment is over (it then holds the end pose)."""
        if self.finished:
            ref_out[:] = self._final
            self._hold_law.update(0.0, fb, self._final, self._zero, self._zero, volts_out)
            return False
        ph = self._phases[self._ip]
        t = self._k * self.period
        if t >= ph.duration * ph.repeats - 0.5 * self.period:
            self._ip += 1
            if self._ip >= len(self._phases):
                self.finished = True
                self._hold_law.enable(fb, self._final)
                return self.step(fb, ref_out, volts_out)
            self._enter(fb)
            ph = self._phases[self._ip]
            t = 0.0
        tr = t % ph.duration if ph.repeats > 1 else t
        ph.trajectory.eval(tr, self._q, self._qd, self._qdd)
        ph.law.update(tr, fb, self._q, self._qd, self._qdd, volts_out)
        ref_out[:] = self._q
        self._k += 1
        self.time_in_segment = t
        self.elapsed += self.period
        return True

    def disable(self) -> None:
        for ph in self._phases:
            ph.law.disable()
        self._hold_law.disable()
