"""A serial chain in 3-D from its modified D-H parameters (a `[chain]` profile, the thesis's
excavator, docs/excavator.md), for Foxglove's stock 3-D panel: `foxglove.FrameTransforms` on
`/tf` and `foxglove.SceneUpdate` on `/rig/scene`, the planar arm's topics (`arm3d.ArmModel`).

Frames `world` → `base` (frame 0) → `<joint 1>` → … → `<joint N>` → `tool`. Joint i's frame is
the thesis's F_i (eq. 3.8): its parent's frame times C_{i−1} (link i−1's constant
Trans(z, d) Trans(x, a) Rot(x, α) Rot(y, β)) times Rot(z, q_i + θ_offset); `tool` is F_N times
C_N. Each link is drawn in its joint's frame, from the joint to the next joint's origin; each
jack between its pins (`controller.plant.chain.kinematics.jack_pins`, the same geometry the
dynamics use), the barrel `closed_length` long from the cylinder's pin and the rod the rest; a
motor as a drum on its joint's axis. Sizes scale with the machine's reach.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from controller.plant.chain.kinematics import jack_pins
from controller.plant.chain.model import Chain, Motor
from daq.bridge.arm3d import BASE, TOOL, WORLD, entity
from daq.bridge.standard import stamp

#: Drawing diameters as fractions of the reach (Σ |a| + |d| of the links).
LINK_F, BARREL_F, ROD_F, JOINT_F, MOTOR_F = 0.02, 0.025, 0.012, 0.035, 0.06


def quaternion(r: np.ndarray) -> dict[str, float]:
    """Unit quaternion of a rotation matrix, the one of its two with w ≥ 0 (scipy's)."""
    x, y, z, w = Rotation.from_matrix(r).as_quat(canonical=True)
    return {"x": float(x), "y": float(y), "z": float(z), "w": float(w)}


def _vec(p: Any) -> dict[str, float]:
    return {"x": float(p[0]), "y": float(p[1]), "z": float(p[2])}


def _z_onto(u: np.ndarray) -> dict[str, float]:
    """The quaternion turning +z onto the unit vector u."""
    c = float(u[2])
    if c < -1.0 + 1e-12:
        return {"x": 1.0, "y": 0.0, "z": 0.0, "w": 0.0}  # half a turn about x
    axis = np.array([-u[1], u[0], 0.0])  # z × u
    w = math.sqrt(0.5 * (1.0 + c))
    s = 0.5 / w if w > 0 else 0.0
    return {"x": float(axis[0] * s), "y": float(axis[1] * s), "z": 0.0, "w": w}


def _cylinder(a: np.ndarray, b: np.ndarray, d: float, rgba: tuple[float, ...]) -> dict[str, Any]:
    """A cylinder from point a to point b (3-vectors in its entity's frame)."""
    v = b - a
    length = float(np.linalg.norm(v))
    u = v / length if length > 0 else np.array([0.0, 0.0, 1.0])
    return {
        "pose": {"position": _vec((a + b) / 2), "orientation": _z_onto(u)},
        "size": {"x": d, "y": d, "z": length},
        "bottom_scale": 1.0,
        "top_scale": 1.0,
        "color": dict(zip("rgba", rgba, strict=True)),
    }


class ChainArmModel:
    """`arm3d.ArmView` of a `Chain` (module doc)."""

    def __init__(self, chain: Chain) -> None:
        self.chain = chain
        self.names = chain.names
        self._c = [j.link.dh.constant() for j in chain.joints]
        reach = sum(abs(j.link.dh.a) + abs(j.link.dh.d) for j in chain.joints) or 1.0
        self._d = {k: f * reach for k, f in (("link", LINK_F), ("barrel", BARREL_F),
                                            ("rod", ROD_F), ("joint", JOINT_F),
                                            ("motor", MOTOR_F))}  # fmt: skip

    @classmethod
    def from_profile(cls, profile: Any) -> ChainArmModel | None:
        if getattr(profile, "chain", None) is None:
            return None
        chain, _, _ = profile.chain_model()
        return cls(chain)

    @property
    def frames(self) -> list[str]:
        return [WORLD, BASE, *self.names, TOOL]

    def _q(self, angles_deg: Mapping[str, float | None]) -> np.ndarray:
        return np.radians([angles_deg.get(n) or 0.0 for n in self.names])

    def transforms(self, angles_deg: Mapping[str, float | None], ns: int) -> dict[str, Any]:
        """`foxglove.FrameTransforms` for joint angles in degrees (a missing angle: 0)."""
        ts = stamp(ns)

        def tf(parent: str, child: str, p: Any, r: np.ndarray) -> dict[str, Any]:
            return {"timestamp": ts, "parent_frame_id": parent, "child_frame_id": child,
                    "translation": _vec(p), "rotation": quaternion(r)}  # fmt: skip

        out = [tf(WORLD, BASE, np.zeros(3), np.eye(3))]
        parent, r_prev, p_prev = BASE, np.eye(3), np.zeros(3)
        for q, j, (r_c, p_c) in zip(self._q(angles_deg), self.chain.joints, self._c, strict=True):
            c, s = math.cos(q + j.link.dh.theta_offset), math.sin(q + j.link.dh.theta_offset)
            rz = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
            out.append(tf(parent, j.link.name, p_prev, r_prev @ rz))
            parent, r_prev, p_prev = j.link.name, r_c, p_c
        out.append(tf(parent, TOOL, p_prev, r_prev))
        return {"transforms": out}

    def scene(self, angles_deg: Mapping[str, float | None], ns: int) -> dict[str, Any]:
        """`foxglove.SceneUpdate`: each link (sphere at its joint, cylinder to the next joint,
        a drum for a motor) in its joint's frame; the jacks in the base frame."""
        ts = stamp(ns)
        d = self._d
        grey, orange = (0.3, 0.3, 0.3, 1.0), (0.85, 0.55, 0.1, 1.0)
        entities = []
        zero = np.zeros(3)
        for j, (_, p_c) in zip(self.chain.joints, self._c, strict=True):
            parts: dict[str, Any] = {
                "spheres": [{"pose": {"position": _vec(zero), "orientation": quaternion(np.eye(3))},
                             "size": {"x": d["joint"], "y": d["joint"], "z": d["joint"]},
                             "color": dict(zip("rgba", grey, strict=True))}],
                "cylinders": [_cylinder(zero, np.asarray(p_c), d["link"], orange)],
            }  # fmt: skip
            if isinstance(j.drive, Motor):
                h = np.array([0.0, 0.0, d["motor"]])
                parts["cylinders"].append(_cylinder(-h, h, d["motor"], (0.2, 0.35, 0.8, 1.0)))
            entities.append(entity(ts, j.link.name, f"{j.link.name}/link", parts))
        for k, (i, jack, a, b) in enumerate(jack_pins(self.chain, self._q(angles_deg))):
            length = float(np.linalg.norm(b - a))
            f = min(1.0, jack.closed_length / length) if length > 0 else 1.0
            cyls = [_cylinder(a, a + f * (b - a), d["barrel"], (0.2, 0.35, 0.8, 1.0)),
                    _cylinder(a, b, d["rod"], (0.75, 0.75, 0.8, 1.0))]  # fmt: skip
            name = self.names[i]
            entities.append(entity(ts, BASE, f"{name}/jack{k}", {"cylinders": cyls}))
        return {"deletions": [], "entities": entities}


__all__ = ["ChainArmModel", "quaternion"]
