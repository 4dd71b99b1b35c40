"""The simulated serial-chain machine (a `[chain]` profile, docs/excavator.md) behind the same
sensors, converters and faults as the planar simulator (`SimBackend`).

Its plant is `controller.plant.chain`: the chain's jitted integrator (`integrate_chain`, RK4 in
`SUBSTEPS` substeps per loop period, as the planar plant) with the jacks' end stops. The state
has the planar plant's layout, [q, q̇, p⁺, p⁻, u] per joint and the oil temperature (40 °C:
the chain profile declares no thermal effect), so the sensor kernel reads angles, chamber (or
motor port) pressures and spools alike; a jack joint's potentiometer reads its first jack's
piston, ℓ − ℓc − L/2 (zero at mid-stroke, as the planar rigs' transducers), computed from the
joint angle after every step. A joint with several jacks on one valve (the boom's pair) has
one pressure pair: its jacks share the chambers (controller/plant/chain/hydraulics.py).
"""

from __future__ import annotations

import numpy as np

from controller.feedforward_chain import ChainModel
from controller.plant.chain.hydraulics import integrate_chain
from controller.plant.chain.model import K_CLOSED, K_STROKE, L_JACK0, L_NJACK, L_OFF, Chain
from controller.plant.chain.plant import ChainPlant, equilibrium_state
from controller.plant.chain.rnea import jack_geometry
from controller.plant.jit import njit
from controller.plant.params import J_KV, N_GLOBAL, N_JOINT, NOMINAL_OIL_C
from daq.backends.sim.backend import PISTON_GIVEN, ROLE_CODES, SUBSTEPS, SimBackend
from daq.profile.schema import Channel, Profile

#: The start's lower chamber pressure as a fraction of the supply: the planar simulator's
#: rod-side 3/7 (controller.plant.dynamics.equilibrium_state), so both start alike stiff.
START_LOW_PRESSURE = 3.0 / 7.0


@njit
def _pistons(J: np.ndarray, L: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """out[i] = ℓ − ℓc − L/2 of joint i's first jack at x's angle (0 for a joint without)."""
    for i in range(out.shape[0]):
        if int(L[i, L_NJACK]) == 0:
            out[i] = 0.0
            continue
        k = int(L[i, L_JACK0])
        ell, _, _, _, _, _, _ = jack_geometry(J, k, x[i] + L[i, L_OFF])
        out[i] = ell - J[k, K_CLOSED] - 0.5 * J[k, K_STROKE]


class ChainSimBackend(SimBackend):
    """The chain machine of a `[chain]` profile, simulated (real or virtual time)."""

    def _init_plant(self, profile: Profile) -> None:
        chain, home, _ = profile.chain_model()
        self.chain: Chain = chain
        #: The true plant: no effects beyond the model (the chain profile declares none).
        self.true_plant = ChainPlant(chain)
        plant = self.true_plant
        self.supply = None  # the schema refuses [hydraulics] on a chain: supply constant
        # The sensor kernel reads the supply at G_PS of the fluid array (PlantParams' layout).
        self._P = plant.F
        self._E = plant.E
        n = plant.n
        self._n = n
        self._valve_gain = np.array([plant.F[N_GLOBAL + N_JOINT * i + J_KV] for i in range(n)])
        self._work = np.zeros((5, 5 * n + 1))
        self._ws = plant.ws
        self._ramp = (0.0, 0.0, 0.0)
        x0 = equilibrium_state(plant, home, START_LOW_PRESSURE * chain.supply_pressure)
        self._x = np.append(x0, NOMINAL_OIL_C)
        self._piston = np.zeros(n)
        _pistons(plant.J, plant.L, self._x, self._piston)

    def _role_code(self, c: Channel) -> int:
        # The planar potentiometer kernel computes the piston from [plant]'s pins; the chain's
        # pistons are computed here, per joint, after every step.
        return PISTON_GIVEN if c.role == "potentiometer" else ROLE_CODES[c.role]

    def warm_up(self) -> None:
        # As the planar simulator's: load the jitted step from its cache on a scratch state
        # so that the first real-time cycle that steps the plant does not overrun.
        x, v, work = self._x.copy(), self._v.copy(), self._work.copy()
        p = self.true_plant
        integrate_chain(x, v, p.C, p.L, p.J, p.F, p.E, self.period, SUBSTEPS, work, self._ws, True)
        _pistons(p.J, p.L, x, np.zeros(self._n))
        # The model feed-forward's kernels, called from a law on the loop's Python path.
        ChainModel(self.chain).warm_up()
        self._warm_up_dac()

    def _step(self) -> None:
        v = self._commands()
        p = self.true_plant
        integrate_chain(
            self._x, v, p.C, p.L, p.J, p.F, p.E, self.period, SUBSTEPS, self._work, self._ws, True
        )
        _pistons(p.J, p.L, self._x, self._piston)
        self._t_plant += self.period  # type: ignore[operator]

    def true_pistons(self) -> np.ndarray:
        """Each joint's first-jack piston position ℓ − ℓc − L/2, m (tests only)."""
        return self._piston.copy()
