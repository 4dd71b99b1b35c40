"""rig-bridge liveness: how soon it says the service is gone, how soon data flows on its return.

    .venv/bin/python bench/bridge_liveness.py [--cycles 3]

The service (simulator, real time) and rig-bridge as processes, a raw WebSocket client
(foxglove.sdk.v1). Each cycle kills the service (SIGKILL) and restarts it on the same endpoints.
Per cycle:

- `said_s`: wall time from the kill to the bridge's `hydrig.service` status on the client
  (target ≤ 1 s);
- `age_s`: the age of the last row the bridge states in that status (its own clock);
- `first_t_s`: the loop time `t` of the first row the client receives after the restart, i.e.
  how far into the new service's life data flows again (target ≤ 1 s of its first row);
- `restart_s`: wall time from starting the new service to that row (includes its start-up).

JSON on the last line; progress on stderr. On a shared machine wall times read high.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from websockets.sync.client import connect  # noqa: E402

from rigctl.session import RigSession  # noqa: E402

PROFILE = ROOT / "hw_profiles" / "sim-2dof.toml"


def until(ws: Any, pred: Any, timeout: float, state: dict[str, Any]) -> Any:
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        frame = ws.recv(timeout=left)
        if isinstance(frame, bytes):
            if frame[0] != 0x01:
                continue
            sid = struct.unpack_from("<I", frame, 1)[0]
            msg = {"op": "data", "sub": sid, "body": json.loads(frame[13:])}
        else:
            msg = json.loads(frame)
            if msg["op"] == "advertise":
                for c in msg["channels"]:
                    if c["topic"] == "/rig/joints":
                        ws.send(json.dumps({"op": "subscribe", "subscriptions": [
                            {"id": c["id"], "channelId": c["id"]}]}))  # fmt: skip
                        state["joints"] = c["id"]
        if pred(msg):
            return msg
    raise TimeoutError(f"nothing matched within {timeout} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    rig = RigSession(PROFILE, tmp / "rig0", virtual_time=False, estimator=False)
    rig.start()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    bridge = subprocess.Popen(
        [sys.executable, "-m", "daq.bridge.cli", "--telemetry", rig.telemetry, "--estimates",
         "none", "--commands", "none", "--port", "0"],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert bridge.stdout is not None
    port = int(bridge.stdout.readline().split("ws://127.0.0.1:")[1].split()[0])
    cycles: list[dict[str, float]] = []
    sessions = [rig]
    try:
        with connect(f"ws://127.0.0.1:{port}", subprotocols=["foxglove.sdk.v1"]) as ws:
            state: dict[str, Any] = {}
            until(ws, lambda m: m["op"] == "data", 60, state)
            for k in range(args.cycles):
                assert sessions[-1].daq is not None
                t_kill = time.monotonic()
                sessions[-1].daq.send_signal(signal.SIGKILL)
                st = until(ws, lambda m: m.get("id") == "hydrig.service", 30, state)
                said = time.monotonic() - t_kill
                age = float(st["message"].split("no telemetry for ")[1].split(" s")[0])
                again = RigSession(PROFILE, tmp / f"rig{k + 1}", virtual_time=False,
                                   estimator=False)  # fmt: skip
                again.telemetry, again.commands = rig.telemetry, rig.commands
                t_start = time.monotonic()
                again.start()
                sessions.append(again)
                first = until(ws, lambda m: m["op"] == "data", 60, state)["body"]
                cycles.append({"said_s": said, "age_s": age, "first_t_s": float(first["t"]),
                               "restart_s": time.monotonic() - t_start})  # fmt: skip
                print(f"cycle {k}: {cycles[-1]}", file=sys.stderr)
    finally:
        bridge.terminate()
        bridge.wait(30)
        for s in sessions:
            s.stop()
    worst = {key: max(c[key] for c in cycles) for key in cycles[0]}
    print(json.dumps({
        "bench": "bridge_liveness", "cycles": cycles, "worst": worst,
        "targets": {"said_s": 1.0, "first_t_s": 1.0},
        "pass": worst["said_s"] <= 1.0 and worst["first_t_s"] <= 1.0,
        "load_avg_1min": os.getloadavg()[0],
    }))  # fmt: skip


if __name__ == "__main__":
    main()
