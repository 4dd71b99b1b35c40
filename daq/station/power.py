"""Hydraulic power levels and what each one means for the digital lines (docs/operations.md).

A servo-hydraulic station has a pump (or a hydraulic power unit) and a service manifold with a
low- and a high-pressure stage: set-up, jogging and calibration happen at low pressure, tests
at high. Two digital lines carry the level: the pump line (on for low and high) and the
high-stage line (on for high only).
"""

from __future__ import annotations

import enum

from daq.profile.schema import Profile


class Power(enum.IntEnum):
    """Values are what the status block and the events carry: never renumber."""

    OFF = 0
    LOW = 1
    HIGH = 2


def lines(level: Power) -> tuple[bool, bool]:
    """(pump line, high-stage line) for a level."""
    return level != Power.OFF, level == Power.HIGH


def parse(name: str) -> Power:
    """ "off" | "low" | "high" → `Power`; ValueError naming the allowed values otherwise."""
    try:
        return Power[name.upper()]
    except (KeyError, AttributeError):
        raise ValueError(f"power level must be off, low or high, not {name!r}") from None


def initial(profile: Profile) -> Power:
    """A station with `[hydraulics]` starts with power off; without it, power is implicitly
    on (the service does not switch it), as before hydraulics were part of the profile."""
    return Power.OFF if profile.hydraulics is not None else Power.HIGH


def power_lines(profile: Profile, device: str) -> list[str]:
    """The digital lines `device` drives for the station's power: [pump] or [pump, high];
    [] when the profile has no [hydraulics] or they belong to another device."""
    hyd = profile.hydraulics
    if hyd is None:
        return []
    owner = hyd.device or (profile.backend.kind if profile.backend.kind != "composite" else "")
    if owner != device:
        return []
    return [hyd.pump_line] + ([hyd.high_line] if hyd.high_line else [])


def stage_pressure(profile: Profile, level: Power) -> float:
    """The declared supply pressure of a level, Pa: 0 off, `low_pressure_pa` at low (a
    one-stage manifold, without `high_line`, has only [plant].supply_pressure_pa), the
    working pressure [plant].supply_pressure_pa at high (NaN for a profile without [plant])."""
    if level == Power.OFF:
        return 0.0
    hyd = profile.hydraulics
    if hyd is not None and level == Power.LOW and hyd.high_line:
        return hyd.low_pressure_pa
    return profile.plant.supply_pressure_pa if profile.plant is not None else float("nan")
