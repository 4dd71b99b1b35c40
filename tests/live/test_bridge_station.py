"""The station through the bridge, seen by an independent client (raw `websockets`, speaking
foxglove.sdk.v1 from its published spec, none of this project's client code): the service with
CURVE (simulator, real time), the bridge with a controller key, WebSocket clients with tokens.

- The client sees the server's time, the parameters and the services.
- A monitor client's `arm` is refused with exactly the command socket's refusal of its key.
- `estop` through the bridge latches ESTOP (monitor keys may e-stop).
- Gains set as parameters reach the service through `set_gains`; limits are read-only; a
  monitor client cannot set anything.
- A bridge with a monitor key offers no service that moves the rig, and says so.
"""

from __future__ import annotations

import json
import struct
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from daq.bridge.auth import make_token
from daq.commands import CommandClient, ServiceUnreachable
from daq.security import ClientKeys, generate_client_key
from rigctl.session import free_endpoint
from tests.live.conftest import PROFILE_2DOF, ROOT, spawn, stop

pytestmark = pytest.mark.slow
websockets_sync = pytest.importorskip("websockets.sync.client")


class Rig:
    def __init__(self, tmp: Path) -> None:
        self.keys = tmp / "keys"
        for name, role in (("bridge", "controller"), ("watch", "monitor"), ("op", "controller"),
                           ("viewer", "monitor")):  # fmt: skip
            generate_client_key(self.keys, name, role)
        self.profile = tmp / "curve.toml"
        self.profile.write_text(PROFILE_2DOF.read_text().replace(
            "telemetry_batch = 20", f'telemetry_batch = 20\nkeys_dir = "{self.keys}"'))  # fmt: skip
        self.telemetry, self.commands = free_endpoint(), free_endpoint()
        self.tokens = {n: make_token(self.keys, n) for n in ("op", "viewer")}
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        self.daq = spawn(["-m", "daq.service", "--profile", str(self.profile), "--run-dir",
                          str(tmp / "runs"), "--telemetry", self.telemetry, "--commands",
                          self.commands], **quiet)  # fmt: skip
        deadline = time.monotonic() + 120
        while True:
            try:
                self.request("op", "status")
                break
            except ServiceUnreachable:
                assert time.monotonic() < deadline and self.daq.poll() is None, "no service"

    def request(self, key: str, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        with CommandClient(self.commands, keys=ClientKeys.load(key, self.keys), timeout=10) as c:
            return c.request(cmd, args)

    def bridge(self, key: str) -> tuple[subprocess.Popen[str], int]:
        proc = spawn(["-m", "daq.bridge.cli", "--profile", str(self.profile), "--key", key,
                      "--telemetry", self.telemetry, "--commands", self.commands,
                      "--estimates", "none", "--experiments", str(ROOT / "experiments"),
                      "--port", "0"], stdout=subprocess.PIPE)  # fmt: skip
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "serving ws://127.0.0.1:" in line, line
        return proc, int(line.split("ws://127.0.0.1:")[1].split()[0])


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path)
    try:
        yield r
    finally:
        r.daq.terminate()
        r.daq.wait(60)


