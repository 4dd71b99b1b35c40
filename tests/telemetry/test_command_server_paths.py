"""The command server's own paths that no client request of the fuzz reaches: the size
boundaries of a frame (lane / worker / refused), a handler that fails or answers something that
cannot be sent, the counters, the id limits, and a bind that fails. Each reply is checked whole
(code, message and id), written out here rather than taken from the server's constants."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import zmq

from daq.commands import ClientIdentity, CommandError, CommandServer
from tests.conditions import GENEROUS_S, wait_until


class Handler:
    """Answers `status`/`describe`; `params` answers whatever `self.answer` holds or raises it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], str]] = []
        self.answer: Any = {}

    def __call__(self, cmd: str, args: dict[str, Any], who: ClientIdentity) -> Any:
        self.calls.append((cmd, args, threading.current_thread().name))
        if cmd == "params":
            if isinstance(self.answer, BaseException):
                raise self.answer
            return self.answer
        return {"cmd": cmd}


@pytest.fixture
def served() -> Iterator[tuple[CommandServer, Handler, zmq.Context]]:
    ctx = zmq.Context()
    handler = Handler()
    srv = CommandServer(ctx, "inproc://server-paths", handler)
    srv.start()
    try:
        yield srv, handler, ctx
    finally:
        srv.stop()
        ctx.destroy(linger=0)


def send(ctx: zmq.Context, endpoint: str, frames: list[bytes], req: bool = True) -> Any:
    sock = ctx.socket(zmq.REQ if req else zmq.DEALER)
    sock.linger = 0
    sock.connect(endpoint)
    try:
        sock.send_multipart(frames if req else [b"", *frames])
        assert sock.poll(20_000), "no reply from the command server"
        got = sock.recv_multipart()
        return msgpack.unpackb(got[-1], raw=False)
    finally:
        sock.close()


def padded_status(size: int, rid: Any = "pad") -> bytes:
    """A valid `status` request of exactly `size` bytes (the padding is in `args.x`, a bin)."""
    base = msgpack.packb({"cmd": "status", "id": rid, "args": {"x": b""}})
    for pad in range(size - len(base) - 4, size - len(base) + 1):
        body = msgpack.packb({"cmd": "status", "id": rid, "args": {"x": b"\0" * max(pad, 0)}})
        if len(body) == size:
            return body
    raise AssertionError(f"cannot make a request of {size} bytes")


@pytest.mark.parametrize(
    ("size", "lane"),
    [(4096, True), (4097, False)],  # LANE_MAX_BYTES = 4096, written out
)
def test_a_lane_command_up_to_4096_bytes_is_answered_on_the_receiving_thread(
    served: tuple[CommandServer, Handler, zmq.Context], size: int, lane: bool
) -> None:
    srv, _, ctx = served
    reply = send(ctx, srv.endpoint, [padded_status(size)])
    # `x` is no argument of `status`: refused by the schema on whichever thread decodes it.
    assert reply == {
        "ok": False,
        "error": "bad_args",
        "message": "status: unknown argument 'x' (allowed: none)",
        "id": "pad",
    }
    assert srv.lane_requests == (1 if lane else 0)
    assert srv.requests == 1 and srv.errors == 1


def test_lane_replies_come_from_the_receiving_thread(
    served: tuple[CommandServer, Handler, zmq.Context],
) -> None:
    srv, handler, ctx = served
    assert send(ctx, srv.endpoint, [msgpack.packb({"cmd": "status"})]) == {
        "ok": True,
        "cmd": "status",
    }
    assert send(ctx, srv.endpoint, [msgpack.packb({"cmd": "describe"})]) == {
        "ok": True,
        "cmd": "describe",
    }
    assert [(c, t) for c, _, t in handler.calls] == [
        ("status", "rig-commands"),
        ("describe", "rig-commands-worker"),
    ]
    assert srv.lane_requests == 1 and srv.requests == 2 and srv.errors == 0


