"""The chain's inverse dynamics written linear in the parameters: τ_measured = Y(q, q̇, q̈) π.

Every rigid body (each major link, and each jack's cylinder and piston: the thesis's minor
links, §4.3.3) has the ten barycentric parameters of Khalil–Kleinfinger / Atkeson–An–Hollerbach
in a frame of its own:

    π_b = [m, m c_x, m c_y, m c_z, I_xx, I_yy, I_zz, I_xy, I_xz, I_yz]

with the inertia about the frame's *origin* (not the centre of mass), so the body's Newton–Euler
wrench at that origin is linear in π_b:

    f = m a + ω̇ × mc + ω × (ω × mc),      n = I ω̇ + ω × I ω + mc × a       (thesis eq. 4.20).

Frames: a major link's is its joint frame F_i (`controller.plant.chain.model`); a cylinder's has
its origin at its pin A on the parent link, a piston's at its rod pin B on the child link, both
with x along the jack (pin A → pin B) and z along the joint's axis, turning with the jack's
angle ψ(q_i) about that axis. Gravity enters as the base accelerating upward.

A body's wrench reaches joint j by the virtual power of q̇_j (Jourdain): for joints upstream of
the body it moves rigidly, so τ_j gets z_j · (n + (o_b − p_j) × f); for a minor body's own joint
i it moves with ∂o_b/∂q_i (0 for the cylinder's pin A, z_i × (B − p_i) for the piston's pin B)
and turns with ψ′, so τ_i gets ψ′ z_i · n + ∂o_b/∂q_i · f. The closed triangle is thus solved
kinematically, as in the plant, but the regressor shares no code with `rnea`: it is an
independent statement of the same physics (tests/estimator/test_chain_regressor.py checks the
two agree to 1e-9).

Besides the bodies, per joint: the reflected rotor (armature) inertia, the joint's viscous
friction (and optionally Coulomb), a viscous friction per actuator (per jack in piston
velocity ℓ′q̇, for a motor at its shaft N q̇), and the two chambers' pressure-transducer
offsets. The output is the actuator torque from the *measured* pressures,
τ_m = T⁺ p⁺_m − T⁻ p⁻_m (T⁺ = Σ A⁺ℓ′ for jacks, N D for a motor): a transducer reading
p_m = p + o puts T⁺ o⁺ − T⁻ o⁻ into τ_m, so offsets are parameters with those columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from controller.plant.chain.model import Chain, Jack, Motor

#: The ten barycentric parameters of a body, in this order.
BODY_PARAMS = ("m", "mx", "my", "mz", "Ixx", "Iyy", "Izz", "Ixy", "Ixz", "Iyz")
#: What the per-joint extra parameters mean (suffixes after "<joint>.").
EXTRA_MEANING = {
    "Ia": "armature (reflected rotor) inertia, kg·m²",
    "fv": "joint viscous friction, N·m·s/rad",
    "fc": "joint Coulomb friction, N·m",
    "fva": "actuator viscous friction (per jack in piston velocity, N·s/m; motor at the shaft)",
    "o_cap": "pressure offset of the + (cap) chamber's transducer, Pa",
    "o_rod": "pressure offset of the − (rod) chamber's transducer, Pa",
}


@dataclass(frozen=True)
class BodyRef:
    """One rigid body of the regressor: a major link (`jack` None) or a jack's minor link."""

    name: str
    joint: int
    jack: int | None = None  # index into Chain.jacks()
    piston: bool = False

    @property
    def minor(self) -> bool:
        return self.jack is not None


def _skew(v: np.ndarray) -> np.ndarray:
    """(N, 3) → (N, 3, 3) cross-product matrices."""
    z = np.zeros(v.shape[0])
    return np.stack(
        [
            np.stack([z, -v[:, 2], v[:, 1]], -1),
            np.stack([v[:, 2], z, -v[:, 0]], -1),
            np.stack([-v[:, 1], v[:, 0], z], -1),
        ],
        axis=1,
    )


def _inertia_map(v: np.ndarray) -> np.ndarray:
    """(N, 3) → (N, 3, 6): I v as a linear map of [Ixx, Iyy, Izz, Ixy, Ixz, Iyz]."""
    z = np.zeros(v.shape[0])
    x, y, w = v[:, 0], v[:, 1], v[:, 2]
    return np.stack(
        [
            np.stack([x, z, z, y, w, z], -1),
            np.stack([z, y, z, x, z, w], -1),
            np.stack([z, z, w, z, x, y], -1),
        ],
        axis=1,
    )


def _rot_z(t: np.ndarray) -> np.ndarray:
    c, s = np.cos(t), np.sin(t)
    z, o = np.zeros_like(t), np.ones_like(t)
    return np.stack(
        [np.stack([c, -s, z], -1), np.stack([s, c, z], -1), np.stack([z, z, o], -1)], axis=1
    )


