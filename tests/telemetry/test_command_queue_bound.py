"""What one client can make the command socket hold is bounded: while the command thread is busy,
a client queueing large requests fills only a few per connection (the rest stay in its own
kernel buffers), not a hundred 4 MiB messages in the service's memory."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import msgpack
import zmq

from daq.commands import CommandServer
from daq.commands.server import MAX_MESSAGE_BYTES
from tests.conditions import wait_until

WAIT_S = 30.0

CLIENT = """
import sys, time, zmq
ctx = zmq.Context()
c = ctx.socket(zmq.DEALER)
c.sndhwm = 0
c.connect(sys.argv[1])
big = b"\\x00" * (int(sys.argv[2]) - 1024)
for _ in range(40):
    c.send_multipart([b"", big])
print("sent", flush=True)
sys.stdin.readline()
"""


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_client_queueing_large_requests_holds_little_of_the_service_memory(ctx) -> None:
    busy, release = threading.Event(), threading.Event()

    def handler(cmd: str, args: dict[str, Any], who: Any) -> dict[str, Any]:
        if cmd == "describe":  # keeps the command thread busy until released
            busy.set()
            release.wait(WAIT_S)
        return {}

    srv = CommandServer(ctx, "tcp://127.0.0.1:*", handler)
    srv.start()
    first = ctx.socket(zmq.DEALER)
    first.linger = 0
    first.connect(srv.endpoint)
    child = None
    try:
        first.send_multipart([b"", msgpack.packb({"cmd": "describe"})])
        assert busy.wait(WAIT_S)
        base = _rss_mb()
        child = subprocess.Popen(
            [sys.executable, "-c", CLIENT, srv.endpoint, str(MAX_MESSAGE_BYTES)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert child.stdout is not None and child.stdout.readline().startswith("sent")
        # 40 × 4 MiB offered: the service's memory must not take them in (watched for 3 s).
        grew = wait_until(lambda: _rss_mb() - base > 50, 3.0)
        assert not grew, f"the service took {_rss_mb() - base:.0f} MB of queued requests"
        release.set()
        assert first.poll(WAIT_S * 1000), "the busy request was never answered"
        first.recv_multipart()
        assert wait_until(lambda: srv.requests >= 41, WAIT_S), srv.requests  # all answered
    finally:
        release.set()
        if child is not None:
            child.kill()
            child.communicate()
        first.close()
        srv.stop()