@pytest.mark.parametrize(("size", "refused"), [(1 << 20, False), ((1 << 20) + 1, True)])
def test_a_frame_over_one_mebibyte_is_refused_by_its_length(
    served: tuple[CommandServer, Handler, zmq.Context], size: int, refused: bool
) -> None:
    srv, handler, ctx = served
    reply = send(ctx, srv.endpoint, [b"\xc1" * size])  # 0xc1: never valid msgpack
    if refused:
        assert reply == {
            "ok": False,
            "error": "too_large",
            "message": f"request of {size} bytes exceeds 1048576",
        }
    else:
        assert reply["ok"] is False and reply["error"] == "bad_msgpack", reply
    assert handler.calls == [] and srv.errors == 1


def test_a_dealer_without_an_empty_delimiter_is_answered(
    served: tuple[CommandServer, Handler, zmq.Context],
) -> None:
    srv, _, ctx = served
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(srv.endpoint)
    try:
        sock.send(msgpack.packb({"cmd": "status", "id": 7}))  # [identity, body] at the ROUTER
        assert sock.poll(20_000)
        got = sock.recv_multipart()
        assert len(got) == 1 and msgpack.unpackb(got[0]) == {"ok": True, "cmd": "status", "id": 7}
        sock.send_multipart([b"", b"a", b"b"])  # two body frames after the delimiter
        assert sock.poll(20_000)
        got = sock.recv_multipart()
        assert got[0] == b"" and msgpack.unpackb(got[1]) == {
            "ok": False,
            "error": "bad_frame",
            "message": "expected one request frame after the envelope, got 2",
        }
    finally:
        sock.close()


@pytest.mark.parametrize(
    ("answer", "reply"),
    [
        (
            ValueError("boom"),
            {"ok": False, "error": "internal", "message": "params failed: ValueError: boom"},
        ),
        (
            CommandError("rejected", "not now"),
            {"ok": False, "error": "rejected", "message": "not now"},
        ),
        (
            ["not", "a", "map"],
            {"ok": False, "error": "internal", "message": "params: the handler returned no map"},
        ),
        (
            {"values": {1, 2}},  # a set: msgpack cannot encode it
            {
                "ok": False,
                "error": "internal",
                "message": "the reply could not be encoded: can not serialize 'set' object",
            },
        ),
        ({"values": [1, 2]}, {"ok": True, "values": [1, 2]}),
    ],
)
def test_what_the_handler_answers_or_raises_becomes_the_reply_with_its_id(
    served: tuple[CommandServer, Handler, zmq.Context], answer: Any, reply: dict[str, Any]
) -> None:
    srv, handler, ctx = served
    handler.answer = answer
    got = send(ctx, srv.endpoint, [msgpack.packb({"cmd": "params", "id": "r-9"})])
    assert got == {**reply, "id": "r-9"}
    assert srv.requests == 1 and srv.errors == (0 if reply["ok"] else 1)
    handler.answer = {}
    assert send(ctx, srv.endpoint, [msgpack.packb({"cmd": "params"})]) == {"ok": True}
    assert srv.requests == 2 and srv.errors == (0 if reply["ok"] else 1)


@pytest.mark.parametrize("rid", [-(2**63), 2**64 - 1, "", "é" * 64])
def test_id_limits_are_accepted_and_echoed(
    served: tuple[CommandServer, Handler, zmq.Context], rid: Any
) -> None:
    """The extremes msgpack can carry (an integer outside them cannot be sent at all)."""
    srv, _, ctx = served
    got = send(ctx, srv.endpoint, [msgpack.packb({"cmd": "status", "id": rid})])
    assert got == {"ok": True, "cmd": "status", "id": rid}


def test_a_bind_that_fails_raises_oserror_naming_the_endpoint() -> None:
    ctx = zmq.Context()
    try:
        first = CommandServer(ctx, "inproc://taken", Handler())
        first.start()
        try:
            second = CommandServer(ctx, "inproc://taken", Handler())
            with pytest.raises(OSError, match="command server: cannot bind inproc://taken"):
                second.start()
        finally:
            first.stop()
    finally:
        ctx.destroy(linger=0)


