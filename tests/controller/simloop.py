"""Closed loop on the simulator without the service: SimRig + Feedback + a runner (virtual
time). Shared by the tracking tests and bench/controller.py."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from controller.limits import JointLimits
from controller.pid import PidParams
from daq.backends.sim import SimRig
from daq.control_api import joint_gains, joint_limits
from daq.feedback_map import FeedbackMap
from daq.profile import load_profile
from daq.profile.schema import Profile

ROOT = Path(__file__).resolve().parents[2]


def profile(name: str = "sim-2dof") -> Profile:
    return load_profile(ROOT / "hw_profiles" / f"{name}.toml")


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


def sine_experiment(
    p: Profile, controller: dict, seconds: float = 4.0, amp_deg: float = 5.0, freq: float = 1.0
) -> dict:
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
    e = ref[skip:] - q[skip:]
    return [math.degrees(float(np.sqrt(np.mean(e[:, j] ** 2)))) for j in range(e.shape[1])]
