"""The model feed-forward's plant for a serial chain (docs/excavator.md): `PlantModel`'s
interface, so that the feed-forward laws (`FeedforwardPid`, `GravityCompPD`) drive a chain's
joints exactly as they drive the planar rigs'.

Rigid bodies: the chain's own recursive Newton–Euler (`controller.plant.chain.rnea`, the minor
links included, thesis §4.3.3), plus each link's viscous friction F_v q̇ as the chain's
simulator adds it. Actuator: each joint's drive seen as one equivalent piston, so that
`PlantModel`'s valve inverse (DESIGN §1.2) applies unchanged:

* jacks: s is the first jack's piston from mid-stroke, ℓ − ℓc − L/2, and r = dℓ/dq its moment
  arm. The chain's chambers give τ = Σ_k ℓ′_k (A⁺_k p⁺ − A⁻_k p⁻) and a cap-side flow
  Σ_k A⁺_k ℓ̇_k (controller/plant/chain/hydraulics.py), so one piston of areas
  A± = Σ_k A±_k ℓ′_k / ℓ′_0 is exact when every jack of the joint has the same ℓ′/ℓ′_0 at
  every angle — the boom's mirrored pair does (ratio 1); a joint whose jacks move unlike is
  refused;
* a motor through a gear N: s = N q (shaft radians), r = N, A⁺ = A⁻ = D (displacement per
  shaft radian), and the chambers keep their dead volume V0 whatever the angle.

Nothing here allocates in `inverse_dynamics`, `gravity_friction` or `cylinder` (scratch is
the model's own), so a law built on it runs in the loop's cycle; the loop runs such a law on
its Python path (`controller.compiled.laws.compile_law` compiles the planar model only).
"""

from __future__ import annotations

from collections.abc import MutableSequence
from typing import Any

import numpy as np

from controller.feedforward import PlantModel
from controller.plant.chain.model import L_FV, L_JACK0, L_NJACK, L_OFF, Chain, Motor
from controller.plant.chain.plant import ChainPlant
from controller.plant.chain.rnea import jack_geometry, rnea

#: Jacks on one joint count as one piston only if their ℓ′_k / ℓ′_0 stays within this of its
#: value at the joint's home over the sampled angles (module doc).
ALIKE_TOL = 1e-9


