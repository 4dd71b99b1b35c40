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
import math
from collections.abc import Sequence

import numpy as np

from controller.amplitude_phase import AmplitudePhase
from controller.checks import Violation, check_experiment
from controller.experiment import Experiment, ExperimentError, Segment, build_law
from controller.feedback import Feedback
from controller.feedforward_chain import plant_model
from controller.laws import Law, PidLaw
from controller.limits import JointLimits
from controller.moves import TrapezoidPath
from controller.pid import PidParams
from controller.plant.chain.model import Chain
from controller.trajectories import Hold, Trajectory

log = logging.getLogger(__name__)

#: Approach moves (to the first segment's start, between mismatched segments) use this fraction
#: of the joint's velocity and acceleration limits.
APPROACH_FRACTION = 0.5
_TOL = 1e-4  # rad: smaller planned mismatches are not worth a move
#: rad: after an open-loop segment, a segment that would start farther than this from the
#: measured position is preceded by a recovery move (the valve left the joints anywhere).
RECOVER_TOL = 0.2 * math.pi / 180.0
#: rad/s: a last reference slower than this needs no brake (0.006 °/s).
BRAKE_MIN_SPEED = 1e-4


class ExperimentRefused(ExperimentError):
    """The experiment exceeds a limit; `violations` names each segment, time and limit."""

    def __init__(self, violations: Sequence[Violation]) -> None:
        self.violations = list(violations)
        lines = "\n  ".join(str(v) for v in self.violations[:20])
        more = f"\n  … and {len(self.violations) - 20} more" if len(self.violations) > 20 else ""
        super().__init__(
            f"experiment refused, {len(self.violations)} violation(s):\n  {lines}{more}"
        )


def _check_feedback(fb: Feedback, n: int) -> None:
    if fb.n_joints != n:
        raise ValueError(f"feedback has {fb.n_joints} joints, the runner {n}")
    if not np.all(np.isfinite(fb.q)):
        raise ValueError(f"cannot enable: joint positions are not all finite ({fb.q.tolist()})")


class HoldRunner:
    """Holds the position measured at `enable` with each joint's PID."""

    def __init__(
        self, gains: Sequence[PidParams], limits: Sequence[JointLimits], period: float
    ) -> None:
        self.law = PidLaw(gains, limits, period)
        self.n = self.law.n
        self.position = np.zeros(self.n)
        self._zero = np.zeros(self.n)
        #: Where the next `enable` holds, if set (`hold_next_at`); else the measured angles.
        self._next_at = np.zeros(self.n)
        self._next_set = False
        self.segment_index, self.segment_name = 0, "hold"
        self.time_in_segment = self.elapsed = 0.0
        self.total_duration = float("inf")
        self._period = period

    def hold_next_at(self, q: np.ndarray) -> None:
        """The next `enable` holds `q` (rad) instead of the measured angles, once: the loop
        gives an experiment's last reference here when the experiment ends."""
        self._next_at[:] = q
        self._next_set = True

    def enable(self, fb: Feedback) -> None:
        # Taken first: an enable that raises must not leave it for a later arm.
        at, self._next_set = self._next_set, False
        _check_feedback(fb, self.n)
        self.position[:] = self._next_at if at else fb.q
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
    __slots__ = ("apc", "duration", "index", "law", "name", "repeats", "start", "trajectory")

    def __init__(
        self, name: str, index: int, traj: Trajectory, law: Law, duration: float, repeats: int
    ) -> None:
        self.name, self.index, self.trajectory, self.law = name, index, traj, law
        self.duration, self.repeats = duration, repeats
        self.start = np.asarray(traj.start(), dtype=float)
        #: The amplitude–phase compensator that is this phase's trajectory, if it is one.
        self.apc = traj if isinstance(traj, AmplitudePhase) else None


