"""The arm in 3-D: the transforms chain the joints with their angles, the cylinders span their
pins with the plant model's length, any number of joints, and every message validates against
Foxglove's own JSON schema (so the stock 3-D panel reads it)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from daq.bridge.arm3d import ArmModel, JointGeometry
from daq.bridge.standard import foxglove_schema
from daq.profile import load_profile
from tests.live.conftest import PROFILE_2DOF

jsonschema = pytest.importorskip("jsonschema")


def compose(tfs: list[dict], frame: str) -> np.ndarray:
    """The 4×4 pose of `frame` in `world` by chaining the transforms."""
    by_child = {t["child_frame_id"]: t for t in tfs}
    pose = np.eye(4)
    while frame != "world":
        t = by_child[frame]
        q, p = t["rotation"], t["translation"]
        x, y, z, w = q["x"], q["y"], q["z"], q["w"]
        rot = np.array([
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ])  # fmt: skip
        m = np.eye(4)
        m[:3, :3], m[:3, 3] = rot, [p["x"], p["y"], p["z"]]
        pose = m @ pose
        frame = t["parent_frame_id"]
    return pose


def test_two_joint_profile_kinematics_and_cylinders() -> None:
    profile = load_profile(PROFILE_2DOF)
    arm = ArmModel.from_profile(profile)
    assert arm is not None and [j.name for j in arm.joints] == ["j1", "j2"]
    l1, l2 = (j.link_length for j in arm.joints)
    for q1, q2 in ((0.0, 0.0), (40.0, 30.0), (90.0, -45.0)):
        tfs = arm.transforms({"j1": q1, "j2": q2}, 1_700_000_000_123_456_789)["transforms"]
        tool = compose(tfs, "tool") @ [0, 0, 0, 1]
        a1, a12 = math.radians(q1), math.radians(q1 + q2)
        expect = [-l1 * math.sin(a1) - l2 * math.sin(a12), 0.0,
                  -l1 * math.cos(a1) - l2 * math.cos(a12)]  # fmt: skip
        np.testing.assert_allclose(tool[:3], expect, atol=1e-12)
        scene = arm.scene({"j1": q1, "j2": q2}, 1)
        for j, qd in zip(arm.joints, (q1, q2), strict=True):
            (ent,) = [e for e in scene["entities"] if e["id"] == f"{j.name}/cylinder"]
            rod = ent["cylinders"][1]
            theta = math.radians(qd) + j.theta0
            ell = math.sqrt(j.pin_a**2 + j.pin_b**2 - 2 * j.pin_a * j.pin_b * math.cos(theta))
            assert rod["size"]["z"] == pytest.approx(ell, rel=1e-12)  # DESIGN.md §1.1
            assert ent["cylinders"][0]["size"]["z"] <= ell + 1e-12


def test_any_number_of_joints_and_foxglove_schemas() -> None:
    joints = [JointGeometry(f"boom{k}", 0.2, 0.5, 0.3 * k, 0.4, 1.0 + k) for k in range(5)]
    arm = ArmModel(joints)
    angles = {f"boom{k}": 10.0 * k for k in range(5)}
    tfs = arm.transforms(angles, 5_000_000_001)
    scene = arm.scene(angles, 5_000_000_001)
    assert [t["child_frame_id"] for t in tfs["transforms"]] == arm.frames[1:]
    assert len(scene["entities"]) == 10
    assert tfs["transforms"][0]["timestamp"] == {"sec": 5, "nsec": 1}
    jsonschema.validate(tfs, foxglove_schema("FrameTransforms"))
    jsonschema.validate(scene, foxglove_schema("SceneUpdate"))
