"""The simulated power unit: pump, accumulator, low/high stage relief valves.

The accumulator charges towards the relief setting of the selected stage and discharges when
the pump stops, both first order (a gas-charged accumulator behind a fixed-displacement pump
and a relief valve, seen from the valves: the supply rises to the relief's cracking pressure
with the charging time constant and falls with the discharging one). The plant's valves see
this pressure as their p_s (DESIGN §1.2): with power off and a valve opened, the chambers
drain to tank through it.
"""

from __future__ import annotations

import math

import numpy as np

from controller.plant.params import G_PS
from daq.profile.schema import Profile
from daq.station.power import Power, lines, stage_pressure


class SimSupplyUnit:
    def __init__(
        self, low_relief: float, high_relief: float, tau_charge: float, tau_discharge: float,
        period: float,
    ) -> None:  # fmt: skip
        self.low_relief = low_relief
        self.high_relief = high_relief
        self._a_up = 1.0 - math.exp(-period / tau_charge)
        self._a_down = 1.0 - math.exp(-period / tau_discharge)
        self.level = Power.OFF
        self.target = 0.0
        self.pressure = 0.0

    @classmethod
    def from_profile(cls, profile: Profile, period: float) -> SimSupplyUnit | None:
        hyd = profile.hydraulics
        if hyd is None:
            return None
        truth = profile.backend.sim.plant.supply if profile.backend.sim is not None else None  # type: ignore[union-attr]
        low = stage_pressure(profile, Power.LOW)
        high = stage_pressure(profile, Power.HIGH)
        if truth is not None:
            low = truth.low_relief_pa or low
            high = truth.high_relief_pa or high
        tau_up = (truth.charge_time_constant_s if truth else None) or hyd.ramp_up_s / 3.0
        tau_down = (truth.discharge_time_constant_s if truth else None) or hyd.ramp_down_s / 3.0
        return cls(low, high, tau_up, tau_down, period)

    def switch(self, level: int) -> None:
        pump, high = lines(Power(level))
        self.level = Power(level)
        self.target = 0.0 if not pump else self.high_relief if high else self.low_relief

    def step(self, P: np.ndarray) -> None:
        """One loop period: move the supply and put it where the valves read it."""
        gap = self.target - self.pressure
        self.pressure += gap * (self._a_up if gap > 0.0 else self._a_down)
        P[G_PS] = self.pressure
