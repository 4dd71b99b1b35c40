"""Physical parameters of the rig (DESIGN.md §1.3) and their identification vectors (§2)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from controller.plant.oil import OilLaw, walther_viscosity

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
    #: Lin's friction (seed 001 eq. 20; estimator/models_lin.py), (n, 4) per joint: Fv⁺, Fv⁻
    #: (joint viscous, N·m·s/rad) and Fc⁺, Fc⁻ (piston Coulomb forces, N), ± by the sign of the
    #: piston velocity. Set only from a parameter file of that model family
    #: (controller.paramfile); None: the reference model's symmetric viscous `viscous_friction`.
    #: Not in `pack()`: the simulator's friction is its own (PlantEffects), never this.
    friction_lin: np.ndarray | None = None
    #: The oil's temperature laws from its datasheet (`[plant.oil]`): the real-rig model family
    #: refers viscous friction, leakage and the bulk modulus to `oil.reference_c` with them.
    #: None: parameters are the ones at whatever temperature the oil had. Not in `pack()`.
    oil: OilLaw | None = None
    #: The valve's null offset b₀ and lap d per joint, (n, 2), spool units, as the batch's
    #: structure search chose them (`[structure]` of its parameter file; controller.compensation
    #: inverts them). Set only from a parameter file; None: not identified. Not in `pack()`: the
    #: simulator's valve is its own (`valve` of its joints), never this.
    valve_structure: np.ndarray | None = None
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


# ============================================================================= beyond the model
#
# Effects a real rig has and the identification model (DESIGN §1–2) does not: the simulator's
# true plant can switch each on (docs/simulator.md gives every equation). They live in a second
# flat array, `PlantEffects.pack`, so `PlantParams` and its 16-parameter identification vector
# stay exactly what the estimator knows. E[E_ON] = 0 means "nominal plant": the dynamics then
# take the very code path of the identification model.

(
    E_ON,
    E_THERMAL,
    E_AIR,
    E_POLY,
    E_T_REF,
    E_T_AMB,
    E_TAU_COOL,
    E_HEAT_CAP,
    E_BULK_PER_K,
    E_WALTHER_A,
    E_WALTHER_B,
    E_NU_REF,
) = range(12)
NE_GLOBAL = 12
(
    K_FC_POS,
    K_FC_NEG,
    K_FS_POS,
    K_FS_NEG,
    K_VS,
    K_VEPS,
    K_FV_POS,
    K_FV_NEG,
    K_LEAK_INT,
    K_LEAK_EXT,
    K_BIAS,
    K_BIAS_PER_K,
    K_LAP,
    K_LEAK_OPEN,
    K_V0_CAP,
    K_V0_ROD,
) = range(16)
NE_JOINT = 16
#: Atmospheric pressure (Pa) of the entrained-air law: pressures in the plant are gauge.
P_ATM = 101_325.0
#: Oil temperature (°C) of the nominal plant, which has no thermal state.
NOMINAL_OIL_C = 40.0


@dataclass(frozen=True)
class JointEffects:
    """One joint's effects beyond the model; the defaults are the nominal plant (all off).

    Forces act on the piston (N, m/s); spool quantities are in LVDT volts like u."""

    coulomb_pos: float = 0.0  # F_C⁺ (ṡ > 0), N
    coulomb_neg: float = 0.0  # F_C⁻ (ṡ < 0), N
    stiction_pos: float = 0.0  # F_S⁺ ≥ F_C⁺, N (0: no Stribeck bump)
    stiction_neg: float = 0.0
    stribeck_velocity: float = 0.01  # v_s, m/s
    smoothing_velocity: float = 1.0e-3  # v_ε of the tanh zero crossing, m/s
    viscous_pos: float = 0.0  # extra piston viscous friction f_v⁺, N·s/m
    viscous_neg: float = 0.0
    leak_internal: float = 0.0  # C_int, m³/(s·Pa) at the reference temperature
    leak_external: float = 0.0  # C_ext, m³/(s·Pa), each chamber to drain
    null_bias: float = 0.0  # b, V: metering edges see u + b
    null_shift_per_k: float = 0.0  # db/dT, V/K
    lap: float = 0.0  # spool overlap (> 0, dead band) or underlap (< 0), V
    null_leak_opening: float = 0.0  # equivalent opening of every edge at null, V
    dead_volume_cap: float | None = None  # true V0⁺, m³ (None: the nominal dead volume)
    dead_volume_rod: float | None = None

    def dead_volumes(self, nominal: float) -> tuple[float, float]:
        """The true (V0⁺, V0⁻), m³: each as given, else the joint's nominal dead volume."""
        cap = nominal if self.dead_volume_cap is None else self.dead_volume_cap
        rod = nominal if self.dead_volume_rod is None else self.dead_volume_rod
        return cap, rod


