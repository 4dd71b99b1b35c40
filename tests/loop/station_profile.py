"""Profiles with a hydraulic station, derived from the shipped simulated rigs for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daq.profile.loader import load_profile
from daq.profile.schema import Profile
from daq.station.twin import with_station

PROFILES = Path(__file__).resolve().parents[2] / "hw_profiles"


def station_profile(
    name: str = "sim-2dof.toml",
    *,
    supply_channel: bool = True,
    initial_deg: list[float] | None = None,
    soft_min_deg: list[float] | None = None,
    **hydraulics: Any,
) -> Profile:
    profile = with_station(
        load_profile(PROFILES / name), supply_channel=supply_channel, **hydraulics
    )
    if initial_deg is None and soft_min_deg is None:
        return profile
    data = profile.model_dump(exclude_none=True)
    if initial_deg is not None:
        for tj, q in zip(data["backend"]["sim"]["plant"]["joints"], initial_deg, strict=True):
            tj["initial_deg"] = q
    if soft_min_deg is not None:
        for j, q in zip(data["joints"], soft_min_deg, strict=True):
            j["limits"]["soft_min_deg"] = q
    return Profile.model_validate(data)