class ExperimentRunner:
    """Runs an experiment's segments in order.

    Approach moves (trapezoids at `APPROACH_FRACTION` of the limits, held by the PID) are
    inserted from the measured position to the first segment, between segments whose planned
    end and start differ (except before a law that `drives_to_reference` itself: Lin's
    velocity-limited PD must see its step, not a finished approach), and — planned in place
    at run time — whenever a segment starts more
    than `RECOVER_TOL` rad from where an open-loop segment left the joints.
    `check=True` runs `check_experiment` first and raises `ExperimentRefused` on any violation.
    """

    def __init__(
        self,
        experiment: Experiment,
        gains: Sequence[PidParams],
        limits: Sequence[JointLimits],
        period: float,
        params: object | None = None,
        check: bool = True,
    ) -> None:
        n = experiment.n_joints
        if len(gains) != n or len(limits) != n:
            raise ValueError(
                f"experiment has {n} joints; got {len(gains)} gains, {len(limits)} limits"
            )
        chain = isinstance(params, Chain)
        if check:
            # A chain's jack-stroke windows are `rigctl check`'s (controller.chain_experiments);
            # the planar force and valve-capacity checks read a `PlantParams` only.
            violations = check_experiment(experiment, limits, None if chain else params)
            if violations:
                raise ExperimentRefused(violations)
        self.experiment, self.period, self.limits, self.n = experiment, period, list(limits), n
        gains = experiment.gains(gains)
        model = plant_model(params, experiment.home) if params is not None else None
        self._hold_law = PidLaw(gains, limits, period)
        self._planned: list[_Phase] = []
        prev_end: np.ndarray | None = None
        for i, seg in enumerate(experiment.segments):
            law = build_law(seg, gains, limits, period, model)
            traj: Trajectory = seg.trajectory
            if seg.compensation is not None:
                traj = AmplitudePhase(
                    traj,
                    limits,
                    period,
                    seg.compensation["gain"],
                    seg.compensation["max_ratio"],
                    seg.compensation["settle_windows"],
                    seg.compensation["harmonics"],
                )
            start = seg.trajectory.start()
            moving = prev_end is not None and np.abs(start - prev_end).max() > _TOL
            if prev_end is not None and moving and not law.drives_to_reference:
                self._planned.append(self._approach(prev_end, start, i, seg.name))
            self._planned.append(_Phase(seg.name, i, traj, law, seg.duration, seg.repeats))
            prev_end = self._end(seg)
        self._phases = list(self._planned)
        self._recover = self._approach(np.zeros(n), np.zeros(n), 0, "recover")
        # The stop after a closed-loop last segment that ends moving (planned at run time from
        # the last reference: an amplitude–phase-compensated segment ends where the plan does
        # not say). Without it the final hold's reference stops in one cycle, and the oil
        # column stops the arm against its inertia (docs/controller.md: an excavator boom
        # ending a sine at 6.3 °/s, 22.27 MPa against the 22.5 MPa interlock).
        self._decel = [lim.max_acceleration for lim in self.limits]
        self._brake = _Phase(
            "brake", 0, TrapezoidPath([[0.0, 0.0]] * n, [1.0] * n, self._decel),
            self._hold_law, period, 1,
        )  # fmt: skip
        self._final = (prev_end if prev_end is not None else np.zeros(n)).copy()
        self._q, self._qd, self._qdd = np.zeros(n), np.zeros(n), np.zeros(n)
        self._zero = np.zeros(n)
        self._cur = self._phases[0]
        self._k = 0
        self._ip = 0
        self.finished = False
        self.segment_index, self.segment_name = 0, ""
        self.time_in_segment = self.elapsed = 0.0
        self.segment_duration, self.segment_repeats = 0.0, 1
        self.total_duration = sum(p.duration * p.repeats for p in self._phases)

    @staticmethod
    def _end(seg: Segment) -> np.ndarray:
        if isinstance(seg.trajectory, Hold) or seg.controller["kind"] == "valve_sine":
            return seg.trajectory.start()
        q, _, _ = seg.trajectory.sample(np.array([seg.duration]))
        return q[0]

    def _approach(self, a: np.ndarray, b: np.ndarray, index: int, name: str) -> _Phase:
        f = APPROACH_FRACTION
        path = TrapezoidPath(
            [[x, y] for x, y in zip(a, b, strict=True)],
            [f * lim.max_velocity for lim in self.limits],
            [f * lim.max_acceleration for lim in self.limits],
        )
        return _Phase(
            f"approach:{name}", index, path, self._hold_law, max(path.duration, self.period), 1
        )

    def enable(self, fb: Feedback) -> None:
        """Starts from the measured position: an approach move to the first segment's start
        (allocates; the loop calls this outside the steady state)."""
        _check_feedback(fb, self.n)
        self._phases = list(self._planned)
        first = self._phases[0]
        if np.abs(fb.q - first.start).max() > _TOL and not first.law.drives_to_reference:
            self._phases.insert(
                0, self._approach(np.array(fb.q, dtype=float), first.start, 0, "start")
            )
        self.total_duration = sum(p.duration * p.repeats for p in self._phases)
        self._ip, self.elapsed, self.finished = 0, 0.0, False
        self._enter(self._phases[0], fb)

    def _enter(self, ph: _Phase, fb: Feedback) -> None:
        self._cur = ph
        if ph.apc is not None:
            ph.apc.restart()
        ph.trajectory.eval(0.0, self._q, self._qd, self._qdd)
        ph.law.enable(fb, self._q)
        self.segment_index, self.segment_name = ph.index, ph.name
        # For progress displays (repeat = time_in_segment // segment_duration + 1).
        self.segment_duration, self.segment_repeats = ph.duration, ph.repeats
        self._k = 0

    def plan_brake(self, ph: _Phase, q: np.ndarray, qd: np.ndarray) -> bool:
        """After the last phase `ph`, whose last reference was (q, q̇): if it drove a closed-loop
        reference that was still moving, plan the brake at each joint's acceleration limit and
        make its rest pose the final one (in place); False when there is nothing to stop."""
        if ph is self._recover or any(ph.law.open_loop) or ph.law.drives_to_reference:
            return False
        if max(abs(float(v)) for v in qd) <= BRAKE_MIN_SPEED:
            return False
        path = self._brake.trajectory
        assert isinstance(path, TrapezoidPath)
        path.brake(q, qd, self._decel, self._final, lead=self.period)
        self._brake.duration = max(path.duration, self.period)
        self._brake.index = ph.index
        self.total_duration += self._brake.duration
        return True

    def last_reference_time(self, ph: _Phase, k: int) -> float:
        """Phase `ph`'s time at its last cycle, after `k` cycles in it (where its last
        reference was taken: the compiled runner evaluates it there again)."""
        t = max(k - 1, 0) * self.period
        return t % ph.duration if ph.repeats > 1 else t

    def _next(self, fb: Feedback) -> bool:
        """Moves to the next phase (a recovery move first if an open-loop phase left the joints
        away from where the next one starts, or from the final pose; a brake after a last
        phase that ends moving); False when done."""
        if self._cur is self._brake:
            return False
        recovering = self._cur is self._recover
        if not recovering:
            self._ip += 1
        last = self._ip >= len(self._phases)
        target = self._final if last else self._phases[self._ip].start
        far = False
        for j in range(self.n):
            if abs(fb.q[j] - target[j]) > RECOVER_TOL:
                far = True
        if far and not recovering and any(self._cur.law.open_loop):
            path = self._recover.trajectory
            assert isinstance(path, TrapezoidPath)
            path.replan(fb.q, target)
            self._recover.duration = max(path.duration, self.period)
            self.total_duration += self._recover.duration
            self._recover.index = self._cur.index if last else self._phases[self._ip].index
            self._enter(self._recover, fb)
            return True
        if last:
            # self._q, self._qd: the last step's reference (re-evaluating the trajectory would
            # step an amplitude–phase compensator's state)
            if self.plan_brake(self._cur, self._q, self._qd):
                self._enter(self._brake, fb)
                return True
            return False
        self._enter(self._phases[self._ip], fb)
        return True

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
        """One cycle. Returns False once the experiment is over (it then holds the end pose)."""
        if self.finished:
            ref_out[:] = self._final
            self._hold_law.update(0.0, fb, self._final, self._zero, self._zero, volts_out)
            return False
        ph = self._cur
        t = self._k * self.period
        if t >= ph.duration * ph.repeats - 0.5 * self.period:
            if not self._next(fb):
                self.finished = True
                self.segment_name = "finished"
                self._hold_law.enable(fb, self._final)
                return self.step(fb, ref_out, volts_out)
            ph = self._cur
            t = 0.0
        tr = t % ph.duration if ph.repeats > 1 else t
        ph.trajectory.eval(tr, self._q, self._qd, self._qdd)
        ph.law.update(tr, fb, self._q, self._qd, self._qdd, volts_out)
        if ph.apc is not None:
            ph.apc.observe(tr, fb.q)  # the position measured at the instant of this command
        ref_out[:] = self._q
        if ph.law.drives_to_reference:
            ph.law.reference_out(ref_out)
        for j, open_loop in enumerate(ph.law.open_loop):
            if open_loop:
                ref_out[j] = fb.q[j]  # no position reference: report the measured one
        self._k += 1
        self.time_in_segment = t
        self.elapsed += self.period
        return True

    def compensation(self) -> list[dict[str, object]]:
        """Each amplitude–phase-compensated segment's state (controller.amplitude_phase)."""
        return [
            {"segment": ph.name, **ph.apc.status()} for ph in self._planned if ph.apc is not None
        ]

    def disable(self) -> None:
        for ph in self._phases:
            ph.law.disable()
        self._hold_law.disable()