def test_a_stopped_curve_server_releases_the_contexts_authenticator(tmp_path) -> None:
    """Stopping releases the ZAP handler, so the context may serve another key set later."""
    from daq.security import CurveConfig, generate_client_key

    keys_a, keys_b = tmp_path / "a", tmp_path / "b"
    generate_client_key(keys_a, "ops", "controller")
    generate_client_key(keys_b, "view", "monitor")
    ctx = zmq.Context()
    try:
        first = CommandServer(
            ctx, "tcp://127.0.0.1:*", Handler(), auth=CurveConfig.from_keys_dir(keys_a)
        )
        first.start()
        first.stop()
        second = CommandServer(
            ctx, "tcp://127.0.0.1:*", Handler(), auth=CurveConfig.from_keys_dir(keys_b)
        )

        # The stopped ZAP handler unbinds its inproc endpoint asynchronously: wait until the
        # endpoint is free, then another configuration must start (it is refused,
        # SecurityError, while the first one is still held).
        assert wait_until(lambda: _zap_free(ctx), GENEROUS_S)
        second.start()
        second.stop()
    finally:
        ctx.destroy(linger=0)


def _zap_free(ctx: zmq.Context) -> bool:
    """The context's ZAP endpoint is free (a probe binds it): no authenticator holds it."""
    probe = ctx.socket(zmq.REP)
    try:
        probe.bind("inproc://zeromq.zap.01")
    except zmq.ZMQError:
        probe.close(linger=0)
        return False
    probe.unbind("inproc://zeromq.zap.01")  # at once (a close frees it later)
    probe.close(linger=0)
    return True


def test_a_curve_server_whose_bind_fails_releases_the_contexts_authenticator(tmp_path) -> None:
    """A start that fails at the bind holds nothing: not the socket, not the ZAP handler, so
    the context may serve another key set next."""
    from daq.security import CurveConfig, generate_client_key

    keys_a, keys_b = tmp_path / "a", tmp_path / "b"
    generate_client_key(keys_a, "ops", "controller")
    generate_client_key(keys_b, "view", "monitor")
    ctx = zmq.Context()
    blocker = ctx.socket(zmq.REP)
    blocker.linger = 0
    try:
        port = blocker.bind_to_random_port("tcp://127.0.0.1")
        first = CommandServer(
            ctx, f"tcp://127.0.0.1:{port}", Handler(), auth=CurveConfig.from_keys_dir(keys_a)
        )
        with pytest.raises(OSError, match="cannot bind"):
            first.start()
        assert wait_until(lambda: _zap_free(ctx), GENEROUS_S)
        second = CommandServer(
            ctx, "tcp://127.0.0.1:*", Handler(), auth=CurveConfig.from_keys_dir(keys_b)
        )
        second.start()
        second.stop()
    finally:
        blocker.close()
        ctx.destroy(linger=0)


def test_the_worker_queue_holds_requests_behind_a_long_one_and_answers_them_all() -> None:
    """Requests behind a long one wait (they are few and small), none is refused `busy`; the
    busy refusal names both bounds."""
    release, entered = threading.Event(), threading.Event()

    def slow(cmd: str, args: dict[str, Any], who: ClientIdentity) -> dict[str, Any]:
        if cmd == "describe" and not entered.is_set():
            entered.set()
            assert release.wait(60)
        return {"cmd": cmd}

    ctx = zmq.Context()
    srv = CommandServer(ctx, "inproc://queued", slow)
    srv.start()
    socks = []
    try:
        for k in range(6):
            sock = ctx.socket(zmq.DEALER)
            sock.linger = 0
            sock.connect(srv.endpoint)
            sock.send_multipart([b"", msgpack.packb({"cmd": "describe", "id": k})])
            socks.append(sock)
            if k == 0:
                assert entered.wait(20)
        release.set()
        for k, sock in enumerate(socks):
            assert sock.poll(20_000), f"request {k} unanswered"
            assert msgpack.unpackb(sock.recv_multipart()[-1]) == {
                "ok": True,
                "cmd": "describe",
                "id": k,
            }
        assert srv.busy == 0 and srv._queued_bytes == 0
    finally:
        for sock in socks:
            sock.close()
        srv.stop()
        ctx.destroy(linger=0)


