"""A chain with its packed arrays and scratch: the numpy-facing side of the jitted dynamics."""

from __future__ import annotations

import numpy as np

from controller.plant.chain.hydraulics import derivative_chain, drive_state, integrate_chain
from controller.plant.chain.model import L_OFF, Chain
from controller.plant.chain.rnea import jack_geometry, mass_matrix, rnea, workspace
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


def equilibrium_state(plant: ChainPlant, q: np.ndarray, p_low: float) -> np.ndarray:
    """A state at rest at q holding against gravity: each joint's lower chamber pressure is
    `p_low` and the other follows from τ_g = T⁺p⁺ − T⁻p⁻ (`drive_state`'s torque per
    pressure). Raises if a joint cannot hold within 0 … supply pressure."""
    q = plant._q(q)
    n = plant.n
    tau_g = plant.gravity_torque(q)
    fx = plant.E[0] > 0.5
    pc = np.full(n, p_low)
    pr = np.full(n, p_low)
    ps = plant.chain.supply_pressure
    for i in range(n):
        _, _, tc, tr = drive_state(plant.L, plant.J, plant.F, plant.E, i, q[i], fx)
        if tc == 0.0:
            continue
        # The rod side at p_low unless that leaves the cap side lower: then the cap side.
        pc[i] = (tau_g[i] + tr * p_low) / tc
        if pc[i] < p_low:
            pc[i] = p_low
            pr[i] = (tc * p_low - tau_g[i]) / tr
        if not (0.0 <= pc[i] <= ps and 0.0 <= pr[i] <= ps):
            raise ValueError(
                f"joint {plant.chain.names[i]!r} cannot hold {tau_g[i]:.4g} N·m at q = {q[i]:.4g} "
                f"rad within 0 … {ps:.4g} Pa"
            )
    return np.concatenate([q, np.zeros(n), pc, pr, np.zeros(n)])


def stroke_limits(plant: ChainPlant, q_ref: np.ndarray) -> np.ndarray:
    """(n, 2): the joint-angle range around q_ref that every jack's stroke allows (±inf for a
    motor). Each jack's length is monotonic between its triangle's flat positions, so the
    limits are where ℓ reaches ℓc and ℓc + L walking out from q_ref."""
    from scipy.optimize import brentq

    q_ref = plant._q(q_ref)
    out = np.tile([-np.inf, np.inf], (plant.n, 1))
    for k, (i, jack) in enumerate(plant.chain.jacks()):

        def length(t: float, k: int = k, i: int = i) -> float:
            return float(jack_geometry(plant.J, k, t + plant.L[i, L_OFF])[0])

        lo, hi = jack.closed_length, jack.closed_length + jack.stroke
        if not lo <= length(float(q_ref[i])) <= hi:
            raise ValueError(f"joint {plant.chain.names[i]!r}: q_ref puts a jack off its stroke")
        for side, direction in ((0, -1.0), (1, 1.0)):
            step = 1e-3 * direction
            t0 = float(q_ref[i])
            t1 = t0
            while abs(t1 - t0) < np.pi and lo <= length(t1) <= hi:
                t1 += step
            if abs(t1 - t0) >= np.pi:
                continue
            target = lo if length(t1) < lo else hi
            edge = brentq(lambda t, target=target: length(t) - target, t1 - step, t1, xtol=1e-14)
            out[i, side] = max(out[i, side], edge) if side == 0 else min(out[i, side], edge)
    return out
