"""Profiles by name for the controller tests; the closed loop itself is the product's
(`daq.sim_closed_loop`, shared with bench/tracking.py)."""

from __future__ import annotations

from pathlib import Path

from daq.profile import load_profile
from daq.profile.schema import Profile
from daq.sim_closed_loop import SimLoop, gains_limits, rms_deg, sine_experiment

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["ROOT", "SimLoop", "gains_limits", "profile", "rms_deg", "sine_experiment"]


def profile(name: str = "sim-2dof") -> Profile:
    return load_profile(ROOT / "hw_profiles" / f"{name}.toml")
