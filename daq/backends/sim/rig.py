"""`SimRig`: the simulated backend plus scaling, stepped directly (no service), for tests,
benchmarks and quick experiments. It reports only scaled channel values, like the loop does."""

from __future__ import annotations

import numpy as np

from controller.plant.params import PlantParams
from daq.backends.sim.backend import SimBackend
from daq.profile.schema import Profile
from daq.scaling import ChannelScaler, eng_to_units


class SimRig:
    def __init__(self, profile: Profile, *, powered: bool = True) -> None:
        self.profile = profile
        self.backend = SimBackend.from_profile(profile)
        self.backend.open()
        if powered:
            # No service switches a station's power here ([hydraulics]): the rig runs at its
            # working pressure from the start, as a profile without the section does.
            self.backend.precharge(2)  # daq.station.power.Power.HIGH
        self.inputs = profile.inputs
        self.outputs = profile.outputs
        self.scaler = ChannelScaler(self.inputs)
        self.period = profile.period
        self.raw = np.zeros(len(self.inputs))
        self.eng = np.zeros(len(self.inputs))
        self._volts = np.zeros(len(self.outputs))
        self.seq = 0
        self.read()

    @property
    def t(self) -> float:
        return self.seq * self.period

    @property
    def true_params(self) -> PlantParams:
        return self.backend.true_params

    def index(self, channel: str) -> int:
        return [c.name for c in self.inputs].index(channel)

    def read(self) -> np.ndarray:
        self.backend.read(self.t, self.raw)
        self.scaler.scale(self.raw, self.eng)
        return self.eng

    def step(self, valve_eng: np.ndarray) -> np.ndarray:
        """Apply one valve command per output channel (engineering units, i.e. volts at the
        valve) for one period; return the scaled inputs read at the end of it."""
        for i, c in enumerate(self.outputs):
            self._volts[i] = eng_to_units(c, float(valve_eng[i]))
        self.backend.write(self.t, self._volts)
        self.backend.advance(self.period)
        self.seq += 1
        return self.read()
