"""Profiles with a hydraulic station, derived from the shipped simulated rigs for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daq.profile.loader import load_profile
from daq.profile.schema import Profile

PROFILES = Path(__file__).resolve().parents[2] / "hw_profiles"

HYDRAULICS: dict[str, Any] = {
    "pump_line": "sim",
    "high_line": "sim",
    "low_pressure_pa": 2.5e6,
    "ramp_up_s": 1.5,
    "ramp_down_s": 3.0,
}
#: The supply transducer, like the chamber ones: 0–10 MPa → 0–5 V on a 16-bit ±10 V A/D.
SUPPLY_CHANNEL: dict[str, Any] = {
    "name": "p_supply",
    "role": "supply",
    "physical": "sim",
    "converter": {"bits": 16, "min": -10.0, "max": 10.0},
    "scaling": {"kind": "linear", "gain": 2.0e6, "offset": 0.0, "units": "Pa"},
    "valid_min": -0.5e6,
    "valid_max": 9.5e6,
    "sim_noise": 5.0e3,
}


def station_profile(
    name: str = "sim-2dof.toml",
    *,
    supply_channel: bool = True,
    initial_deg: list[float] | None = None,
    soft_min_deg: list[float] | None = None,
    **hydraulics: Any,
) -> Profile:
    data = load_profile(PROFILES / name).model_dump(exclude_none=True)
    data["hydraulics"] = {**HYDRAULICS, **hydraulics}
    if supply_channel:
        outputs = [c for c in data["channels"] if c["role"] == "valve"]
        inputs = [c for c in data["channels"] if c["role"] != "valve"]
        data["channels"] = [*inputs, SUPPLY_CHANNEL, *outputs]
    if initial_deg is not None:
        for tj, q in zip(data["backend"]["sim"]["plant"]["joints"], initial_deg, strict=True):
            tj["initial_deg"] = q
    if soft_min_deg is not None:
        for j, q in zip(data["joints"], soft_min_deg, strict=True):
            j["limits"]["soft_min_deg"] = q
    return Profile.model_validate(data)
