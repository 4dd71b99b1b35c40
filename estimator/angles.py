"""Which measured angle the mechanical regressors differentiate: the piston potentiometer's.

Why (measured, not argued): the mechanical regression τ = Φ(q, q̇, q̈) θ has q̈ in its inertial
columns, and q̈ is the second derivative of a *measured* angle. Its noise is noise in the
regressor (errors in variables), which least squares cannot average away: it biases M1, M2 and
R12 towards zero and inflates the residual. On the reference rig (DESIGN §1.4) the 14-bit
resolver has 0.02° ≈ 3.5e-4 rad of noise, while the potentiometer's 5 µm over a moment arm
r ≈ 0.07–0.11 m is 0.5–0.7e-4 rad: 5–7× less, 25–50× less variance in q̈. On a 95 s standard
run, batch IDIM at a 20 Hz corner gave R12 −4.4 % with the resolver and +0.2 % with the angle
from the potentiometer; at 30 Hz −19 % against −0.1 %.

The potentiometer gives the angle through the known cylinder geometry (the law of cosines,
DESIGN §1.1: `controller.plant.dynamics.joint_from_piston`, the inverse of `piston`), the same
geometry the regressors already use for the moment arm. The resolver stays the reference for
the absolute angle: the mean difference between the two (a calibration offset on a real rig;
zero on the simulator) is added back, so gravity terms see the resolver's zero. The mean is
cumulative and applied block by block, so the online estimator stays causal and the batch (one
block) uses the whole record's mean.
"""

from __future__ import annotations

import numpy as np

from controller.plant.dynamics import joint_from_piston
from controller.plant.params import PlantParams


class AngleFusion:
    """Replace the resolver block of raw rows `[q | s | …]` by the potentiometer's angle plus
    the running mean of (resolver − potentiometer angle). In place; see the module doc."""

    def __init__(self, params: PlantParams, n_joints: int) -> None:
        if n_joints != params.n:
            raise ValueError(f"{n_joints} joints but the plant parameters describe {params.n}")
        self.params = params
        self.nj = n_joints
        self._sum = np.zeros(n_joints)
        self._count = 0

    @property
    def offset(self) -> np.ndarray:
        """Current mean resolver − potentiometer angle per joint (rad)."""
        return self._sum / max(self._count, 1)

    def apply(self, raw: np.ndarray) -> None:
        """raw (N, ≥ 2·nj) with q in columns [0, nj) and s in [nj, 2 nj); q is overwritten."""
        nj = self.nj
        if raw.shape[0] == 0:
            return
        qs = joint_from_piston(self.params, raw[:, nj : 2 * nj])
        diff = raw[:, :nj] - qs
        finite = np.isfinite(diff)
        self._sum += np.where(finite, diff, 0.0).sum(axis=0)
        # One count per row (rows with a non-finite entry are skipped by the RLS anyway).
        self._count += int(np.count_nonzero(finite.all(axis=1)))
        raw[:, :nj] = qs + self.offset
