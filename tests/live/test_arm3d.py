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


def rotation(q: dict) -> np.ndarray:
    """The rotation matrix of a unit quaternion {x, y, z, w}."""
    x, y, z, w = q["x"], q["y"], q["z"], q["w"]
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])  # fmt: skip


def compose(tfs: list[dict], frame: str) -> np.ndarray:
    """The 4×4 pose of `frame` in `world` by chaining the transforms."""
    by_child = {t["child_frame_id"]: t for t in tfs}
    pose = np.eye(4)
    while frame != "world":
        t = by_child[frame]
        p = t["translation"]
        m = np.eye(4)
        m[:3, :3], m[:3, 3] = rotation(t["rotation"]), [p["x"], p["y"], p["z"]]
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


def test_the_excavator_is_drawn_from_its_dh_parameters() -> None:
    """A [chain] profile: the transforms put every joint frame and the tool where the chain's
    own forward kinematics (thesis eq. 3.8) does, each jack spans its pins, and the messages
    validate against Foxglove's schemas."""
    from controller.plant.chain.kinematics import jack_pins, joint_frames, link_frames
    from daq.bridge.arm3d import arm_from_profile
    from daq.bridge.chain3d import quaternion

    profile = load_profile(PROFILE_2DOF.parent / "sim-excavator.toml")
    arm = arm_from_profile(profile)
    chain = profile.chain_model()[0]
    assert arm is not None and arm.frames[2:-1] == chain.names
    rng = np.random.default_rng(5)
    for _ in range(5):
        deg = rng.uniform(-30.0, 30.0, chain.n)
        angles = dict(zip(chain.names, deg.tolist(), strict=True))
        tfs = arm.transforms(angles, 7)["transforms"]
        q = np.radians(deg)
        for name, frame in zip(chain.names, joint_frames(chain, q), strict=True):
            np.testing.assert_allclose(compose(tfs, name), frame, atol=1e-12)
        np.testing.assert_allclose(compose(tfs, "tool"), link_frames(chain, q)[-1], atol=1e-12)
        scene = arm.scene(angles, 7)
        jacks = [e for e in scene["entities"] if "/jack" in e["id"]]
        pins = jack_pins(chain, q)
        assert len(jacks) == len(pins) == 4  # the boom's pair, the stick's, the bucket's
        for ent, (_, _, a, b) in zip(jacks, pins, strict=True):
            rod = ent["cylinders"][1]
            assert rod["size"]["z"] == pytest.approx(np.linalg.norm(b - a), rel=1e-12)
            centre = rod["pose"]["position"]
            np.testing.assert_allclose([centre[k] for k in "xyz"], (a + b) / 2, atol=1e-12)
        jsonschema.validate({"transforms": tfs}, foxglove_schema("FrameTransforms"))
        jsonschema.validate(scene, foxglove_schema("SceneUpdate"))
    # The matrix-to-quaternion conversion's four cases: a small turn (trace largest) and half
    # turns less a little about axes near x, y and z (that diagonal element largest).
    for axis, angle in (((0.3, -0.5, 0.8), 0.4), ((1.0, 0.2, -0.1), 3.0),
                        ((0.1, 1.0, 0.3), 3.0), ((-0.2, 0.1, 1.0), 3.0)):  # fmt: skip
        u = np.asarray(axis) / np.linalg.norm(axis)
        k = np.array([[0.0, -u[2], u[1]], [u[2], 0.0, -u[0]], [-u[1], u[0], 0.0]])
        r = np.eye(3) + math.sin(angle) * k + (1.0 - math.cos(angle)) * k @ k  # Rodrigues
        qd = quaternion(r)
        np.testing.assert_allclose(rotation(qd), r, atol=1e-12)
        assert qd["w"] >= 0.0  # one of the two quaternions of a turn, always the same
