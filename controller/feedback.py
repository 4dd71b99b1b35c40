"""What the controller sees of the rig each cycle: scaled channel values, nothing else."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Feedback:
    """Per-joint measurements in SI units, filled in place by the loop every cycle.

    Arrays are allocated once; a channel the profile does not have stays NaN.
    """

    n_joints: int
    t: float = 0.0
    q: np.ndarray = field(init=False)  # joint angle, rad (resolver)
    p_cap: np.ndarray = field(init=False)  # cap-side pressure, Pa
    p_rod: np.ndarray = field(init=False)  # rod-side pressure, Pa
    spool: np.ndarray = field(init=False)  # spool position as LVDT volts
    piston: np.ndarray = field(init=False)  # piston displacement from mid-stroke, m

    def __post_init__(self) -> None:
        for name in ("q", "p_cap", "p_rod", "spool", "piston"):
            setattr(self, name, np.full(self.n_joints, np.nan))
