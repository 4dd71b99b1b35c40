"""rig-bridge end to end: the service (simulator, real time) and the bridge as their own
processes, a WebSocket client speaking the Foxglove SDK protocol (foxglove.sdk.v1)."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import time
from typing import Any

import pytest

from daq.telemetry import Meta, SampleBatch, TelemetrySubscriber
from rigctl.session import RigSession
from tests.live.conftest import PROFILE_2DOF, spawn, stop

pytestmark = pytest.mark.slow
websockets_sync = pytest.importorskip("websockets.sync.client")


def start_bridge(rig: RigSession, *extra: str) -> tuple[subprocess.Popen[str], int]:
    proc = spawn(
        ["-m", "daq.bridge.cli", "--telemetry", rig.telemetry, "--estimates", "none",
         "--port", "0", *extra],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until the bridge listens (or exits: empty line)
    assert line.startswith("rig-bridge: serving ws://127.0.0.1:"), line
    return proc, int(line.split("ws://127.0.0.1:")[1].split()[0])


def recv_json(ws: Any, timeout: float) -> dict[str, Any]:
    while True:
        frame = ws.recv(timeout=timeout)
        if isinstance(frame, str):
            return json.loads(frame)


def test_foxglove_client_sees_the_services_own_joint_values(rig: RigSession) -> None:
    proc, port = start_bridge(rig, "--rate", "100")
    try:
        with websockets_sync.connect(
            f"ws://127.0.0.1:{port}", subprotocols=["foxglove.sdk.v1"], open_timeout=30
        ) as ws:
            assert ws.subprotocol == "foxglove.sdk.v1"
            info = recv_json(ws, 30)
            assert info["op"] == "serverInfo" and info["name"] == "hydrig"
            channels: dict[str, dict[str, Any]] = {}
            expected = {"/rig/joints", "/rig/pressures", "/rig/valves", "/rig/sensors",
                        "/rig/state", "/rig/timing", "/rig/status", "/rig/events"}  # fmt: skip
            deadline = time.monotonic() + 60
            while not expected <= set(channels) and time.monotonic() < deadline:
                msg = recv_json(ws, 60)
                if msg["op"] == "advertise":
                    channels.update({c["topic"]: c for c in msg["channels"]})
            assert expected <= set(channels)
            joints = channels["/rig/joints"]
            assert joints["encoding"] == "json" and joints["schemaName"] == "hydrig.JointStates"
            schema = json.loads(joints["schema"])
            assert set(schema["properties"]["position_deg"]["properties"]) == {"j1", "j2"}

            # The service's own telemetry, by sequence number, subscribed to before the
            # WebSocket subscription, so it covers every row the bridge sends from then on.
            with TelemetrySubscriber(rig.telemetry) as sub:
                meta = sub.wait_meta(30)
                assert isinstance(meta, Meta)
                q1 = meta.index("eng.q_1")
                subscription = {"id": 7, "channelId": joints["id"]}
                ws.send(json.dumps({"op": "subscribe", "subscriptions": [subscription]}))
                got: dict[int, dict[str, Any]] = {}
                while len(got) < 30:
                    frame = ws.recv(timeout=60)
                    if isinstance(frame, bytes) and frame[0] != 0x02:  # 0x02: server time
                        assert frame[0] == 0x01
                        sub_id, log_time = struct.unpack_from("<IQ", frame, 1)
                        assert sub_id == 7 and log_time > 0
                        m = json.loads(frame[13:])
                        got[m["seq"]] = m
                assert {s % 10 for s in got} == {0}, "every 10th cycle: 100 Hz of a 1 kHz loop"
                direct: dict[int, float] = {}
                while not direct or max(direct) < max(got):
                    msg = sub.recv(timeout=30)
                    assert msg is not None, "the service's telemetry stopped"
                    if isinstance(msg, SampleBatch):
                        for i in range(msg.n):
                            direct[msg.seq0 + i] = float(msg.data[q1, i])
            both = sorted(set(got) & set(direct))
            assert len(both) >= 20, (len(both), min(got), min(direct))
            for seq in both:
                deg = got[seq]["position_deg"]["j1"]
                assert deg == pytest.approx(math.degrees(direct[seq]), rel=1e-12, abs=1e-12)
            assert all(math.isfinite(got[s]["reference_deg"]["j2"] or 0.0) for s in both)
    finally:
        proc.terminate()
        code = proc.wait(30)
        assert proc.stdout is not None
        proc.stdout.close()
    assert code == 0


def test_arm_pose_follows_the_joint_angles(rig: RigSession) -> None:
    """With --profile the bridge serves the arm (foxglove.FrameTransforms on /tf, SceneUpdate
    on /rig/scene): each row's transform turns joint j by that row's angle."""
    proc, port = start_bridge(rig, "--profile", str(PROFILE_2DOF), "--commands", rig.commands)
    try:
        with websockets_sync.connect(
            f"ws://127.0.0.1:{port}", subprotocols=["foxglove.sdk.v1"], open_timeout=30
        ) as ws:
            channels: dict[str, dict[str, Any]] = {}
            want = {"/tf", "/rig/scene", "/rig/joints"}
            while not want <= set(channels):
                msg = recv_json(ws, 60)
                if msg["op"] == "advertise":
                    channels.update({c["topic"]: c for c in msg["channels"]})
            assert channels["/tf"]["schemaName"] == "foxglove.FrameTransforms"
            assert channels["/rig/scene"]["schemaName"] == "foxglove.SceneUpdate"
            subs = [{"id": k, "channelId": channels[t]["id"]} for k, t in enumerate(sorted(want))]
            ws.send(json.dumps({"op": "subscribe", "subscriptions": subs}))
            topic_of = {s["id"]: t for s, t in zip(subs, sorted(want), strict=True)}
            by_time: dict[int, dict[str, Any]] = {}
            while sum(len(v) == 3 for v in by_time.values()) < 10:
                frame = ws.recv(timeout=60)
                if isinstance(frame, bytes) and frame[0] == 0x01:
                    sid, stamp = struct.unpack_from("<IQ", frame, 1)
                    by_time.setdefault(stamp, {})[topic_of[sid]] = json.loads(frame[13:])
        for msgs in (m for m in by_time.values() if len(m) == 3):
            tfs = {t["child_frame_id"]: t for t in msgs["/tf"]["transforms"]}
            for j in ("j1", "j2"):
                deg = msgs["/rig/joints"]["position_deg"][j]
                assert math.degrees(2 * math.asin(tfs[j]["rotation"]["y"])) == pytest.approx(deg)
            ids = {e["id"] for e in msgs["/rig/scene"]["entities"]}
            assert ids == {"j1/link", "j1/cylinder", "j2/link", "j2/cylinder"}
    finally:
        stop(proc)
