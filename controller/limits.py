"""Motion and valve limits of one joint, in SI units (the daq builds them from the profile)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class JointLimits:
    """Position window (rad), velocity (rad/s), acceleration (rad/s²) and valve command (V).

    `area_cap`/`area_rod` (m²) are the cylinder's piston areas when the joint has both pressure
    channels, else 0: load-pressure (ΔP) feedback needs them and is refused where they are 0.
    """

    position_min: float
    position_max: float
    max_velocity: float
    max_acceleration: float
    valve_max_v: float
    area_cap: float = 0.0
    area_rod: float = 0.0
    #: The loop's following-error interlock: |ref − q| ≤ following_error (rad) +
    #: following_error_per_velocity (s) · |ref velocity|; inf where it is off. What a
    #: compensator that moves the reference away from the desired one must stay inside.
    following_error: float = math.inf
    following_error_per_velocity: float = 0.0

    def __post_init__(self) -> None:
        for name in (
            "position_min",
            "position_max",
            "max_velocity",
            "max_acceleration",
            "valve_max_v",
            "area_cap",
            "area_rod",
            "following_error_per_velocity",
        ):
            v = getattr(self, name)
            if not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"JointLimits.{name} must be a finite number, got {v!r}")
        if not self.position_max > self.position_min:
            raise ValueError(
                f"JointLimits: position_max ({self.position_max}) must exceed "
                f"position_min ({self.position_min})"
            )
        for name in ("max_velocity", "max_acceleration", "valve_max_v"):
            if getattr(self, name) <= 0.0:
                raise ValueError(f"JointLimits.{name} must be > 0, got {getattr(self, name)}")
        if not (self.following_error > 0.0) or self.following_error_per_velocity < 0.0:
            raise ValueError(
                "JointLimits: following_error must be > 0 (inf: off) and "
                f"following_error_per_velocity >= 0, got {self.following_error!r}, "
                f"{self.following_error_per_velocity!r}"
            )
        if self.area_cap < 0.0 or self.area_rod < 0.0:
            raise ValueError("JointLimits: piston areas must be >= 0 (0 = no pressure channels)")

    @property
    def has_pressure(self) -> bool:
        """True when ΔP feedback is possible (both pressures measured, areas known)."""
        return self.area_cap > 0.0 and self.area_rod > 0.0

    @classmethod
    def from_degrees(
        cls,
        soft_min_deg: float,
        soft_max_deg: float,
        max_velocity_deg_s: float,
        max_acceleration_deg_s2: float,
        valve_max_v: float,
        area_cap: float = 0.0,
        area_rod: float = 0.0,
    ) -> JointLimits:
        """From the profile's units (degrees)."""
        r = math.radians
        return cls(
            r(soft_min_deg),
            r(soft_max_deg),
            r(max_velocity_deg_s),
            r(max_acceleration_deg_s2),
            float(valve_max_v),
            float(area_cap),
            float(area_rod),
        )