@dataclass(frozen=True)
class PlantEffects:
    """The simulator's effects beyond the identification model (docs/simulator.md)."""

    joints: tuple[JointEffects, ...]
    air_content: float = 0.0  # α, gas/liquid volume at atmospheric pressure
    polytropic_index: float = 1.4  # n of the gas
    thermal: bool = False
    reference_c: float = NOMINAL_OIL_C  # where bulk modulus, viscosity and leakage are given
    initial_c: float = NOMINAL_OIL_C
    ambient_c: float = 20.0
    cooling_tau_s: float = 1800.0
    heat_capacity: float = 3.0e4  # J/K of the oil that the losses heat
    bulk_per_k: float = 0.0058  # liquid bulk modulus ∝ exp(−k (T − T_ref)), 1/K (Tait)
    walther_a: float = 9.32  # ISO VG46 (OpenHydraulics GenericOil)
    walther_b: float = 3.65
    # Forced temperature ramp (K/s over [start, end) s of plant time): applied by the simulator
    # between steps, not part of the dynamics' arithmetic (`pack` leaves it out).
    ramp_c_per_s: float = 0.0
    ramp_start_s: float = 0.0
    ramp_end_s: float = 0.0

    @property
    def active(self) -> bool:
        nominal = PlantEffects(tuple(JointEffects() for _ in self.joints))
        return self != nominal

    def pack(self, params: PlantParams) -> np.ndarray:
        """The flat read-only array the jitted dynamics take beside `params.pack()`."""
        if len(self.joints) != params.n:
            raise ValueError(f"effects for {len(self.joints)} joints, plant has {params.n}")
        out = np.zeros(NE_GLOBAL + NE_JOINT * params.n)
        out[E_ON] = 1.0 if self.active else 0.0
        out[E_THERMAL] = 1.0 if self.thermal else 0.0
        out[E_AIR] = self.air_content
        out[E_POLY] = self.polytropic_index
        out[E_T_REF] = self.reference_c
        out[E_T_AMB] = self.ambient_c
        out[E_TAU_COOL] = self.cooling_tau_s
        out[E_HEAT_CAP] = self.heat_capacity
        out[E_BULK_PER_K] = self.bulk_per_k
        out[E_WALTHER_A] = self.walther_a
        out[E_WALTHER_B] = self.walther_b
        out[E_NU_REF] = walther_viscosity(self.reference_c, self.walther_a, self.walther_b)
        for i, j in enumerate(self.joints):
            o = NE_GLOBAL + NE_JOINT * i
            out[o + K_FC_POS] = j.coulomb_pos
            out[o + K_FC_NEG] = j.coulomb_neg
            # No Stribeck bump when stiction is not given: F_S = F_C.
            out[o + K_FS_POS] = max(j.stiction_pos, j.coulomb_pos)
            out[o + K_FS_NEG] = max(j.stiction_neg, j.coulomb_neg)
            out[o + K_VS] = j.stribeck_velocity
            out[o + K_VEPS] = j.smoothing_velocity
            out[o + K_FV_POS] = j.viscous_pos
            out[o + K_FV_NEG] = j.viscous_neg
            out[o + K_LEAK_INT] = j.leak_internal
            out[o + K_LEAK_EXT] = j.leak_external
            out[o + K_BIAS] = j.null_bias
            out[o + K_BIAS_PER_K] = j.null_shift_per_k
            out[o + K_LAP] = j.lap
            out[o + K_LEAK_OPEN] = j.null_leak_opening
            out[o + K_V0_CAP], out[o + K_V0_ROD] = j.dead_volumes(float(params.dead_volume[i]))
        out.setflags(write=False)
        return out

    @classmethod
    def nominal(cls, n: int) -> PlantEffects:
        return cls(tuple(JointEffects() for _ in range(n)))