def test_the_busy_reply_names_both_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    from daq.commands import server as server_mod

    monkeypatch.setattr(server_mod, "WORKER_QUEUE", 0)  # the queue is full from the start
    ctx = zmq.Context()
    srv = CommandServer(ctx, "inproc://busy", Handler())
    try:
        srv.start()
        monkeypatch.setattr(srv, "_queue", server_mod.queue.Queue(1))
        srv._queue.put_nowait(None)  # never taken: the worker is stopped below
        got = send(ctx, srv.endpoint, [msgpack.packb({"cmd": "describe", "id": "b1"})])
        assert got == {
            "ok": False,
            "error": "busy",
            "message": "the service's queue is full (0 requests or 4 MiB waiting); try again "
            "(estop, stop and status are always answered)",
            "id": "b1",
        }
        assert srv.busy == 1
    finally:
        srv.stop()
        ctx.destroy(linger=0)


def test_the_worker_survives_a_request_it_fails_to_answer(
    served: tuple[CommandServer, Handler, zmq.Context], caplog: pytest.LogCaptureFixture
) -> None:
    srv, _, ctx = served
    real = srv._answer
    failed: list[int] = []

    def once(body: list[bytes], frame: Any, request: Any) -> bytes:
        if not failed:
            failed.append(1)
            raise RuntimeError("lost")
        return real(body, frame, request)

    srv._answer = once  # type: ignore[method-assign]
    lost = ctx.socket(zmq.DEALER)
    lost.linger = 0
    lost.connect(srv.endpoint)
    lost.send_multipart([b"", msgpack.packb({"cmd": "describe"})])  # unanswered: logged
    try:
        assert send(ctx, srv.endpoint, [msgpack.packb({"cmd": "describe"})]) == {
            "ok": True,
            "cmd": "describe",
        }
    finally:
        lost.close()
    assert failed == [1]
    assert any("failed to answer a request" in r.getMessage() for r in caplog.records)


def test_bytes_in_a_reply_stay_bytes(served: tuple[CommandServer, Handler, zmq.Context]) -> None:
    srv, handler, ctx = served
    handler.answer = {"blob": b"\x00\xff", "text": "é"}
    got = send(ctx, srv.endpoint, [msgpack.packb({"cmd": "params"})])
    assert got == {"ok": True, "blob": b"\x00\xff", "text": "é"}


