"""Closed loop on the simulator without the service: SimRig + Feedback + a runner (virtual
time). Shared by the tracking tests and bench/controller.py."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from controller.feedback import Feedback
from controller.limits import JointLimits
from controller.pid import PidParams
from daq.backends.sim import SimRig
from daq.profile import load_profile
from daq.profile.schema import Profile

ROOT = Path(__file__).resolve().parents[2]
ROLES = {
    "resolver": "q",
    "pressure_cap": "p_cap",
    "pressure_rod": "p_rod",
    "lvdt": "spool",
    "potentiometer": "piston",
}


def profile(name: str = "sim-2dof") -> Profile:
    return load_profile(ROOT / "hw_profiles" / f"{name}.toml")


def gains_limits(p: Profile) -> tuple[list[PidParams], list[JointLimits]]:
    gains = [PidParams.from_mapping(j.pid) for j in p.joints]
    lim = [
        JointLimits.from_degrees(
            j.limits.soft_min_deg,
            j.limits.soft_max_deg,
            j.limits.max_velocity_deg_s,
            j.limits.max_acceleration_deg_s2,
            j.limits.valve_max_v,
        )
        for j in p.joints
    ]
    return gains, lim


class SimLoop:
    """Reads the rig into a Feedback, calls the runner, writes its volts: the loop's data path."""

    def __init__(self, p: Profile) -> None:
        self.rig = SimRig(p)
        self.n = len(p.joints)
        self.fb = Feedback(self.n)
        joints = [j.name for j in p.joints]
        self.map = [
            (i, getattr(self.fb, ROLES[c.role]), joints.index(c.joint))
            for i, c in enumerate(self.rig.inputs)
            if c.role in ROLES
        ]
        self.valve_joint = [joints.index(c.joint) for c in self.rig.outputs]
        self.ref = np.zeros(self.n)
        self.volts = np.zeros(self.n)
        self.out = np.zeros(len(self.rig.outputs))
        self.fill(self.rig.eng)

    def fill(self, eng: np.ndarray) -> None:
        for i, arr, j in self.map:
            arr[j] = eng[i]
        self.fb.t = self.rig.t

    def run(self, runner: object, seconds: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Enable, run `seconds`, return (t, ref, q) histories."""
        steps = round(seconds / self.rig.period)
        ts, refs, qs = np.zeros(steps), np.zeros((steps, self.n)), np.zeros((steps, self.n))
        runner.enable(self.fb)  # type: ignore[attr-defined]
        for k in range(steps):
            runner.step(self.fb, self.ref, self.volts)  # type: ignore[attr-defined]
            for i, j in enumerate(self.valve_joint):
                self.out[i] = self.volts[j]
            ts[k], refs[k], qs[k] = self.rig.t, self.ref, self.fb.q
            self.fill(self.rig.step(self.out))
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
