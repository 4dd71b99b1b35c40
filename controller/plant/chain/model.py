"""The description of a chain (dataclasses) and its packing into the flat arrays the jitted
dynamics take.

Frames (thesis §3.4, eq. 3.8): frame i−1 → frame i is
A_i = Trans(z, d_i) Rot(z, θ_i) Trans(x, a_i) Rot(x, α_i) Rot(y, β_i), θ_i = q_i + θoff_i.
Joint i turns about z of frame i−1. Each link's own quantities (centre of mass, inertia, the
jack pins on it) are given in its *joint frame* F_i = frame_{i−1}·Rot(z, θ_i): origin on the
joint axis at frame i−1's origin, z along the axis, x at θoff from frame i−1's x at q = 0.
F_i moves with link i, so the dynamics propagate F_{i−1} → F_i through the constant
C_{i−1} = Trans(z, d) Trans(x, a) Rot(x, α) Rot(y, β) of the previous link, then Rot(z, θ_i).
The base is frame 0 (C of link 0 is the identity).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from controller.plant.params import (
    G_BULK,
    G_GRAVITY,
    G_N,
    G_PS,
    G_RELIEF,
    G_RELIEF_GAIN,
    J_ACAP,
    J_AROD,
    J_CF0,
    J_CF3,
    J_FV,
    J_KV,
    J_L,
    J_LC,
    J_TAU,
    J_UMAX,
    J_V0,
    N_GLOBAL,
    N_JOINT,
)

# ----------------------------------------------------------------------------- packed layout
#: Per joint row of the link array L.
L_R = 0  # 9 entries: rotation of C_{i-1} (row-major), F_{i-1} ← G_i
L_P = 9  # 3 entries: origin of G_i (= of F_i) in F_{i-1}
L_OFF = 12  # θoff
L_MASS = 13
L_COM = 14  # 3 entries, in F_i
L_INERTIA = 17  # 6 entries about the centre of mass, F_i axes: xx, yy, zz, xy, xz, yz
L_FV = 23  # joint viscous friction, N·m·s/rad
L_ARMATURE = 24  # reflected rotor inertia, kg·m²
L_DRIVE = 25  # DRIVE_NONE / DRIVE_JACKS / DRIVE_MOTOR
L_GEAR = 26  # motor: joint torque per motor torque (reduction ratio)
L_JACK0 = 27  # index of the joint's first jack in J
L_NJACK = 28  # number of jacks on the joint
L_STRIDE = 29
DRIVE_NONE, DRIVE_JACKS, DRIVE_MOTOR = 0, 1, 2

#: Per jack row of the jack array J (pins: A on the parent link in G_i = frame i−1, B on the
#: child link in F_i; both in one plane across the joint axis, A_z = B_z).
K_A = 0  # 3 entries
K_B = 3  # 3 entries
K_CLOSED = 6  # pin-to-pin length fully retracted, m
K_STROKE = 7
K_ACAP = 8
K_AROD = 9
K_CYL = 10  # cylinder: mass, centre distance from A along the jack, I_axial, I_transverse
K_PIS = 14  # piston (with rod): mass, centre distance from B toward A, I_axial, I_transverse
K_STRIDE = 18
#: Offsets inside a minor body's four entries.
B_MASS, B_DIST, B_IAX, B_ITR = 0, 1, 2, 3

#: The global array: number of joints, gravity vector in frame 0 (m/s², pointing down).
C_N, C_G = 0, 1
C_STRIDE = 4


def _rot_z(t: float) -> np.ndarray:
    c, s = math.cos(t), math.sin(t)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _rot_x(t: float) -> np.ndarray:
    c, s = math.cos(t), math.sin(t)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def _rot_y(t: float) -> np.ndarray:
    c, s = math.cos(t), math.sin(t)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


@dataclass(frozen=True)
class DH:
    """Modified D-H parameters of one link (thesis eq. 3.8); angles in radians."""

    theta_offset: float = 0.0
    d: float = 0.0
    a: float = 0.0
    alpha: float = 0.0
    beta: float = 0.0

    def constant(self) -> tuple[np.ndarray, np.ndarray]:
        """(R, p) of C = Trans(z, d) Trans(x, a) Rot(x, α) Rot(y, β): frame i in F_i."""
        return _rot_x(self.alpha) @ _rot_y(self.beta), np.array([self.a, 0.0, self.d])


@dataclass(frozen=True)
class Body:
    """A jack's cylinder or piston: axisymmetric about the jack's centre line, pinned at one end.

    `distance` is the centre of mass from the body's own pin along the jack (toward the other
    pin); inertias are about the centre of mass."""

    mass: float = 0.0
    distance: float = 0.0
    inertia_axial: float = 0.0
    inertia_transverse: float = 0.0

    def __post_init__(self) -> None:
        for name in ("mass", "inertia_axial", "inertia_transverse"):
            if getattr(self, name) < 0.0:
                raise ValueError(f"{name} = {getattr(self, name)} must be ≥ 0")


@dataclass(frozen=True)
class Jack:
    """A linear jack driving joint i: cylinder pinned at `pin_parent` on link i−1, given in
    frame i−1 (the D-H frame whose z is joint i's axis; frame 0 for joint 1), piston rod at
    `pin_child` on link i, given in F_i. Both pins lie in one plane across the joint axis
    (equal z): the thesis's triangle DA, DC of §2.4 is |A_xy|, |B_xy|."""

    pin_parent: tuple[float, float, float]
    pin_child: tuple[float, float, float]
    closed_length: float
    stroke: float
    area_cap: float
    area_rod: float
    cylinder: Body = Body()
    piston: Body = Body()

    def __post_init__(self) -> None:
        if not (self.closed_length > 0.0 and self.stroke > 0.0):
            raise ValueError(
                f"closed_length ({self.closed_length}) and stroke ({self.stroke}) must be > 0 m"
            )
        if not (self.area_cap > 0.0 and 0.0 < self.area_rod <= self.area_cap):
            raise ValueError(
                f"areas must satisfy 0 < area_rod ({self.area_rod}) ≤ area_cap ({self.area_cap})"
            )


@dataclass(frozen=True)
class Motor:
    """A rotary motor through a reduction gear: joint torque = gear · D · (p⁺ − p⁻)."""

    displacement: float  # D, m³/rad of the motor shaft
    gear_ratio: float  # motor turns per joint turn

    def __post_init__(self) -> None:
        if not (self.displacement > 0.0 and self.gear_ratio > 0.0):
            raise ValueError(
                f"displacement ({self.displacement}) and gear_ratio ({self.gear_ratio}) must be > 0"
            )


@dataclass(frozen=True)
class Valve:
    """The joint's servo valve and its chambers' dead volume (as in `PlantParams`)."""

    flow_gains: tuple[float, float, float, float]  # Cf⁺⁺, Cf⁺⁻, Cf⁻⁺, Cf⁻⁻
    gain: float  # k_v, LVDT volts per command volt (< 0: the coil wired inverted)
    tau: float  # s
    spool_max: float  # LVDT volts
    dead_volume: float  # m³ per chamber (hoses, ports)


@dataclass(frozen=True)
class Link:
    """One revolute joint and the major link it moves."""

    name: str
    dh: DH
    mass: float
    com: tuple[float, float, float]  # in F_i
    inertia: tuple[float, float, float, float, float, float]  # xx yy zz xy xz yz about the com
    viscous_friction: float = 0.0
    armature: float = 0.0


@dataclass(frozen=True)
class Joint:
    link: Link
    drive: Motor | tuple[Jack, ...] | None
    valve: Valve | None = None
    resolver: bool = True


@dataclass(frozen=True)
class Chain:
    """A serial chain of revolute joints; gravity is a vector in frame 0 (m/s²)."""

    joints: tuple[Joint, ...]
    gravity: tuple[float, float, float] = (0.0, 0.0, -9.81)
    supply_pressure: float = 20.0e6
    bulk_modulus: float = 1.0e9
    relief_ratio: float = 1.05
    relief_gain: float = 1.0e-9

    def __post_init__(self) -> None:
        if not self.joints:
            raise ValueError("a chain needs at least one joint")
        for j in self.joints:
            if isinstance(j.drive, tuple):
                for jack in j.drive:
                    if abs(jack.pin_parent[2] - jack.pin_child[2]) > 1e-9:
                        raise ValueError(
                            f"joint {j.link.name!r}: a jack's pins must lie in one plane across "
                            f"the joint axis (axial coordinates {jack.pin_parent[2]:.6g} and "
                            f"{jack.pin_child[2]:.6g} m differ)"
                        )
            if j.drive is not None and j.valve is None:
                raise ValueError(f"joint {j.link.name!r} has a drive but no valve")

    @property
    def n(self) -> int:
        return len(self.joints)

    @property
    def names(self) -> list[str]:
        return [j.link.name for j in self.joints]

    def _c_prev(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """C_{i−1} (F_{i−1} ← G_i); identity for joint 1 (the base frame)."""
        if i == 0:
            return np.eye(3), np.zeros(3)
        return self.joints[i - 1].link.dh.constant()

    def jacks(self) -> list[tuple[int, Jack]]:
        """(joint index, jack) of every jack, in joint order."""
        out: list[tuple[int, Jack]] = []
        for i, j in enumerate(self.joints):
            if isinstance(j.drive, tuple):
                out += [(i, jack) for jack in j.drive]
        return out

    def without_minor_links(self) -> Chain:
        """The thesis's *reduced* model (§4.4.1): the same chain with massless jacks."""
        joints = []
        for j in self.joints:
            drive = j.drive
            if isinstance(drive, tuple):
                drive = tuple(replace(k, cylinder=Body(), piston=Body()) for k in drive)
            joints.append(replace(j, drive=drive))
        return replace(self, joints=tuple(joints))

    # ------------------------------------------------------------------ packing for numba

    def pack(self) -> ChainArrays:
        n = self.n
        glob = np.zeros(C_STRIDE)
        glob[C_N] = n
        glob[C_G : C_G + 3] = self.gravity
        links = np.zeros((n, L_STRIDE))
        jacks = self.jacks()
        jack_rows = np.zeros((max(len(jacks), 1), K_STRIDE))
        k = 0
        for i, j in enumerate(self.joints):
            r, p = self._c_prev(i)
            row = links[i]
            row[L_R : L_R + 9] = r.reshape(-1)
            row[L_P : L_P + 3] = p
            row[L_OFF] = j.link.dh.theta_offset
            row[L_MASS] = j.link.mass
            row[L_COM : L_COM + 3] = j.link.com
            row[L_INERTIA : L_INERTIA + 6] = j.link.inertia
            row[L_FV] = j.link.viscous_friction
            row[L_ARMATURE] = j.link.armature
            row[L_JACK0] = k
            if isinstance(j.drive, Motor):
                row[L_DRIVE] = DRIVE_MOTOR
                row[L_GEAR] = j.drive.gear_ratio
            elif isinstance(j.drive, tuple):
                row[L_DRIVE] = DRIVE_JACKS
                row[L_NJACK] = len(j.drive)
                for jack in j.drive:
                    jr = jack_rows[k]
                    jr[K_A : K_A + 3] = jack.pin_parent
                    jr[K_B : K_B + 3] = jack.pin_child
                    jr[K_CLOSED] = jack.closed_length
                    jr[K_STROKE] = jack.stroke
                    jr[K_ACAP] = jack.area_cap
                    jr[K_AROD] = jack.area_rod
                    for off, body in ((K_CYL, jack.cylinder), (K_PIS, jack.piston)):
                        jr[off + B_MASS] = body.mass
                        jr[off + B_DIST] = body.distance
                        jr[off + B_IAX] = body.inertia_axial
                        jr[off + B_ITR] = body.inertia_transverse
                    k += 1
        fluid = self._pack_fluid()
        for a in (glob, links, jack_rows, fluid):
            a.setflags(write=False)
        return ChainArrays(glob, links, jack_rows, fluid)

    def _pack_fluid(self) -> np.ndarray:
        """The fluid side in `PlantParams.pack`'s layout (one block per joint), so the
        plant's own orifice, relief and leakage kernels take it unchanged."""
        out = np.zeros(N_GLOBAL + N_JOINT * self.n)
        out[G_N] = self.n
        out[G_GRAVITY] = float(np.linalg.norm(self.gravity))
        out[G_PS] = self.supply_pressure
        out[G_BULK] = self.bulk_modulus
        out[G_RELIEF] = self.relief_ratio * self.supply_pressure
        out[G_RELIEF_GAIN] = self.relief_gain
        for i, j in enumerate(self.joints):
            o = N_GLOBAL + N_JOINT * i
            out[o + J_FV] = j.link.viscous_friction
            if isinstance(j.drive, Motor):
                out[o + J_ACAP] = out[o + J_AROD] = j.drive.displacement
            elif isinstance(j.drive, tuple):
                out[o + J_ACAP] = sum(k.area_cap for k in j.drive)
                out[o + J_AROD] = sum(k.area_rod for k in j.drive)
                out[o + J_L] = j.drive[0].stroke
                out[o + J_LC] = j.drive[0].closed_length
            if j.valve is not None:
                out[o + J_V0] = j.valve.dead_volume
                out[o + J_CF0 : o + J_CF3 + 1] = j.valve.flow_gains
                out[o + J_KV] = j.valve.gain
                out[o + J_TAU] = j.valve.tau
                out[o + J_UMAX] = j.valve.spool_max
            else:
                # An undriven joint: a closed, massless valve (its chambers never see flow).
                out[o + J_V0] = 1.0
                out[o + J_TAU] = 1.0
        return out


@dataclass(frozen=True)
class ChainArrays:
    """The packed chain: global (C_*), links (n, L_STRIDE), jacks (m, K_STRIDE), fluid
    (`PlantParams.pack` layout)."""

    glob: np.ndarray
    links: np.ndarray
    jacks: np.ndarray
    fluid: np.ndarray
