"""The arm in 3-D: frame transforms from the joint angles and scene entities from the profile's
geometry, for Foxglove's stock 3-D panel (`foxglove.FrameTransforms` on `/tf`,
`foxglove.SceneUpdate` on `/rig/scene`).

A `[chain]` profile's machine (the excavator) is drawn from its D-H parameters instead
(`daq.bridge.chain3d`; `arm_from_profile` picks). Here, any number of joints: a planar serial
arm in the x–z plane, one frame per joint (its name), each turning about y by its angle `q`
(measured from hanging down, DESIGN.md §1). Frames: `world` → `base` → `<joint 1>` → … →
`<joint N>` → `tool`; each joint's frame sits at the end of the previous link.

Each joint's cylinder is drawn between its pins (DESIGN.md §1.1): the base pin at `pin_a` from
the joint, fixed in the parent's frame at the angle `−θ0` from the hanging-down direction; the
rod pin at `pin_b` along the link, so the angle between them is `q + θ0` and their distance is
the cylinder length `ℓ = √(a² + b² − 2ab cos(q + θ0))` the plant model uses. The barrel is
`closed_length` long from the base pin (capped at ℓ); the rod spans the rest.

The profile gives no link lengths (the identification never needs them): a link is drawn
`pin_a + pin_b` long unless the joint's plant section names a `link_length`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from daq.bridge.standard import stamp

BASE, WORLD, TOOL = "base", "world", "tool"
#: Drawing sizes, m (diameters).
LINK_D, BARREL_D, ROD_D, JOINT_D = 0.04, 0.05, 0.025, 0.06

_ENTITY_LISTS = ("arrows", "cubes", "spheres", "cylinders", "lines", "triangles", "texts",
                 "models")  # fmt: skip


@dataclass(frozen=True)
class JointGeometry:
    name: str
    pin_a: float
    pin_b: float
    theta0: float  # rad
    closed_length: float
    link_length: float


def _dir(psi: float) -> tuple[float, float]:
    """Unit vector (x, z) at angle ψ from hanging down (−z), turned about +y."""
    return -math.sin(psi), -math.cos(psi)


def _quat_y(angle: float) -> dict[str, float]:
    return {"x": 0.0, "y": math.sin(angle / 2), "z": 0.0, "w": math.cos(angle / 2)}


def _vec(x: float, z: float) -> dict[str, float]:
    return {"x": x, "y": 0.0, "z": z}


def _cylinder(a: tuple[float, float], b: tuple[float, float], d: float,
              rgba: tuple[float, float, float, float]) -> dict[str, Any]:  # fmt: skip
    """A cylinder from point a to point b (x, z) in its frame."""
    dx, dz = b[0] - a[0], b[1] - a[1]
    length = math.hypot(dx, dz)
    return {
        "pose": {"position": _vec((a[0] + b[0]) / 2, (a[1] + b[1]) / 2),
                 "orientation": _quat_y(math.atan2(dx, dz))},  # z axis onto a → b
        "size": {"x": d, "y": d, "z": length},
        "bottom_scale": 1.0,
        "top_scale": 1.0,
        "color": dict(zip("rgba", rgba, strict=True)),
    }  # fmt: skip


def entity(ts: dict[str, int], frame: str, eid: str, parts: dict[str, Any]) -> dict[str, Any]:
    """A `foxglove.SceneEntity` in `frame` with the given primitive lists (the rest empty)."""
    e: dict[str, Any] = {"timestamp": ts, "frame_id": frame, "id": eid,
                         "lifetime": {"sec": 0, "nsec": 0}, "frame_locked": True,
                         "metadata": []}  # fmt: skip
    for key in _ENTITY_LISTS:
        e[key] = parts.get(key, [])
    return e


def arm_from_profile(profile: Any) -> Any:
    """The 3-D arm of a loaded profile: the chain's (`daq.bridge.chain3d`) for a `[chain]`
    profile, else the planar arm of `[plant]`; None for a profile with neither."""
    if getattr(profile, "chain", None) is not None:
        from daq.bridge.chain3d import ChainArmModel

        return ChainArmModel.from_profile(profile)
    return ArmModel.from_profile(profile)


class ArmModel:
    def __init__(self, joints: Sequence[JointGeometry]) -> None:
        if not joints:
            raise ValueError("an arm needs at least one joint")
        self.joints = list(joints)

    @classmethod
    def from_profile(cls, profile: Any) -> ArmModel | None:
        """From a loaded profile's joints and `[[plant.joints]]` (None without a plant)."""
        plant = getattr(profile, "plant", None)
        if plant is None or len(plant.joints) != len(profile.joints):
            return None
        return cls([
            JointGeometry(
                name=j.name, pin_a=p.pin_a, pin_b=p.pin_b, theta0=math.radians(p.theta0_deg),
                closed_length=p.closed_length,
                link_length=getattr(p, "link_length", None) or p.pin_a + p.pin_b,
            )
            for j, p in zip(profile.joints, plant.joints, strict=True)
        ])  # fmt: skip

    @property
    def frames(self) -> list[str]:
        return [WORLD, BASE, *(j.name for j in self.joints), TOOL]

    # ------------------------------------------------------------------ messages

    def transforms(self, angles_deg: Mapping[str, float | None], ns: int) -> dict[str, Any]:
        """`foxglove.FrameTransforms` for joint angles in degrees (a missing angle: 0)."""
        ts = stamp(ns)

        def tf(parent: str, child: str, x: float, z: float, q: float) -> dict[str, Any]:
            return {"timestamp": ts, "parent_frame_id": parent, "child_frame_id": child,
                    "translation": _vec(x, z), "rotation": _quat_y(q)}  # fmt: skip

        out = [tf(WORLD, BASE, 0.0, 0.0, 0.0)]
        parent, offset = BASE, 0.0
        for j in self.joints:
            q = math.radians(angles_deg.get(j.name) or 0.0)
            out.append(tf(parent, j.name, 0.0, -offset, q))
            parent, offset = j.name, j.link_length
        out.append(tf(parent, TOOL, 0.0, -offset, 0.0))
        return {"transforms": out}

    def pins(self, joint: JointGeometry, q: float) -> tuple[tuple[float, float], ...]:
        """Base pin and rod pin of a joint's cylinder in its parent's frame, with the joint at
        (0, −offset) of that frame: ((xa, za), (xb, zb)) relative to the joint."""
        ua, ub = _dir(-joint.theta0), _dir(q)
        return ((joint.pin_a * ua[0], joint.pin_a * ua[1]),
                (joint.pin_b * ub[0], joint.pin_b * ub[1]))  # fmt: skip

    def scene(self, angles_deg: Mapping[str, float | None], ns: int) -> dict[str, Any]:
        """`foxglove.SceneUpdate`: per joint a sphere at the joint and the link (in the joint's
        frame), and the cylinder between its pins (in the parent's frame)."""
        ts = stamp(ns)
        entities = []
        parent, offset = BASE, 0.0
        for j in self.joints:
            q = math.radians(angles_deg.get(j.name) or 0.0)
            link = {
                "spheres": [{"pose": {"position": _vec(0.0, 0.0), "orientation": _quat_y(0.0)},
                             "size": {"x": JOINT_D, "y": JOINT_D, "z": JOINT_D},
                             "color": {"r": 0.3, "g": 0.3, "b": 0.3, "a": 1.0}}],
                "cylinders": [_cylinder((0.0, 0.0), (0.0, -j.link_length), LINK_D,
                                        (0.85, 0.55, 0.1, 1.0))],
            }  # fmt: skip
            (xa, za), (xb, zb) = self.pins(j, q)
            a, b = (xa, za - offset), (xb, zb - offset)
            length = math.hypot(b[0] - a[0], b[1] - a[1])
            k = min(1.0, j.closed_length / length) if length > 0 else 1.0
            end = (a[0] + k * (b[0] - a[0]), a[1] + k * (b[1] - a[1]))
            cyl = {"cylinders": [_cylinder(a, end, BARREL_D, (0.2, 0.35, 0.8, 1.0)),
                                 _cylinder(a, b, ROD_D, (0.75, 0.75, 0.8, 1.0))]}  # fmt: skip
            entities.append(entity(ts, j.name, f"{j.name}/link", link))
            entities.append(entity(ts, parent, f"{j.name}/cylinder", cyl))
            parent, offset = j.name, j.link_length
        return {"deletions": [], "entities": entities}
