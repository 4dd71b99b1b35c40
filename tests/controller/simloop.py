"""Profiles by name for the controller tests; the closed loop itself is the product's
(`daq.sim_closed_loop`, shared with bench/tracking.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from daq.profile import load_profile
from daq.profile.schema import Profile
from daq.sim_closed_loop import SimLoop, gains_limits, rms_deg, sine_experiment

ROOT = Path(__file__).resolve().parents[2]

__all__ = [
    "ROOT",
    "SegmentSpy",
    "SimLoop",
    "gains_limits",
    "profile",
    "rms_deg",
    "sine_experiment",
]


class SegmentSpy:
    """Runs an `ExperimentRunner` in a `SimLoop`, noting the segment name of every cycle."""

    def __init__(self, runner: object) -> None:
        self.runner = runner
        self.names: list[str] = []

    def enable(self, fb: object) -> None:
        self.runner.enable(fb)  # type: ignore[attr-defined]

    def step(self, fb: object, ref: np.ndarray, volts: np.ndarray) -> bool:
        running: bool = self.runner.step(fb, ref, volts)  # type: ignore[attr-defined]
        self.names.append(self.runner.segment_name)  # type: ignore[attr-defined]
        return running

    def disable(self) -> None:
        self.runner.disable()  # type: ignore[attr-defined]


def profile(name: str = "sim-2dof") -> Profile:
    return load_profile(ROOT / "hw_profiles" / f"{name}.toml")
