"""A client too slow for the rows loses the oldest rows (the data backlog), never a message of a
kept channel (the rig's events and log: a fault must reach every viewer)."""

from __future__ import annotations

import json
import struct
import threading

import pytest

from daq.bridge.wsserver import SUBPROTOCOL, FoxgloveServer
from tests.conditions import wait_until

websockets_sync = pytest.importorskip("websockets.sync.client")

ROW = b"x" * 65536  # large frames: the socket's buffers fill and the sender thread blocks
ROWS_EACH_SIDE = 200


def _received(ws) -> dict[str, list[bytes]]:  # type: ignore[no-untyped-def]
    """Subscribe to every advertised channel; collect until the server is quiet for 3 s."""
    ws.recv(timeout=30)  # serverInfo
    subs: dict[int, str] = {}
    got: dict[str, list[bytes]] = {}
    subscribed = False
    while True:
        try:
            frame = ws.recv(timeout=3.0 if subscribed else 30.0)
        except TimeoutError:
            if subscribed:
                return got
            raise
        if isinstance(frame, str):
            msg = json.loads(frame)
            if msg["op"] == "advertise":
                subs.update({c["id"]: c["topic"] for c in msg["channels"]})
                want = [{"id": c["id"], "channelId": c["id"]} for c in msg["channels"]]
                ws.send(json.dumps({"op": "subscribe", "subscriptions": want}))
                subscribed = True
        elif frame[0] == 0x01:
            sid = struct.unpack_from("<I", frame, 1)[0]
            got.setdefault(subs[sid], []).append(frame[13:])


def _subscribed(server: FoxgloveServer, n: int) -> bool:
    with server._lock:
        clients = list(server._clients.values())
    return bool(clients) and all(len(c.subs) == n for c in clients)


def test_a_slow_client_loses_rows_not_events() -> None:
    server = FoxgloveServer(name="t", port=0, backlog=8, kept_topics=("/rig/events",))
    rows = server.add_channel("/rig/joints", {"title": "rows"})
    events = server.add_channel("/rig/events", {"title": "events"})
    out: dict[str, list[bytes]] = {}

    def client() -> None:
        with websockets_sync.connect(
            f"ws://127.0.0.1:{server.port}", subprotocols=[SUBPROTOCOL], max_size=None
        ) as ws:
            out.update(_received(ws))

    th = threading.Thread(target=client)
    th.start()
    try:
        assert wait_until(lambda: _subscribed(server, 2), 60.0), "the client did not subscribe"
        # The client reads nothing while the rows pile up (it is busy subscribing, then its
        # socket buffers are full): far more rows than the backlog on both sides of the event.
        for k in range(ROWS_EACH_SIDE):
            server.log(rows, ROW, k)
        server.log(events, b'{"kind": "fault"}', ROWS_EACH_SIDE)
        for k in range(ROWS_EACH_SIDE):
            server.log(rows, ROW, ROWS_EACH_SIDE + 1 + k)
        th.join(timeout=600)
    finally:
        server.stop()
    assert not th.is_alive()
    # The rows were dropped (the test is meaningful only if the client was too slow) ...
    assert len(out.get("/rig/joints", [])) < 2 * ROWS_EACH_SIDE
    # ... the event was not.
    assert out.get("/rig/events") == [b'{"kind": "fault"}']