class ChainModel(PlantModel):
    """`PlantModel` for a `Chain` (module doc). `home` (rad per joint) is where the jacks'
    likeness is checked from; the check spans ±1 rad around it, within the strokes."""

    def __init__(self, chain: Chain, home: Any = None) -> None:
        plant = ChainPlant(chain)
        n = chain.n
        self.n, self.chain = n, chain
        # Writable copies: a pickled model (the service sends the runner to the loop process)
        # comes back writable, and numba compiles one specialisation per flag; `warm_up`
        # loads that one before the loop's first cycle.
        self._C, self._Lk, self._J = (np.array(a) for a in (plant.C, plant.L, plant.J))
        self._ws = plant.ws
        self._zero = np.zeros(n)
        self._tau_buf = np.zeros(n)
        self.g = float(np.linalg.norm(chain.gravity))
        self.ps, self.b, self.r12 = chain.supply_pressure, chain.bulk_modulus, 0.0
        self.Fv = [float(plant.L[i, L_FV]) for i in range(n)]
        self.lin = self.valve_null = self.valve_lap = None
        self.motor = [isinstance(j.drive, Motor) for j in chain.joints]
        self.gear = [
            j.drive.gear_ratio if isinstance(j.drive, Motor) else 1.0 for j in chain.joints
        ]
        home = np.zeros(n) if home is None else np.asarray(home, dtype=float)
        self.Ac, self.Ar, self.V0, self.L, self.lc = [], [], [], [], []
        self.kv, self.umax, self.cf = [], [], []
        for i, joint in enumerate(chain.joints):
            name = joint.link.name
            if joint.drive is None or joint.valve is None:
                raise ValueError(
                    f"joint {name!r} has no drive: the model feed-forward needs a valve and a "
                    "motor or jacks on every joint"
                )
            v = joint.valve
            self.kv.append(float(v.gain))
            self.umax.append(float(v.spool_max))
            self.cf.append([float(x) for x in v.flow_gains])
            self.V0.append(float(v.dead_volume))
            if isinstance(joint.drive, Motor):
                d = float(joint.drive.displacement)
                self.Ac.append(d)
                self.Ar.append(d)
                self.L.append(0.0)
                self.lc.append(0.0)
                continue
            jacks = joint.drive
            ratio = self._jack_ratios(i, float(home[i]), name)
            self.Ac.append(sum(k.area_cap * x for k, x in zip(jacks, ratio, strict=True)))
            self.Ar.append(sum(k.area_rod * x for k, x in zip(jacks, ratio, strict=True)))
            self.L.append(float(jacks[0].stroke))
            self.lc.append(float(jacks[0].closed_length))
        self._steady_constants()

    def _jack_ratios(self, i: int, home: float, name: str) -> list[float]:
        """ℓ′_k / ℓ′_0 of joint i's jacks; raises where they differ across the joint's range."""
        k0, m = int(self._Lk[i, L_JACK0]), int(self._Lk[i, L_NJACK])
        off = self._Lk[i, L_OFF]
        ratios: list[float] | None = None
        for q in home + np.linspace(-1.0, 1.0, 41):
            l1 = [jack_geometry(self._J, k0 + k, q + off)[1] for k in range(m)]
            if abs(l1[0]) < 1e-6:
                continue  # the first jack's triangle is flat: no moment arm to compare with
            now = [x / l1[0] for x in l1]
            if ratios is None:
                ratios = now
            elif max(abs(a - b) for a, b in zip(now, ratios, strict=True)) > ALIKE_TOL:
                raise ValueError(
                    f"joint {name!r}: its {m} jacks move unlike (ℓ′ ratios {ratios} at home, "
                    f"{now} at {q:.3f} rad); the model feed-forward needs them alike"
                )
        return ratios if ratios is not None else [1.0] * m

    def warm_up(self) -> None:
        """Call every jitted kernel the law calls, so that none compiles (or loads from the
        cache) inside a cycle (`ChainSimBackend.warm_up` runs this in the loop process)."""
        q = np.zeros(self.n)
        tau = [0.0] * self.n
        self.inverse_dynamics(q, q, q, tau)
        self.gravity_friction(q, q, tau)
        for j in range(self.n):
            self.cylinder(j, 0.0)

    # ------------------------------------------------------------------ mechanics
    def cylinder(self, j: int, q: float) -> tuple[float, float]:
        """The equivalent piston's displacement s and moment arm r = ds/dq (module doc)."""
        if self.motor[j]:
            return self.gear[j] * q, self.gear[j]
        k = int(self._Lk[j, L_JACK0])
        ell, l1, _, _, _, _, _ = jack_geometry(self._J, k, q + self._Lk[j, L_OFF])
        return ell - (self.lc[j] + 0.5 * self.L[j]), l1

    def inverse_dynamics(self, q: Any, qd: Any, qdd: Any, tau: MutableSequence[float]) -> None:
        """τ = M(q) q̈ + c(q, q̇) + g(q) by Newton–Euler, plus F_v q̇."""
        buf = self._tau_buf
        rnea(self._C, self._Lk, self._J, q, qd, qdd, 1.0, self._ws, buf)
        for j in range(self.n):
            tau[j] = buf[j] + self.Fv[j] * qd[j]

    def gravity_friction(self, q: Any, qd: Any, tau: MutableSequence[float]) -> None:
        """g(q) + F_v q̇ (Lin eq. 37's compensation; the chain has no Coulomb model)."""
        buf, z = self._tau_buf, self._zero
        rnea(self._C, self._Lk, self._J, q, z, z, 1.0, self._ws, buf)
        for j in range(self.n):
            tau[j] = buf[j] + self.Fv[j] * qd[j]

    def chamber_volumes(self, j: int, s: float) -> tuple[float, float]:
        if self.motor[j]:
            return self.V0[j], self.V0[j]
        return super().chamber_volumes(j, s)


def plant_model(params: Any, home: Any = None) -> PlantModel:
    """The feed-forward's model of `params`: a `ChainModel` for a `Chain`, else the planar
    `PlantModel` of a `PlantParams`."""
    if isinstance(params, Chain):
        return ChainModel(params, home)
    return PlantModel(params)


__all__ = ["ALIKE_TOL", "ChainModel", "plant_model"]