class Client:
    """A foxglove.sdk.v1 client written from the protocol spec."""

    def __init__(self, stack: ExitStack, port: int, token: str) -> None:
        self.ws = stack.enter_context(websockets_sync.connect(
            f"ws://127.0.0.1:{port}/?token={token}", subprotocols=["foxglove.sdk.v1"],
            open_timeout=30))  # fmt: skip
        self.info = json.loads(self.ws.recv(timeout=30))
        self.services: dict[str, dict[str, Any]] = {}
        self.statuses: list[dict[str, Any]] = []
        self.times: list[int] = []
        self.call_id = 0

    def next(self, want: Any, timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            frame = self.ws.recv(timeout=left)
            if isinstance(frame, bytes):
                if frame[0] == 0x02:
                    self.times.append(struct.unpack_from("<Q", frame, 1)[0])
                    msg: Any = ("time",)
                elif frame[0] == 0x03:
                    sid, cid, n = struct.unpack_from("<III", frame, 1)
                    msg = ("response", sid, cid, frame[13 : 13 + n].decode(),
                           json.loads(frame[13 + n :]))  # fmt: skip
                else:
                    continue
            else:
                msg = json.loads(frame)
                if msg["op"] == "advertiseServices":
                    self.services.update({s["name"]: s for s in msg["services"]})
                elif msg["op"] == "status":
                    self.statuses.append(msg)
            if want(msg):
                return msg
        raise AssertionError("timed out")

    def call(self, name: str, request: dict[str, Any]) -> Any:
        if name not in self.services:
            self.next(lambda m: name in self.services)
        sid = self.services[name]["id"]
        self.call_id += 1
        body = json.dumps(request).encode()
        self.ws.send(struct.pack("<BIII", 0x02, sid, self.call_id, 4) + b"json" + body)
        cid = self.call_id
        return self.next(lambda m: (isinstance(m, tuple) and m[0] == "response" and m[2] == cid)
                         or (isinstance(m, dict) and m.get("op") == "serviceCallFailure"
                             and m["callId"] == cid), timeout=60)  # fmt: skip

    def params(self, op: str, payload: Any) -> dict[str, Any]:
        self.ws.send(json.dumps({"op": op, **payload, "id": op}))
        return self.next(lambda m: isinstance(m, dict) and m.get("op") == "parameterValues")


def test_independent_client_sees_time_parameters_services_and_commands(rig: Rig) -> None:
    proc, port = rig.bridge("bridge")
    try:
        stack = ExitStack()
        op = Client(stack, port, rig.tokens["op"])
        assert op.info["op"] == "serverInfo"
        assert {"time", "parameters", "services"} <= set(op.info["capabilities"])
        op.next(lambda m: {"estop", "stop", "disarm", "arm", "reset", "run"} <= set(op.services))
        assert "standard-2dof" in json.loads(op.services["run"]["request"]["schema"])[
            "properties"]["name"]["enum"]  # fmt: skip
        op.next(lambda m: len(op.times) >= 3)
        assert op.times == sorted(op.times) and op.times[-1] > 1.6e18  # ns since 1970

        got = op.params("getParameters", {"parameterNames": []})["parameters"]
        values = {p["name"]: p.get("value") for p in got}
        assert values["/joints/j1/pid/p"] == 2.0
        assert values["/joints/j2/limits/soft_max_deg"] == 48.0
        assert values["/joints/j1/home_deg"] == 40.0

        # Gains: set through set_gains; limits read-only; a monitor client cannot set.
        new = op.params("setParameters", {"parameters": [
            {"name": "/joints/j1/pid/p", "value": 1.5, "type": "float64"}]})  # fmt: skip
        assert new["parameters"] == [{"name": "/joints/j1/pid/p", "type": "float64", "value": 1.5}]
        same = op.params("setParameters", {"parameters": [
            {"name": "/joints/j1/limits/soft_max_deg", "value": 80.0}]})  # fmt: skip
        assert same["parameters"][0]["value"] == 58.0
        assert "read-only" in op.statuses[-1]["message"]

        viewer = Client(stack, port, rig.tokens["viewer"])
        assert viewer.info["metadata"]["role"] == "monitor"
        viewer.params("setParameters", {"parameters": [
            {"name": "/joints/j1/pid/p", "value": 0.5, "type": "float64"}]})  # fmt: skip
        assert "needs a controller key (viewer is a monitor key)" in viewer.statuses[-1]["message"]
        again = viewer.params("getParameters", {"parameterNames": ["/joints/j1/pid/p"]})
        assert again["parameters"][0]["value"] == 1.5

        # arm by a monitor client: the command socket's own refusal of that key, word for word.
        direct = rig.request("viewer", "arm")
        refused = viewer.call("arm", {})
        assert refused["op"] == "serviceCallFailure"
        assert refused["message"] == f"{direct['error']}: {direct['message']}"
        assert rig.request("op", "status")["state"] == "IDLE"

        # arm by a controller client works; estop by the monitor client latches ESTOP.
        ok = op.call("arm", {})
        assert ok[0] == "response" and ok[4]["ok"] is True and ok[4]["state"] == "ARMED"
        stopped = viewer.call("estop", {"reason": "test"})
        assert stopped[0] == "response" and stopped[4]["ok"] is True
        status = rig.request("op", "status")
        assert status["state"] == "ESTOP" and status["fault"]["name"] == "ESTOP"
        assert "via rig-bridge by viewer: test" in status["fault"]["where"]
        stack.close()
    finally:
        stop(proc)


def test_bridge_without_controller_key_offers_nothing_that_moves(rig: Rig) -> None:
    proc, port = rig.bridge("watch")
    try:
        stack = ExitStack()
        op = Client(stack, port, rig.tokens["op"])
        note = op.next(lambda m: isinstance(m, dict) and m.get("id") == "hydrig.commands")
        assert "no controller key" in note["message"]
        op.next(lambda m: "estop" in op.services)
        assert set(op.services) == {"estop"}
        stack.close()
    finally:
        stop(proc)
