"""Closed loop on the simulator without the service: SimRig + Feedback + a runner, in virtual
time. The loop's own data path (`FeedbackMap`) with none of its threads, sockets or mailbox, so
that controller tests and `bench/tracking.py` drive the same code the service runs."""

from __future__ import annotations

import math

import numpy as np

from controller.feedback import Feedback
from controller.limits import JointLimits
from controller.pid import PidParams
from controller.runner import HoldRunner
from daq.backends.sim import SimRig
from daq.loop.feedback_map import FeedbackMap
from daq.profile.schema import Profile
from daq.service.control_api import joint_gains, joint_limits


def gains_limits(p: Profile) -> tuple[list[PidParams], list[JointLimits]]:
    """The gains and limits the service builds from the profile (the same functions)."""
    return joint_gains(p), joint_limits(p)


class SimLoop:
    """Reads the rig into a Feedback, calls the runner, writes its volts: the loop's data path
    (the loop's own FeedbackMap), without the service."""

    def __init__(self, p: Profile) -> None:
        self.rig = SimRig(p)
        self.n = len(p.joints)
        self.map = FeedbackMap(p)
        self.fb = self.map.new_feedback()
        self.ref = np.zeros(self.n)
        self.volts = np.zeros(self.n)
        self.out = np.zeros(len(self.rig.outputs))
        self.map.fill(self.rig.eng, self.fb, self.rig.t)

    def run(self, runner: object, seconds: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Enable, run `seconds`, return (t, ref, q) histories."""
        steps = round(seconds / self.rig.period)
        ts, refs, qs = np.zeros(steps), np.zeros((steps, self.n)), np.zeros((steps, self.n))
        runner.enable(self.fb)  # type: ignore[attr-defined]
        for k in range(steps):
            runner.step(self.fb, self.ref, self.volts)  # type: ignore[attr-defined]
            self.map.to_channels(self.volts, self.out)
            ts[k], refs[k], qs[k] = self.rig.t, self.ref, self.fb.q
            self.map.fill(self.rig.step(self.out), self.fb, self.rig.t)
        runner.disable()  # type: ignore[attr-defined]
        return ts, refs, qs


class StepRunner(HoldRunner):
    """Holds, then steps every joint's reference by `step` rad at `at` s (a step test)."""

    def __init__(
        self,
        gains: list[PidParams],
        limits: list[JointLimits],
        period: float,
        step: float,
        at: float,
    ) -> None:
        super().__init__(gains, limits, period)
        self.step_rad, self.at, self.done = step, at, False

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
        if not self.done and self.elapsed >= self.at:
            self.position += self.step_rad
            self.done = True
        return super().step(fb, ref_out, volts_out)


def sine_experiment(
    p: Profile, controller: dict, seconds: float = 4.0, amp_deg: float = 5.0, freq: float = 1.0
) -> dict:
    """One sine segment of `amp_deg` at `freq` on every joint around home, with `controller`."""
    home = [j.home_deg for j in p.joints]
    n = len(home)
    return {
        "name": "sine",
        "home_deg": home,
        "segments": [
            {
                "name": "sine",
                "duration_s": seconds,
                "controller": controller,
                "trajectory": {
                    "kind": "sine",
                    "amplitude_deg": [amp_deg] * n,
                    "frequency_hz": [freq] * n,
                },
            }
        ],
    }


def rms_deg(ref: np.ndarray, q: np.ndarray, skip: int) -> list[float]:
    """RMS tracking error per joint in degrees, after the first `skip` samples."""
    e = ref[skip:] - q[skip:]
    return [math.degrees(float(np.sqrt(np.mean(e[:, j] ** 2)))) for j in range(e.shape[1])]


def track_desired(
    p: Profile, runner: object, desired: object, segment: str, seconds: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run `runner` for `seconds` and return, for the cycles of `segment` only, (reference the
    runner sent, desired reference, measured position) histories (rad). The desired one is
    `desired` (the experiment file's trajectory) at the runner's time in the segment: with
    amplitude–phase compensation the runner's reference is the adapted command, and the
    error that matters is the motion's from what the experiment asked for."""
    loop = SimLoop(p)
    n = loop.n
    steps = round(seconds / loop.rig.period)
    refs, wants, qs = [], [], []
    want, v, a = np.zeros(n), np.zeros(n), np.zeros(n)
    runner.enable(loop.fb)  # type: ignore[attr-defined]
    for _ in range(steps):
        runner.step(loop.fb, loop.ref, loop.volts)  # type: ignore[attr-defined]
        if runner.segment_name == segment:  # type: ignore[attr-defined]
            t = runner.time_in_segment  # type: ignore[attr-defined]
            desired.eval(t % desired.duration if desired.duration > 0 else t, want, v, a)  # type: ignore[attr-defined]
            refs.append(loop.ref.copy())
            wants.append(want.copy())
            qs.append(loop.fb.q.copy())
        loop.map.to_channels(loop.volts, loop.out)
        loop.map.fill(loop.rig.step(loop.out), loop.fb, loop.rig.t)
    runner.disable()  # type: ignore[attr-defined]
    return np.array(refs), np.array(wants), np.array(qs)
