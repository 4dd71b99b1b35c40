"""The command socket: a ZeroMQ ROUTER that answers msgpack requests on two threads.

Why ROUTER rather than REP: a REP socket enforces strict send/receive alternation and silently
discards malformed envelopes, so a hostile or broken client could wedge it or go unanswered;
ROUTER lets the server answer *every* message it can route (including multi-frame garbage), and
serves REQ clients (the usual case) and DEALER clients alike. The real-time loop never sees the
socket.

Two lanes, so that no request can make an e-stop wait:
- the **safety lane** is the receiving thread (`rig-commands`) itself: it owns the socket,
  decodes every frame of at most `LANE_MAX_BYTES` (a safety command is a few dozen bytes) and
  answers the commands marked `lane` in `daq.commands.spec` (`estop`, `stop`, `status`) at once,
  in arrival order. Their handlers only post to the loop's mailbox or read shared memory;
- every other request (and every larger frame, undecoded) goes to the **worker lane**
  (`rig-commands-worker`) through a queue of at most `WORKER_QUEUE` requests; a request that
  finds it full is answered `busy` at once. The worker's replies come back to the receiving
  thread over an inproc socket (a ZeroMQ socket belongs to one thread), which sends them.
A request that runs long in the worker (an experiment's limit check, a recorder's fsync)
therefore delays other worker requests, never the lane. Replies of the two lanes may overtake
each other: a DEALER client that pipelines matches them by `id` (a REQ client has one request
in flight anyway).

Order of checks (each failure is an error reply, and the handler is not called):
frame shape → size → nesting depth, map/array lengths and object count (on the raw bytes,
`daq.commands.bounds`) → msgpack → request shape → known command → role → argument types.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import zmq

from daq.commands.bounds import MAX_ARRAY_LEN, MAX_MAP_LEN, check_shape
from daq.commands.errors import CommandError
from daq.commands.spec import COMMANDS, LANE, validate
from daq.security import CurveConfig, acquire_authenticator, check_bind, release_authenticator

log = logging.getLogger(__name__)

#: Largest request frame accepted (an experiment file is a few kB).
MAX_REQUEST_BYTES = 1 << 20
#: Larger messages are not even received: libzmq drops the connection that sends one (no
#: reply; the frame is never buffered whole). Between the two the answer is `too_large`.
MAX_MESSAGE_BYTES = 4 * MAX_REQUEST_BYTES
#: Requests libzmq reads ahead per client connection before it stops reading it (TCP
#: back-pressure then holds the rest in the client's kernel buffers): with MAX_MESSAGE_BYTES,
#: what one client can make the service hold is ≤ 4 × 4 MiB, not 100 × 4 MiB.
REQUESTS_QUEUED = 4
_POLL_MS = 50
#: Frames up to this size are decoded on the receiving thread (a safety command is ~50 bytes;
#: larger frames are decoded by the worker, so a 1 MB request never delays the lane).
LANE_MAX_BYTES = 4096
#: Requests waiting for the worker; more are answered `busy` (bounded memory, prompt answers).
WORKER_QUEUE = 32
#: … and the bytes they may hold together (a request that would pass it waits only if the
#: queue is empty): 32 requests of MAX_REQUEST_BYTES would otherwise hold 32 MiB.
WORKER_QUEUE_BYTES = 4 * MAX_REQUEST_BYTES
_instances = itertools.count()


@dataclass(frozen=True)
class ClientIdentity:
    """Who sent a request. Without CURVE every (loopback) client is a controller named 'local'."""

    name: str
    role: str  # "controller" | "monitor"
    authenticated: bool


LOCAL = ClientIdentity("local", "controller", False)

Handler = Callable[[str, dict[str, Any], ClientIdentity], dict[str, Any]]


class DuplicateKey(ValueError):
    """A msgpack map in the request holds the same key twice."""


def _map_without_duplicates(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """msgpack's `object_pairs_hook`: a plain dict would keep the last of two equal keys and
    silently drop the first (which of `{p: 1, p: 1e6}` did the sender mean?); refuse instead."""
    out: dict[Any, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKey(f"duplicate map key {str(k)[:64]!r} in the request")
        out[k] = v
    return out


def _error(code: str, message: str) -> dict[str, Any]:
    return {"ok": False, "error": code, "message": message}


class CommandServer:
    def __init__(
        self,
        ctx: zmq.Context,
        endpoint: str,
        handler: Handler,
        *,
        auth: CurveConfig | None = None,
    ) -> None:
        self.ctx = ctx
        self.endpoint = endpoint
        self.handler = handler
        self.auth = auth
        self.requests = 0
        self.errors = 0
        #: Requests answered on the safety lane / refused because the worker's queue was full.
        self.lane_requests = 0
        self.busy = 0
        self._queued_bytes = 0  # the worker queue's request bytes (WORKER_QUEUE_BYTES)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._worker: threading.Thread | None = None
        self._sock: zmq.Socket | None = None
        self._replies: zmq.Socket | None = None
        self._queue: queue.Queue[tuple[list[bytes], list[bytes], Any] | None] = queue.Queue(
            WORKER_QUEUE
        )
        self._reply_endpoint = f"inproc://rig-commands-replies-{id(self)}-{next(_instances)}"
        self._count_lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Bind (in the caller's thread, so bind errors raise here) and start serving."""
        check_bind(self.endpoint, self.auth, "command server")
        sock = self.ctx.socket(zmq.ROUTER)
        sock.linger = 0
        sock.router_mandatory = False  # a client that went away just loses its reply
        sock.rcvhwm = REQUESTS_QUEUED
        sock.sndhwm = 100
        sock.maxmsgsize = MAX_MESSAGE_BYTES
        if self.auth is not None:
            try:
                acquire_authenticator(self.ctx, self.auth)
            except BaseException:
                sock.close()  # a start that fails holds nothing
                raise
            self.auth.apply_server(sock)
        try:
            sock.bind(self.endpoint)
        except zmq.ZMQError as e:
            sock.close()
            if self.auth is not None:
                release_authenticator(self.ctx)
            raise OSError(f"command server: cannot bind {self.endpoint}: {e}") from e
        self.endpoint = sock.last_endpoint.decode()
        self._sock = sock
        replies = self.ctx.socket(zmq.PULL)
        replies.linger = 0
        replies.bind(self._reply_endpoint)
        self._replies = replies
        self._stop.clear()
        self._queue = queue.Queue(WORKER_QUEUE)
        self._queued_bytes = 0
        self._worker = threading.Thread(target=self._work, name="rig-commands-worker", daemon=True)
        self._worker.start()
        self._thread = threading.Thread(target=self._run, name="rig-commands", daemon=True)
        self._thread.start()
        log.info("command server on %s (%s)", self.endpoint, "CURVE" if self.auth else "open")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._worker is not None:
            # The worker may be inside a long handler: it is a daemon, and finds the stop flag
            # when that returns (its reply then goes nowhere).
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                pass
            self._worker.join(1.0)
            self._worker = None
        if self._replies is not None:
            self._replies.close(linger=0)
            self._replies = None
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None
            if self.auth is not None:
                release_authenticator(self.ctx)

    # ------------------------------------------------------------------ serving

    def _run(self) -> None:
        """The receiving thread: the socket, the safety lane, and the worker's replies."""
        sock, replies = self._sock, self._replies
        assert sock is not None and replies is not None
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(replies, zmq.POLLIN)
        while not self._stop.is_set():
            try:
                ready = dict(poller.poll(_POLL_MS))
                if replies in ready:  # the worker's answers first: they have waited longest
                    while replies.poll(0):
                        sock.send_multipart(replies.recv_multipart())
                if sock not in ready:
                    continue
                frames = sock.recv_multipart(copy=False)
            except zmq.ZMQError as e:  # context terminated under us
                log.error("command server: receive failed: %s", e)
                return
            try:
                self._receive(sock, frames)
            except Exception:  # the server must survive anything a client sends
                log.exception("command server: failed to answer a request")

    def _receive(self, sock: zmq.Socket, frames: list[zmq.Frame]) -> None:
        """Answer a lane command (or a request refused before any handler) here, at once;
        hand the rest to the worker."""
        # [identity, (empty delimiter: REQ), body] from REQ; [identity, body] from DEALER.
        raw = [f.bytes for f in frames]
        try:
            delim = raw.index(b"", 1)
            envelope, body = raw[: delim + 1], raw[delim + 1 :]
        except ValueError:
            envelope, body = raw[:1], raw[1:]
        if not envelope:
            return
        request: Any = None
        if len(body) == 1 and len(body[0]) > MAX_REQUEST_BYTES:
            # Refused by its length alone, here: a too-large frame never waits in the queue.
            e = CommandError(
                "too_large", f"request of {len(body[0])} bytes exceeds {MAX_REQUEST_BYTES}"
            )
            sock.send_multipart([*envelope, self._finish(e.reply(), None)])
            return
        if len(body) == 1 and len(body[0]) <= LANE_MAX_BYTES:
            try:
                request = self._decode(body[0])
            except CommandError as e:  # malformed: answered here, it costs no more to do so
                sock.send_multipart([*envelope, self._finish(e.reply(), None)])
                return
            if request["cmd"] in LANE:
                with self._count_lock:
                    self.lane_requests += 1
                sock.send_multipart([*envelope, self._answer(body, frames[-1], request)])
                return
        size = sum(len(b) for b in body)
        try:
            with self._count_lock:
                if self._queued_bytes + size > WORKER_QUEUE_BYTES and not self._queue.empty():
                    raise queue.Full
                self._queue.put_nowait((envelope, body, (frames[-1], request)))
                self._queued_bytes += size
        except queue.Full:
            with self._count_lock:
                self.busy += 1
            rid = request.get("id") if isinstance(request, dict) else None
            busy = _error(
                "busy",
                f"the service's queue is full ({WORKER_QUEUE} requests or "
                f"{WORKER_QUEUE_BYTES >> 20} MiB waiting); try again "
                "(estop, stop and status are always answered)",
            )
            sock.send_multipart([*envelope, self._finish(busy, rid)])

    def _work(self) -> None:
        """The worker lane: requests other than the safety lane's, one at a time."""
        push = self.ctx.socket(zmq.PUSH)
        push.linger = 0
        push.connect(self._reply_endpoint)
        try:
            while True:
                item = self._queue.get()
                if item is None or self._stop.is_set():
                    return
                envelope, body, (frame, request) = item
                with self._count_lock:
                    self._queued_bytes -= sum(len(b) for b in body)
                try:
                    reply = self._answer(body, frame, request)
                except Exception:
                    log.exception("command server: failed to answer a request")
                    continue
                try:
                    push.send_multipart([*envelope, reply])
                except zmq.ZMQError:  # the server stopped while this request was handled
                    return
        finally:
            push.close(linger=0)

    def _answer(self, body: list[bytes], frame: zmq.Frame, request: Any) -> bytes:
        """The packed reply to one request (`request`: already decoded, or None)."""
        request_id: Any = None
        try:
            if len(body) != 1:
                raise CommandError(
                    "bad_frame", f"expected one request frame after the envelope, got {len(body)}"
                )
            identity = self._identity(frame)
            if request is None:
                request = self._decode(body[0])
            request_id = request.get("id")
            reply = self._dispatch(request, identity)
        except CommandError as e:
            reply = e.reply()
        return self._finish(reply, request_id)

    def _finish(self, reply: dict[str, Any], request_id: Any) -> bytes:
        if request_id is not None:
            reply["id"] = request_id
        try:
            packed = msgpack.packb(reply, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as e:
            log.error("command server: reply cannot be encoded: %s", e)
            reply = _error("internal", f"the reply could not be encoded: {e}")
            if request_id is not None:
                reply["id"] = request_id
            packed = msgpack.packb(reply, use_bin_type=True)
        with self._count_lock:  # the reply sent: an unencodable one went out as an error
            self.requests += 1
            if not reply.get("ok"):
                self.errors += 1
        return packed

    def _identity(self, frame: zmq.Frame) -> ClientIdentity:
        if self.auth is None:
            return LOCAL
        user = frame.get("User-Id")
        role, _, name = str(user).partition(":")
        if role not in ("controller", "monitor"):  # cannot happen past the ZAP handler
            raise CommandError("forbidden", "unauthenticated connection")
        return ClientIdentity(name, role, True)

    @staticmethod
    def _decode(body: bytes) -> dict[str, Any]:
        if len(body) > MAX_REQUEST_BYTES:
            raise CommandError(
                "too_large", f"request of {len(body)} bytes exceeds {MAX_REQUEST_BYTES}"
            )
        check_shape(body)  # depth, map/array lengths, object count: before any decoding
        try:
            request = msgpack.unpackb(
                body,
                raw=False,
                strict_map_key=False,
                object_pairs_hook=_map_without_duplicates,
                max_map_len=MAX_MAP_LEN,
                max_array_len=MAX_ARRAY_LEN,
            )
        except DuplicateKey as e:
            raise CommandError("bad_request", str(e)) from None
        except Exception as e:  # msgpack raises many types (ExtraData, FormatError, …)
            raise CommandError("bad_msgpack", f"not one valid msgpack object: {e}") from e
        if not isinstance(request, dict):
            raise CommandError(
                "bad_request", f"a request is a map {{cmd, args}}, got {type(request).__name__}"
            )
        extra = [k for k in request if k not in ("cmd", "args", "id")]
        if extra:
            raise CommandError("bad_request", f"unknown request keys: {str(extra)[:200]}")
        if not isinstance(request.get("cmd"), str):
            raise CommandError("bad_request", "'cmd' must be a string")
        args = request.get("args", {})
        if not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
            raise CommandError("bad_request", "'args' must be a map with string keys")
        rid = request.get("id")
        if rid is not None and not (
            (isinstance(rid, int) and not isinstance(rid, bool) and -(2**63) <= rid < 2**64)
            or (isinstance(rid, str) and len(rid) <= 64)
        ):
            raise CommandError("bad_request", "'id' must be an integer or a string ≤ 64 chars")
        request["args"] = args
        return request

    def _dispatch(self, request: dict[str, Any], who: ClientIdentity) -> dict[str, Any]:
        cmd: str = request["cmd"]
        args: dict[str, Any] = request["args"]
        spec = COMMANDS.get(cmd)
        if spec is not None and who.role != "controller" and not spec.monitor_allowed:
            raise CommandError(
                "forbidden", f"'{cmd}' needs a controller key ({who.name} is a {who.role} key)"
            )
        validate(cmd, args)
        try:
            result = self.handler(cmd, args, who)
        except CommandError:
            raise
        except Exception as e:
            log.exception("command handler failed on '%s'", cmd)
            raise CommandError("internal", f"{cmd} failed: {type(e).__name__}: {e}") from e
        if not isinstance(result, dict):
            raise CommandError("internal", f"{cmd}: the handler returned no map")
        return {**result, "ok": True}
