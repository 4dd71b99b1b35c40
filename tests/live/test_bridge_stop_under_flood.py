"""The bridge stops while its telemetry never runs dry (a service in virtual time publishes
faster than the bridge handles): it looks at `stop` after every `DRAIN_MAX` messages, not only
when the subscription is empty."""

from __future__ import annotations

import threading
from typing import Any

import zmq

from daq.bridge import server as bridge_server


class EndlessSub:
    """A subscription that always has another message (its socket stays readable)."""

    def __init__(self, ctx: zmq.Context[Any]) -> None:
        self.sock = ctx.socket(zmq.PAIR)
        self.sock.bind("inproc://endless")
        self._peer = ctx.socket(zmq.PAIR)
        self._peer.connect("inproc://endless")
        self._peer.send(b"x")  # never read: POLLIN stays set

    def recv(self, timeout: int = 0) -> object:
        return object()

    def close(self) -> None:
        self.sock.close(0)
        self._peer.close(0)


def test_the_bridge_stops_while_telemetry_floods_it() -> None:
    ctx: zmq.Context[Any] = zmq.Context()
    sub = EndlessSub(ctx)
    bridge = bridge_server.Bridge.__new__(bridge_server.Bridge)
    bridge._stop = threading.Event()
    bridge.sub = sub
    bridge.est = None
    bridge.check_liveness = lambda now: None  # type: ignore[method-assign]
    handled = []

    def handle(msg: object) -> None:
        handled.append(msg)
        if len(handled) == 10:
            bridge.stop()  # SIGTERM arrives mid-drain

    bridge.handle = handle  # type: ignore[method-assign]
    th = threading.Thread(target=bridge.run, daemon=True)
    th.start()
    th.join(30.0)
    try:
        assert not th.is_alive(), "run() did not return after stop() under a flood"
        assert len(handled) <= bridge_server.DRAIN_MAX
    finally:
        sub.close()
        ctx.term()
