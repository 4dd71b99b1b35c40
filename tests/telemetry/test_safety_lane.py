"""The command server's safety lane: estop, stop and status are answered while another request
is still being handled, and a full worker queue answers `busy` at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from daq.commands import CommandClient, CommandServer
from daq.commands.server import WORKER_QUEUE
from tests.conditions import GENEROUS_S, wait_until


class Blocking:
    """A handler whose `describe` blocks until released (a long request in the worker)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.calls: list[str] = []

    def __call__(self, cmd: str, args: dict[str, Any], who: Any) -> dict[str, Any]:
        self.calls.append(cmd)
        if cmd == "describe":
            self.entered.set()
            assert self.release.wait(GENEROUS_S), "the test never released the handler"
        return {"cmd": cmd}


@pytest.fixture
def served() -> Iterator[tuple[CommandServer, Blocking]]:
    ctx = zmq.Context()
    handler = Blocking()
    srv = CommandServer(ctx, "tcp://127.0.0.1:*", handler)
    srv.start()
    try:
        yield srv, handler
    finally:
        handler.release.set()
        srv.stop()
        ctx.term()


def test_safety_commands_are_answered_while_the_worker_is_busy(
    served: tuple[CommandServer, Blocking],
) -> None:
    srv, handler = served
    result: dict[str, Any] = {}

    def slow_client() -> None:
        with CommandClient(srv.endpoint, timeout=GENEROUS_S) as c:
            result["describe"] = c.request("describe")

    t = threading.Thread(target=slow_client)
    t.start()
    assert handler.entered.wait(GENEROUS_S)
    with CommandClient(srv.endpoint, timeout=GENEROUS_S) as c:
        for cmd in ("estop", "status", "stop"):
            reply = c.request(cmd)
            assert reply["cmd"] == cmd and reply["ok"]
        # With its reason, an estop is still a small frame: the lane decodes it.
        assert c.request("estop", {"reason": "x" * 200})["ok"]
        assert not handler.release.is_set() and "describe" not in result  # still blocked
    handler.release.set()
    t.join(GENEROUS_S)
    assert result["describe"]["ok"]
    assert srv.lane_requests == 4


def test_a_full_worker_queue_is_answered_busy_and_the_lane_still_works(
    served: tuple[CommandServer, Blocking],
) -> None:
    srv, handler = served
    ctx = zmq.Context.instance()
    dealer = ctx.socket(zmq.DEALER)
    dealer.linger = 0
    dealer.connect(srv.endpoint)
    try:
        import msgpack

        def send(cmd: str, rid: int) -> None:
            dealer.send_multipart([b"", msgpack.packb({"cmd": cmd, "id": rid})])

        send("describe", 0)  # blocks the worker
        assert handler.entered.wait(GENEROUS_S)
        for i in range(1, WORKER_QUEUE + 4):
            send("arm", i)  # queued until the queue is full, then busy
        send("estop", 999)
        replies: dict[int, dict[str, Any]] = {}

        def got_busy_and_estop() -> bool:
            while dealer.poll(0):
                _, body = dealer.recv_multipart()
                r = msgpack.unpackb(body)
                replies[r["id"]] = r
            return 999 in replies and sum(r.get("error") == "busy" for r in replies.values()) >= 3

        assert wait_until(got_busy_and_estop), replies
        assert replies[999]["ok"] and srv.busy >= 3
        busy = next(r for r in replies.values() if r.get("error") == "busy")
        assert "estop, stop and status are always answered" in busy["message"]
        handler.release.set()
        # Every queued request is answered in the end: 1 describe + the queued arms.
        assert wait_until(lambda: got_busy_and_estop() and len(replies) == WORKER_QUEUE + 5)
        assert all(r["ok"] for i, r in replies.items() if r.get("error") != "busy")
    finally:
        dealer.close()