def _mv(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.einsum("nij,nj->ni", m, v)


def _mtv(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.einsum("nji,nj->ni", m, v)


def wrench_regressor(w: np.ndarray, dw: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Kf, Kn), each (N, 3, 10): force and moment at the body frame's origin, linear in π_b,
    from its angular velocity, angular acceleration and origin acceleration (body frame)."""
    N = w.shape[0]
    Sw, Sdw, Sa = _skew(w), _skew(dw), _skew(a)
    kf = np.zeros((N, 3, 10))
    kf[:, :, 0] = a
    kf[:, :, 1:4] = Sdw + Sw @ Sw
    kn = np.zeros((N, 3, 10))
    kn[:, :, 1:4] = -Sa
    kn[:, :, 4:10] = _inertia_map(dw) + Sw @ _inertia_map(w)
    return kf, kn


def body_parameters(mass: float, com: Sequence[float], inertia_c: Sequence[float]) -> np.ndarray:
    """π_b of a body given its mass, centre of mass and inertia about it (xx yy zz xy xz yz):
    the parallel-axis shift I_O = I_c + m (|c|² 1 − c cᵀ)."""
    c = np.asarray(com, dtype=float)
    ixx, iyy, izz, ixy, ixz, iyz = inertia_c
    ic = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]], dtype=float)
    io = ic + mass * (float(c @ c) * np.eye(3) - np.outer(c, c))
    return np.array([mass, *(mass * c), io[0, 0], io[1, 1], io[2, 2], io[0, 1], io[0, 2], io[1, 2]])


class ChainRegressor:
    """Y(q, q̇, q̈) of a chain: `matrix` gives (N, n, p), `parameters` the true π of a chain."""

    def __init__(
        self, chain: Chain, *, minor: bool = True, coulomb: bool = False, offsets: bool = True
    ) -> None:
        self.chain = chain
        self.n = chain.n
        self.minor = minor
        self.coulomb = coulomb
        self.offsets = offsets
        self._jacks: list[tuple[int, Jack]] = chain.jacks()
        self._consts = [chain._c_prev(i) for i in range(self.n)]
        self.bodies: list[BodyRef] = []
        for i, j in enumerate(chain.joints):
            self.bodies.append(BodyRef(j.link.name, i))
        if minor:
            count: dict[int, int] = {}
            for k, (i, _) in enumerate(self._jacks):
                c = count.get(i, 0)
                count[i] = c + 1
                base = f"{chain.names[i]}.jack{c}"
                self.bodies.append(BodyRef(f"{base}.cyl", i, k, False))
                self.bodies.append(BodyRef(f"{base}.pis", i, k, True))
        names = [f"{b.name}.{p}" for b in self.bodies for p in BODY_PARAMS]
        self._extra: list[tuple[str, int, int | None]] = []  # (kind, joint, jack)
        for i, j in enumerate(chain.joints):
            nm = chain.names[i]
            kinds = ["Ia", "fv"] + (["fc"] if coulomb else [])
            for kd in kinds:
                self._extra.append((kd, i, None))
                names.append(f"{nm}.{kd}")
            if isinstance(j.drive, Motor):
                self._extra.append(("fva", i, None))
                names.append(f"{nm}.motor.fva")
            elif isinstance(j.drive, tuple):
                c = 0
                for k, (ii, _) in enumerate(self._jacks):
                    if ii == i:
                        self._extra.append(("fva", i, k))
                        names.append(f"{nm}.jack{c}.fva")
                        c += 1
            if offsets and j.drive is not None:
                for kd in ("o_cap", "o_rod"):
                    self._extra.append((kd, i, None))
                    names.append(f"{nm}.{kd}")
        self.names: list[str] = names
        self.p = len(names)

    @property
    def n_body(self) -> int:
        """The bodies' barycentric parameters: the first `n_body` of `names` (the joints'
        friction, armatures and transducer offsets follow)."""
        return len(self.bodies) * len(BODY_PARAMS)

    # ------------------------------------------------------------------ true parameters

    def parameters(
        self,
        chain: Chain | None = None,
        *,
        offsets: Sequence[tuple[float, float]] | None = None,
        actuator_viscous: Sequence[float] | None = None,
        coulomb: Sequence[float] | None = None,
    ) -> np.ndarray:
        """π of `chain` (default: the regressor's) in `names` order. The chain's model has no
        actuator viscous friction, Coulomb friction or transducer offsets: those are 0 unless
        given (per jack in `Chain.jacks()` order with a motor's after, per joint, per joint)."""
        ch = self.chain if chain is None else chain
        out: list[float] = []
        jacks = ch.jacks()
        for b in self.bodies:
            if b.jack is None:
                lk = ch.joints[b.joint].link
                out += list(body_parameters(lk.mass, lk.com, lk.inertia))
            else:
                jk = jacks[b.jack][1]
                body = jk.piston if b.piston else jk.cylinder
                # Axisymmetric about the jack (x): centre on x, at +distance from A for the
                # cylinder, at −distance from B for the piston.
                cx = -body.distance if b.piston else body.distance
                out += list(
                    body_parameters(
                        body.mass,
                        (cx, 0.0, 0.0),
                        (body.inertia_axial, body.inertia_transverse, body.inertia_transverse,
                         0.0, 0.0, 0.0),
                    )
                )  # fmt: skip
        act = list(actuator_viscous) if actuator_viscous is not None else None
        a_k = 0
        for kd, i, _k in self._extra:
            j = ch.joints[i]
            if kd == "Ia":
                out.append(j.link.armature)
            elif kd == "fv":
                out.append(j.link.viscous_friction)
            elif kd == "fc":
                out.append(0.0 if coulomb is None else float(coulomb[i]))
            elif kd == "fva":
                out.append(0.0 if act is None else float(act[a_k]))
                a_k += 1
            elif kd == "o_cap":
                out.append(0.0 if offsets is None else float(offsets[i][0]))
            elif kd == "o_rod":
                out.append(0.0 if offsets is None else float(offsets[i][1]))
        return np.asarray(out)

    # ------------------------------------------------------------------ actuator side

    def torque_per_pressure(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(T⁺, T⁻), each (N, n): τ = T⁺ p⁺ − T⁻ p⁻ at q (zero for an undriven joint)."""
        q = np.atleast_2d(q)
        tc = np.zeros_like(q)
        tr = np.zeros_like(q)
        for i, j in enumerate(self.chain.joints):
            if isinstance(j.drive, Motor):
                tc[:, i] = tr[:, i] = j.drive.gear_ratio * j.drive.displacement
        for k, (i, jack) in enumerate(self._jacks):
            l1 = self._jack_kinematics(k, q[:, i])["l1"]
            tc[:, i] += jack.area_cap * l1
            tr[:, i] += jack.area_rod * l1
        return tc, tr

    def measured_torque(self, q: np.ndarray, p_cap: np.ndarray, p_rod: np.ndarray) -> np.ndarray:
        """τ_m (N, n) from the measured chamber pressures (thesis eq. 4.33, 4.61)."""
        tc, tr = self.torque_per_pressure(q)
        return tc * np.atleast_2d(p_cap) - tr * np.atleast_2d(p_rod)

    # ------------------------------------------------------------------ kinematics

    def _jack_kinematics(self, k: int, q: np.ndarray) -> dict[str, np.ndarray]:
        """Pins, length, ψ and their derivatives in the joint angle, in G_i (frame i−1)."""
        i, jack = self._jacks[k]
        th = q + self.chain.joints[i].link.dh.theta_offset
        c, s = np.cos(th), np.sin(th)
        b0 = np.asarray(jack.pin_child, dtype=float)
        a = np.asarray(jack.pin_parent, dtype=float)
        bx = b0[0] * c - b0[1] * s
        by = b0[0] * s + b0[1] * c
        dx, dy = bx - a[0], by - a[1]
        d1x, d1y = -by, bx  # B′ = ẑ × B
        d2x, d2y = -bx, -by  # B″
        ell = np.hypot(dx, dy)
        l1 = (dx * d1x + dy * d1y) / ell
        k1 = dx * d1y - dy * d1x
        k2 = dx * d2y - dy * d2x  # (d′ × d′ = 0)
        psi1 = k1 / ell**2
        psi2 = k2 / ell**2 - 2.0 * psi1 * l1 / ell
        return {
            "B": np.stack([bx, by, np.full_like(bx, b0[2])], -1),
            "B1": np.stack([d1x, d1y, np.zeros_like(bx)], -1),
            "B2": np.stack([d2x, d2y, np.zeros_like(bx)], -1),
            "A": np.broadcast_to(a, (q.shape[0], 3)),
            "psi": np.arctan2(dy, dx),
            "psi1": psi1,
            "psi2": psi2,
            "l1": l1,
        }

    def matrix(
        self, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray, gravity: float = 1.0
    ) -> np.ndarray:
        """Y (N, n, p) at the states (each (N, n)); `gravity` scales the chain's g."""
        q, qd, qdd = (np.atleast_2d(np.asarray(x, dtype=float)) for x in (q, qd, qdd))
        N, n = q.shape
        if n != self.n or qd.shape != q.shape or qdd.shape != q.shape:
            raise ValueError(f"q, q̇, q̈ must each be (N, {self.n}), got {q.shape}, {qd.shape}, "
                             f"{qdd.shape}")  # fmt: skip
        Y = np.zeros((N, n, self.p))
        g = np.asarray(self.chain.gravity, dtype=float)
        # World (frame 0) kinematics of every joint frame F_i: rotation, origin, axis, ω, ω̇,
        # and the origin's acceleration (base accelerating up: a₀ = −g).
        R = np.broadcast_to(np.eye(3), (N, 3, 3)).copy()
        p = np.zeros((N, 3))
        w = np.zeros((N, 3))
        dw = np.zeros((N, 3))
        acc = np.broadcast_to(-gravity * g, (N, 3)).copy()
        frames = []
        for i in range(n):
            rc, pc = self._consts[i]
            r_off = _mv(R, np.broadcast_to(pc, (N, 3)))
            acc = acc + np.cross(dw, r_off) + np.cross(w, np.cross(w, r_off))
            p = p + r_off
            RG = R @ rc
            z = RG[:, :, 2]
            parent = {"R": RG, "p": p, "w": w, "dw": dw, "a": acc, "z": z}
            th = q[:, i] + self.chain.joints[i].link.dh.theta_offset
            R = RG @ _rot_z(th)
            dw = dw + np.cross(w, z * qd[:, i : i + 1]) + z * qdd[:, i : i + 1]
            w = w + z * qd[:, i : i + 1]
            frames.append({"parent": parent, "R": R, "p": p, "w": w, "dw": dw, "a": acc, "z": z})
        col = 0
        for b in self.bodies:
            i = b.joint
            fr = frames[i]
            if b.jack is None:
                Rb, ob, wb, dwb, ab = fr["R"], fr["p"], fr["w"], fr["dw"], fr["a"]
                own_v = np.zeros((N, 3))
                own_w = fr["z"]
            else:
                par = fr["parent"]
                kin = self._jack_kinematics(b.jack, q[:, i])
                RG, z = par["R"], par["z"]
                Rb = RG @ _rot_z(kin["psi"])
                qdi, qddi = qd[:, i : i + 1], qdd[:, i : i + 1]
                psi1, psi2 = kin["psi1"][:, None], kin["psi2"][:, None]
                wb = par["w"] + z * psi1 * qdi
                dwb = (
                    par["dw"]
                    + np.cross(par["w"], z * psi1 * qdi)
                    + z * (psi1 * qddi + psi2 * qdi**2)
                )
                pin = kin["B"] if b.piston else kin["A"]
                r = _mv(RG, np.ascontiguousarray(pin))
                ob = par["p"] + r
                ab = par["a"] + np.cross(par["dw"], r) + np.cross(par["w"], np.cross(par["w"], r))
                if b.piston:
                    v1 = _mv(RG, kin["B1"])
                    ab = ab + 2.0 * np.cross(par["w"], v1 * qdi) + v1 * qddi
                    ab = ab + _mv(RG, kin["B2"]) * qdi**2
                    own_v = v1
                else:
                    own_v = np.zeros((N, 3))
                own_w = z * psi1
            kf, kn = wrench_regressor(_mtv(Rb, wb), _mtv(Rb, dwb), _mtv(Rb, ab))
            fw = Rb @ kf  # (N, 3, 10) in the world
            nw = Rb @ kn
            blk = slice(col, col + 10)
            for jj in range(i):
                fj = frames[jj]
                lever = np.cross((ob - fj["p"])[:, :, None], fw, axis=1)
                Y[:, jj, blk] = np.einsum("ni,nik->nk", fj["z"], nw + lever)
            Y[:, i, blk] = np.einsum("ni,nik->nk", own_w, nw) + np.einsum("ni,nik->nk", own_v, fw)
            col += 10
        tc, tr = self.torque_per_pressure(q) if self.offsets else (None, None)
        for kd, i, k in self._extra:
            if kd == "Ia":
                Y[:, i, col] = qdd[:, i]
            elif kd == "fv":
                Y[:, i, col] = qd[:, i]
            elif kd == "fc":
                Y[:, i, col] = np.sign(qd[:, i])
            elif kd == "fva":
                if k is None:
                    jm = self.chain.joints[i].drive
                    assert isinstance(jm, Motor)
                    Y[:, i, col] = jm.gear_ratio**2 * qd[:, i]
                else:
                    l1 = self._jack_kinematics(k, q[:, i])["l1"]
                    Y[:, i, col] = l1 * l1 * qd[:, i]
            elif kd == "o_cap":
                assert tc is not None
                Y[:, i, col] = tc[:, i]
            elif kd == "o_rod":
                assert tr is not None
                Y[:, i, col] = -tr[:, i]
            col += 1
        return Y
