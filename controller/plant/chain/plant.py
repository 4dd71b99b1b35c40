"""A chain with its packed arrays and scratch: the numpy-facing side of the jitted dynamics."""

from __future__ import annotations

import numpy as np

from controller.plant.chain.hydraulics import derivative_chain, drive_state, integrate_chain
from controller.plant.chain.model import L_OFF, Chain
from controller.plant.chain.rnea import WS_STRIDE, jack_geometry, mass_matrix, rnea, workspace
from controller.plant.params import NE_GLOBAL, NE_JOINT, PlantEffects


class ChainPlant:
    """The chain's dynamics on numpy arrays of one state (not for the loop: these allocate)."""

    def __init__(self, chain: Chain, effects: PlantEffects | None = None) -> None:
        self.chain = chain
        self.n = chain.n
        arrays = chain.pack()
        self.C, self.L, self.J, self.F = arrays.glob, arrays.links, arrays.jacks, arrays.fluid
        self.E = pack_effects(chain, effects)
        self.ws = workspace(self.n)

    def _q(self, q: np.ndarray) -> np.ndarray:
        q = np.ascontiguousarray(q, dtype=float)
        if q.shape != (self.n,):
            raise ValueError(f"expected {self.n} joint values, got shape {q.shape}")
        return q

    def inverse_dynamics(
        self, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray, gravity: bool = True
    ) -> np.ndarray:
        """Rigid-body joint torques M q̈ + c + g (no friction, no actuator)."""
        tau = np.empty(self.n)
        rnea(
            self.C, self.L, self.J, self._q(q), self._q(qd), self._q(qdd),
            1.0 if gravity else 0.0, self.ws, tau,
        )  # fmt: skip
        return tau

    def mass_matrix(self, q: np.ndarray) -> np.ndarray:
        m = np.empty((self.n, self.n))
        mass_matrix(self.C, self.L, self.J, self._q(q), self.ws, m)
        return m

    def gravity_torque(self, q: np.ndarray) -> np.ndarray:
        z = np.zeros(self.n)
        return self.inverse_dynamics(q, z, z)

    def jack_lengths(self, q: np.ndarray) -> np.ndarray:
        """(m, 2): length ℓ and ℓ′ = dℓ/dq of every jack, in `Chain.jacks()` order."""
        q = self._q(q)
        out = np.empty((len(self.chain.jacks()), 2))
        for k, (i, _) in enumerate(self.chain.jacks()):
            ell, l1, _, _, _, _, _ = jack_geometry(self.J, k, q[i] + self.L[i, L_OFF])
            out[k] = ell, l1
        return out

    def chamber_volumes(self, q: np.ndarray) -> np.ndarray:
        """(n, 2): V⁺, V⁻ of every joint's chambers at q."""
        q = self._q(q)
        fx = self.E[0] > 0.5
        return np.array(
            [drive_state(self.L, self.J, self.F, self.E, i, q[i], fx)[:2] for i in range(self.n)]
        )

    def derivative(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        dx = np.empty(len(x))
        derivative_chain(
            np.ascontiguousarray(x, dtype=float), self._q(v), self.C, self.L, self.J, self.F,
            self.E, self.ws, dx,
        )  # fmt: skip
        return dx

    def integrate(
        self, x: np.ndarray, v: np.ndarray, dt: float, nsub: int, constrain: bool = True
    ) -> None:
        """Advance x (in place) by dt with the valve commands v held."""
        work = np.empty((5, len(x)))
        integrate_chain(
            x, self._q(v), self.C, self.L, self.J, self.F, self.E, dt, nsub, work, self.ws,
            constrain,
        )  # fmt: skip


class _FluidShape:
    """What `PlantEffects.pack` reads of a plant: the joint count and nominal dead volumes."""

    def __init__(self, chain: Chain) -> None:
        self.n = chain.n
        self.dead_volume = np.array(
            [0.0 if j.valve is None else j.valve.dead_volume for j in chain.joints]
        )


def pack_effects(chain: Chain, effects: PlantEffects | None) -> np.ndarray:
    """The effects array (`PlantEffects.pack`'s layout, one block per joint)."""
    if effects is None:
        out = np.zeros(NE_GLOBAL + NE_JOINT * chain.n)
        out.setflags(write=False)
        return out
    return effects.pack(_FluidShape(chain))  # type: ignore[arg-type]


__all__ = ["WS_STRIDE", "ChainPlant", "pack_effects"]