def test_a_receive_error_ends_the_serving_thread_with_a_log_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The context terminated under the server: its thread logs and ends, nothing raised."""

    class DeadPoller:
        def register(self, *a: object) -> None:
            pass

        def poll(self, timeout: int) -> list:
            raise zmq.ZMQError(zmq.ETERM)

    ctx = zmq.Context()
    srv = CommandServer(ctx, "inproc://dead", Handler())
    monkeypatch.setattr("daq.commands.server.zmq.Poller", DeadPoller)
    try:
        srv.start()
        assert srv._thread is not None
        srv._thread.join(20)
        assert not srv._thread.is_alive()
        assert any("receive failed" in r.getMessage() for r in caplog.records)
    finally:
        srv.stop()
        ctx.destroy(linger=0)


def test_a_client_gone_before_its_reply_does_not_stop_the_server() -> None:
    """The reply to a client that disconnected is dropped; the next client is served."""
    release, entered = threading.Event(), threading.Event()

    def slow(cmd: str, args: dict[str, Any], who: ClientIdentity) -> dict[str, Any]:
        if cmd == "describe" and not entered.is_set():
            entered.set()
            assert release.wait(60)
        return {"cmd": cmd}

    ctx = zmq.Context()
    srv = CommandServer(ctx, "tcp://127.0.0.1:*", slow)
    srv.start()
    try:
        gone = ctx.socket(zmq.DEALER)
        gone.linger = 0
        gone.connect(srv.endpoint)
        gone.send_multipart([b"", msgpack.packb({"cmd": "describe"})])
        assert entered.wait(20)
        gone.close()
        # Lane round trips while the worker is held: the server's I/O thread has seen the
        # disconnect by the time the held reply is sent (no sleep: traffic it has served).
        for _ in range(20):
            assert send(ctx, srv.endpoint, [msgpack.packb({"cmd": "status"})])["ok"]
        release.set()
        assert wait_until(lambda: srv.requests == 21, GENEROUS_S)  # its reply went nowhere
        for cmd in ("describe", "status"):  # the worker lane and the safety lane
            assert send(ctx, srv.endpoint, [msgpack.packb({"cmd": cmd})]) == {
                "ok": True,
                "cmd": cmd,
            }
    finally:
        srv.stop()
        ctx.destroy(linger=0)


def test_a_client_identity_cannot_be_changed_by_a_handler() -> None:
    """`LOCAL` is shared by every unauthenticated request: a handler that could rewrite its
    role would change who every later request is."""
    import dataclasses

    from daq.commands.server import LOCAL

    with pytest.raises(dataclasses.FrozenInstanceError):
        LOCAL.role = "monitor"  # type: ignore[misc]
    assert LOCAL == ClientIdentity("local", "controller", False)


def test_a_worker_reply_cut_off_by_the_context_ending_raises_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server stopped and its context terminated while the worker still held a request:
    the worker's reply fails (ETERM) and it ends quietly, no exception escapes its thread."""
    escaped: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda a: escaped.append(a.exc_value))
    release, entered = threading.Event(), threading.Event()

    def slow(cmd: str, args: dict[str, Any], who: ClientIdentity) -> dict[str, Any]:
        entered.set()
        assert release.wait(60)
        return {"cmd": cmd}

    ctx = zmq.Context()
    srv = CommandServer(ctx, "inproc://cut-off", slow)
    srv.start()
    client = ctx.socket(zmq.DEALER)
    client.linger = 0
    client.connect(srv.endpoint)
    client.send_multipart([b"", msgpack.packb({"cmd": "describe"})])
    assert entered.wait(20)
    worker = srv._worker
    client.close()
    srv.stop()  # the worker is inside the handler: it is left to finish
    release.set()
    ctx.term()  # returns once the worker's reply socket is closed
    assert worker is not None
    worker.join(20)
    assert not worker.is_alive() and escaped == []


def test_the_receiving_thread_survives_a_message_it_fails_to_handle(
    served: tuple[CommandServer, Handler, zmq.Context], caplog: pytest.LogCaptureFixture
) -> None:
    srv, _, ctx = served
    real = srv._receive
    failed: list[int] = []

    def once(sock: zmq.Socket, frames: list[zmq.Frame]) -> None:
        if not failed:
            failed.append(1)
            raise RuntimeError("lost")
        real(sock, frames)

    srv._receive = once  # type: ignore[method-assign]
    lost = ctx.socket(zmq.DEALER)
    lost.linger = 0
    lost.connect(srv.endpoint)
    lost.send_multipart([b"", msgpack.packb({"cmd": "status"})])  # unanswered: logged
    try:
        assert wait_until(lambda: failed == [1], GENEROUS_S)
        assert send(ctx, srv.endpoint, [msgpack.packb({"cmd": "status"})]) == {
            "ok": True,
            "cmd": "status",
        }
    finally:
        lost.close()
    assert any("failed to answer a request" in r.getMessage() for r in caplog.records)


