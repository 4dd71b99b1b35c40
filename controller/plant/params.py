"""Physical parameters of the rig (DESIGN.md §1.3) and their identification vectors (§2)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

#: Layout of the flat float64 array the jitted dynamics take (see `PlantParams.pack`).
G_N, G_GRAVITY, G_PS, G_BULK, G_R12, G_RELIEF, G_RELIEF_GAIN = range(7)
N_GLOBAL = 7
(
    J_M,
    J_FV,
    J_W,
    J_ACAP,
    J_AROD,
    J_V0,
    J_L,
    J_A,
    J_B,
    J_LC,
    J_TH0,
    J_CF0,
    J_CF1,
    J_CF2,
    J_CF3,
    J_KV,
    J_TAU,
    J_UMAX,
) = range(18)
N_JOINT = 18


@dataclass(frozen=True)
class PlantParams:
    """Parameters of an n-joint (n = 1 or 2) hydraulic arm; per-joint values are arrays (n,)."""

    n: int
    gravity: float
    supply_pressure: float
    bulk_modulus: float
    coupling: float  # R12
    inertia: np.ndarray  # M_i
    viscous_friction: np.ndarray  # Fv_i
    gravity_moment: np.ndarray  # W_i
    area_cap: np.ndarray
    area_rod: np.ndarray
    dead_volume: np.ndarray
    stroke: np.ndarray
    pin_a: np.ndarray
    pin_b: np.ndarray
    closed_length: np.ndarray
    theta0: np.ndarray  # rad
    flow_gains: np.ndarray  # (n, 4): Cf⁺⁺, Cf⁺⁻, Cf⁻⁺, Cf⁻⁻
    valve_gain: np.ndarray
    valve_tau: np.ndarray
    spool_max: np.ndarray
    #: Relief valve: cracks at this multiple of the supply pressure, flow gain in m³/(s·Pa).
    relief_ratio: float = 1.05
    relief_gain: float = 1.0e-9
    _packed: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.n not in (1, 2):
            raise ValueError("the plant model covers one or two joints")
        object.__setattr__(self, "_packed", self._pack())

    # ------------------------------------------------------------------ packing for numba

    def _pack(self) -> np.ndarray:
        out = np.zeros(N_GLOBAL + N_JOINT * self.n)
        out[G_N] = self.n
        out[G_GRAVITY] = self.gravity
        out[G_PS] = self.supply_pressure
        out[G_BULK] = self.bulk_modulus
        out[G_R12] = self.coupling
        out[G_RELIEF] = self.relief_ratio * self.supply_pressure
        out[G_RELIEF_GAIN] = self.relief_gain
        for i in range(self.n):
            o = N_GLOBAL + N_JOINT * i
            out[o + J_M] = self.inertia[i]
            out[o + J_FV] = self.viscous_friction[i]
            out[o + J_W] = self.gravity_moment[i]
            out[o + J_ACAP] = self.area_cap[i]
            out[o + J_AROD] = self.area_rod[i]
            out[o + J_V0] = self.dead_volume[i]
            out[o + J_L] = self.stroke[i]
            out[o + J_A] = self.pin_a[i]
            out[o + J_B] = self.pin_b[i]
            out[o + J_LC] = self.closed_length[i]
            out[o + J_TH0] = self.theta0[i]
            out[o + J_CF0 : o + J_CF3 + 1] = self.flow_gains[i]
            out[o + J_KV] = self.valve_gain[i]
            out[o + J_TAU] = self.valve_tau[i]
            out[o + J_UMAX] = self.spool_max[i]
        out.setflags(write=False)
        return out

    def pack(self) -> np.ndarray:
        """The flat read-only float64 array the jitted dynamics take."""
        return self._packed

    # ------------------------------------------------------------------ identification vectors

    def mech_names(self) -> list[str]:
        if self.n == 1:
            return ["M1", "Fv1", "W1"]
        return ["M1", "M2", "R12", "Fv1", "Fv2", "W1", "W2"]

    def theta_mech(self) -> np.ndarray:
        """θm of DESIGN.md §2.1 (or [M1, Fv1, W1] for one joint)."""
        if self.n == 1:
            return np.array([self.inertia[0], self.viscous_friction[0], self.gravity_moment[0]])
        return np.array(
            [
                self.inertia[0],
                self.inertia[1],
                self.coupling,
                self.viscous_friction[0],
                self.viscous_friction[1],
                self.gravity_moment[0],
                self.gravity_moment[1],
            ]
        )

    def fluid_names(self) -> list[str]:
        names = ["1/b"]
        for i in range(self.n):
            names += [f"Cf++{i + 1}", f"Cf+-{i + 1}", f"Cf-+{i + 1}", f"Cf--{i + 1}"]
        return names

    def theta_fluid(self) -> np.ndarray:
        """θf of DESIGN.md §2.2: [1/b, Cf⁺⁺₁, Cf⁺⁻₁, Cf⁻⁺₁, Cf⁻⁻₁, Cf⁺⁺₂, …]."""
        return np.concatenate([[1.0 / self.bulk_modulus], self.flow_gains.reshape(-1)])

    def with_identified(
        self, theta_mech: np.ndarray | None = None, theta_fluid: np.ndarray | None = None
    ) -> PlantParams:
        """A copy with the identified parameters substituted (geometry stays as known)."""
        kw: dict[str, object] = {}
        if theta_mech is not None:
            t = np.asarray(theta_mech, dtype=float)
            if self.n == 1:
                kw.update(
                    inertia=t[0:1].copy(),
                    viscous_friction=t[1:2].copy(),
                    gravity_moment=t[2:3].copy(),
                )
            else:
                kw.update(
                    inertia=t[0:2].copy(),
                    coupling=float(t[2]),
                    viscous_friction=t[3:5].copy(),
                    gravity_moment=t[5:7].copy(),
                )
        if theta_fluid is not None:
            t = np.asarray(theta_fluid, dtype=float)
            kw.update(bulk_modulus=float(1.0 / t[0]), flow_gains=t[1:].reshape(self.n, 4).copy())
        return replace(self, **kw)  # type: ignore[arg-type]