def test_the_worker_queue_holds_at_most_four_mebibytes_of_requests() -> None:
    """Behind a held request, four 1 MiB requests fill the byte bound exactly; the fifth is
    answered `busy` at once although the queue has room for 32."""
    release, entered = threading.Event(), threading.Event()

    def slow(cmd: str, args: dict[str, Any], who: ClientIdentity) -> dict[str, Any]:
        entered.set()
        assert release.wait(60)
        return {"cmd": cmd}

    ctx = zmq.Context()
    srv = CommandServer(ctx, "inproc://bytes-bound", slow)
    srv.start()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(srv.endpoint)
    try:
        sock.send_multipart([b"", msgpack.packb({"cmd": "describe"})])
        assert entered.wait(20)
        for _ in range(5):
            sock.send_multipart([b"", b"\xc1" * (1 << 20)])  # undecoded until the worker
        assert sock.poll(20_000)
        first = msgpack.unpackb(sock.recv_multipart()[-1])
        assert first["error"] == "busy" and srv.busy == 1
        release.set()
        codes = []
        for _ in range(5):
            assert sock.poll(20_000)
            codes.append(msgpack.unpackb(sock.recv_multipart()[-1]).get("error"))
        assert codes == [None, "bad_msgpack", "bad_msgpack", "bad_msgpack", "bad_msgpack"]
        assert srv._queued_bytes == 0
    finally:
        release.set()
        sock.close()
        srv.stop()
        ctx.destroy(linger=0)


def test_a_start_refused_by_the_authenticator_leaves_no_socket(tmp_path) -> None:
    """Two key sets on one context are refused; the refused server holds no socket (an open
    one would be reported unclosed when collected, and kept the context from terminating)."""
    import gc
    import warnings

    from daq.security import CurveConfig, SecurityError, generate_client_key

    keys_a, keys_b = tmp_path / "a", tmp_path / "b"
    generate_client_key(keys_a, "ops", "controller")
    generate_client_key(keys_b, "view", "monitor")
    ctx = zmq.Context()
    first = CommandServer(
        ctx, "tcp://127.0.0.1:*", Handler(), auth=CurveConfig.from_keys_dir(keys_a)
    )
    first.start()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            second = CommandServer(
                ctx, "tcp://127.0.0.1:*", Handler(), auth=CurveConfig.from_keys_dir(keys_b)
            )
            with pytest.raises(SecurityError, match="two different CURVE configurations"):
                second.start()
            del second
            gc.collect()
        assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    finally:
        first.stop()
        ctx.destroy(linger=0)


def test_stop_returns_once_the_receiving_thread_has_ended() -> None:
    """The sockets are closed after the thread that owns them has ended (a ZeroMQ socket
    belongs to one thread)."""
    ctx = zmq.Context()
    srv = CommandServer(ctx, "inproc://joined", Handler())
    srv.start()
    thread = srv._thread
    assert thread is not None and thread.is_alive()
    srv.stop()
    try:
        assert not thread.is_alive() and srv._thread is None
    finally:
        ctx.destroy(linger=0)


def test_a_request_still_queued_when_the_server_stops_is_never_handled() -> None:
    """`stop()` while the worker is inside a long request and another waits behind it: once
    the long one is over (here its answer fails, so no reply is left to send) the worker
    ends — the waiting request (an `arm`, say) must not reach the rig after the service said
    it stopped."""
    release, entered = threading.Event(), threading.Event()
    answered: list[Any] = []

    ctx = zmq.Context()
    srv = CommandServer(ctx, "inproc://queued-at-stop", lambda cmd, args, who: {"cmd": cmd})

    def long_then_failing(body: list[bytes], frame: Any, request: Any) -> bytes:
        answered.append(request.get("id"))
        if len(answered) == 1:
            entered.set()
            assert release.wait(60)
        raise RuntimeError("lost")  # no reply to send: the worker goes on to its queue

    srv._answer = long_then_failing  # type: ignore[method-assign]
    srv.start()
    client = ctx.socket(zmq.DEALER)
    client.linger = 0
    client.connect(srv.endpoint)
    try:
        client.send_multipart([b"", msgpack.packb({"cmd": "describe", "id": 0})])
        assert entered.wait(20)
        client.send_multipart([b"", msgpack.packb({"cmd": "describe", "id": 1})])
        assert wait_until(lambda: srv._queued_bytes > 0, GENEROUS_S)
        worker = srv._worker
        assert worker is not None
        srv.stop()  # the worker is inside the long request: it is left to finish
        release.set()
        assert wait_until(lambda: not worker.is_alive() or len(answered) > 1, GENEROUS_S)
        assert answered == [0] and not worker.is_alive()
    finally:
        release.set()
        client.close()
        ctx.destroy(linger=0)
