"""Telemetry publisher: ring rows → batched msgpack messages on a ZeroMQ XPUB socket.

Runs on its own thread with its own `RingCursor`, so the loop's only cost is the ring write it
does anyway. Nothing here can stall the loop: `event()` is a deque append, sends use NOBLOCK.

Slow subscribers. The socket is an XPUB (wire-compatible with PUB) with `XPUB_NODROP` set, so a
send raises EAGAIN when *any* subscriber's queue is at its (small) high-water mark; we count that
batch as dropped and resend it in lossy mode, which delivers it to every subscriber that has room.
Net effect: a slow subscriber loses messages, fast ones see contiguous sequence numbers, and the
publishing side counts each time a subscriber's queue is found full (libzmq then skips that
subscriber without telling us until it reads again, so the count is of stall onsets). XPUB
also tells us when a subscriber joins, and we answer with `meta` at once, so a new client
never waits for the 1 s repeat.

After a stall of the publisher (its process stopped or starved while the loop, in its own
process, ran on) the backlog in the ring goes out in messages of several batches (`catch_up_rows`,
a whole ring in SNDHWM / 2 messages), so a subscriber that keeps up sees no gap after any stall
shorter than the ring. What subscribers send is bounded per connection by
`daq.telemetry.subscriptions` (rate, topics, size; a cut-off connection is really closed).

The publisher never dies while the service runs. Being lapped by the loop is normal under load:
the rows overwritten before it could copy them are counted (`lost_rows`, `lapped`) and it
carries on from the oldest intact row (a read may return no row at all; nothing is sent then).
Any other exception in its thread is logged with its traceback and the publisher restarts after
a pause that doubles with each failure in a row (`RESTART_MIN_S` … `RESTART_MAX_S`), skipping
(and counting as lost) the rows published meanwhile; `alive`, `restarts` and `last_error` in its
stats (the `telemetry` map of `status`) say so.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import zmq

from daq.ring import RingCursor, SampleRing
from daq.sample_layout import SampleLayout
from daq.security import CurveConfig, acquire_authenticator, check_bind, release_authenticator
from daq.telemetry.subscriptions import SubscriptionGuard
from daq.telemetry.wire import (
    PAYLOAD_DTYPE,
    SCHEMA_VERSION,
    TOPIC_EVENT,
    TOPIC_META,
    TOPIC_SAMPLES,
    TOPIC_STATUS,
    layout_id,
    pack,
)

log = logging.getLogger(__name__)

#: Messages queued per subscriber before it starts losing them (≈ 1 s of batches at 1 kHz/20).
SNDHWM = 50
#: A backlog of more than this many batches (the publisher was stalled: a stopped or starved
#: service process) goes out in messages of several batches, so that a whole ring fits in
#: half of a subscriber's queue (`catch_up_rows`): a subscriber that keeps up sees no gap after
#: any stall the ring outlasts, instead of losing what overflows SNDHWM in the burst.
CATCH_UP_BATCHES = 4
STATUS_INTERVAL = 1.0
META_INTERVAL = 1.0
EVENT_QUEUE = 1024
#: Pause before the first restart after an unexpected exception; doubled per failure in a row.
RESTART_MIN_S = 0.05
RESTART_MAX_S = 5.0
#: A publisher that has served this long since its last restart starts over at RESTART_MIN_S.
RESTART_RESET_S = 10.0


@dataclass
class TelemetryStats:
    batches_sent: int = 0
    rows_sent: int = 0
    #: Sample batches found undeliverable to some subscriber because its queue was full. libzmq
    #: then skips that subscriber silently until it reads again, so this counts stall onsets:
    #: a lower bound of what slow subscribers lost (each sees its exact loss as `seq` gaps).
    dropped_batches: int = 0
    #: Rows the publisher never saw because the loop lapped its cursor in the ring (or because
    #: they were published while it was restarting).
    lost_rows: int = 0
    #: Reads in which the publisher found rows overwritten (it carries on after each).
    lapped: int = 0
    events_sent: int = 0
    #: Events lost because the event queue was full (the publisher thread was starved).
    dropped_events: int = 0
    #: meta/event/status messages at least one subscriber did not get.
    dropped_other: int = 0
    #: True while the publisher thread serves; false before start, after stop, and while it
    #: waits to restart after a failure.
    alive: bool = False
    #: Restarts after an unexpected exception in the publisher thread (each one is logged).
    restarts: int = 0
    #: The last such exception, "Type: message".
    last_error: str | None = None
    #: Subscriber connections cut off for flooding (un)subscriptions or holding too many topics
    #: (`daq.telemetry.subscriptions`).
    flooders_cut_off: int = 0
    #: Of those, the ones libzmq has since closed (socket monitor: DISCONNECTED).
    flooders_closed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class TelemetryPublisher:
    def __init__(
        self,
        ctx: zmq.Context,
        endpoint: str,
        ring: SampleRing,
        layout: SampleLayout,
        *,
        rig_id: str,
        period: float,
        batch: int,
        status_fn: Callable[[], dict[str, Any]],
        meta_extra: dict[str, Any] | None = None,
        auth: CurveConfig | None = None,
    ) -> None:
        """`period`: the loop period in seconds (published in `meta`); `batch`: rows per
        samples message; `status_fn`: called on the publisher thread once a second, returns
        the status map (state, fault, timing, recorder …); `meta_extra`: merged into `meta`
        (joints, profile summary)."""
        if ring.width != layout.width:
            raise ValueError(f"ring width {ring.width} != layout width {layout.width}")
        if batch < 1 or batch > ring.capacity // 2:
            raise ValueError(f"batch must be in 1…{ring.capacity // 2}, got {batch}")
        if not period > 0:
            raise ValueError(f"period must be > 0, got {period}")
        self.ctx = ctx
        self.endpoint = endpoint
        self.ring = ring
        self.layout = layout
        self.rig_id = rig_id
        self.period = period
        self.batch = batch
        self.status_fn = status_fn
        self.auth = auth
        self.layout_id = layout_id(layout)
        #: Rows per message while catching up: a multiple of `batch`, so that the ring's
        #: capacity goes out in at most SNDHWM / 2 messages.
        per_message = -(-ring.capacity // batch // (SNDHWM // 2))
        self.catch_up_rows = batch * max(1, per_message)
        self._seq_col = layout.index("seq")
        self._t_col = layout.index("t")
        #: The `meta` message's header (the `describe` reply carries it too).
        self.meta: dict[str, Any] = {
            "v": SCHEMA_VERSION,
            "rig": rig_id,
            "layout_id": self.layout_id,
            "period": period,
            "width": layout.width,
            "columns": layout.to_dict(),
            "joints": [],
            "profile": {},
            **(meta_extra or {}),
        }
        self._meta = pack(self.meta)
        self.stats = TelemetryStats()
        # Poll often enough that a full batch waits at most a quarter of its span.
        self._wake_s = min(max(batch * period / 4, 5e-4), 0.05)
        self._events: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        self._meta_wanted = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sock: zmq.Socket | None = None
        self._cursor = RingCursor(ring)
        self._auth_held = False
        self._subs = SubscriptionGuard(TOPIC_META)

    # ------------------------------------------------------------------ public API

    def start(self) -> None:
        """Bind (errors raise here) and start the publisher thread."""
        check_bind(self.endpoint, self.auth, "telemetry")
        sock = self.ctx.socket(zmq.XPUB)
        sock.sndhwm = SNDHWM
        sock.linger = 100  # let the final flush out on stop, but never hang shutdown
        sock.setsockopt(zmq.XPUB_NODROP, 1)
        sock.setsockopt(zmq.XPUB_VERBOSE, 1)  # every subscribe, so each newcomer gets meta
        SubscriptionGuard.configure(sock)
        if self.auth is not None:
            acquire_authenticator(self.ctx, self.auth)
            self._auth_held = True
            self.auth.apply_server(sock)
        try:
            sock.bind(self.endpoint)
        except zmq.ZMQError as e:
            sock.close(linger=0)
            self._release_auth()
            raise OSError(f"telemetry: cannot bind {self.endpoint}: {e}") from e
        self.endpoint = sock.last_endpoint.decode()
        self._subs = SubscriptionGuard(TOPIC_META)
        self._subs.attach(sock)
        self._sock = sock
        self._cursor = RingCursor(self.ring)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="rig-telemetry", daemon=True)
        self._thread.start()
        log.info("telemetry on %s (%s)", self.endpoint, "CURVE" if self.auth else "open")

    def stop(self) -> None:
        """Flush what the ring holds, then close the socket."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._release_auth()

    def _release_auth(self) -> None:
        if self._auth_held:
            self._auth_held = False
            release_authenticator(self.ctx)

    def event(self, kind: str, **payload: Any) -> None:
        """Queue an event (thread-safe, never blocks; sent within one publisher wake-up).

        `seq` and `t` default to those of the newest published row."""
        if len(self._events) >= EVENT_QUEUE:
            self.stats.dropped_events += 1
            return
        self._events.append((kind, payload))

    def request_meta(self) -> None:
        """Send `meta` at the next wake-up (e.g. after `describe`)."""
        self._meta_wanted = True

    # ------------------------------------------------------------------ thread

    def _run(self) -> None:
        sock = self._sock
        assert sock is not None
        failures = 0
        try:
            while True:
                self.stats.alive = True
                served_from = time.monotonic()
                try:
                    self._serve(sock)
                    return
                except Exception as exc:
                    self.stats.alive = False
                    self.stats.restarts += 1
                    self.stats.last_error = f"{type(exc).__name__}: {exc}"
                    served = time.monotonic() - served_from
                    failures = 1 if served >= RESTART_RESET_S else failures + 1
                    pause = min(RESTART_MAX_S, RESTART_MIN_S * 2 ** (failures - 1))
                    log.exception(
                        "telemetry publisher failed (restart %d in %.2f s)",
                        self.stats.restarts,
                        pause,
                    )
                if self._stop.wait(pause):
                    return
                self._resume()
        finally:
            self.stats.alive = False
            self._subs.close(sock)
            sock.close()
            self._sock = None

    def _resume(self) -> None:
        """Start over from the newest row (what a failed pass left is skipped and counted)."""
        self.stats.lost_rows += max(0, self._cursor.available())
        self._cursor = RingCursor(self.ring)
        self._meta_wanted = True

    def _serve(self, sock: zmq.Socket) -> None:
        buf = np.empty((self.catch_up_rows, self.ring.width), dtype=np.float64)
        now = time.monotonic()
        next_status = now  # first status at once: clients learn the state immediately
        next_meta = now + META_INTERVAL
        pending_since: float | None = None
        while True:
            stopping = self._stop.wait(self._wake_s)
            self._drain_subscriptions(sock)
            now = time.monotonic()
            if self._meta_wanted or now >= next_meta:
                self._meta_wanted = False
                next_meta = now + META_INTERVAL
                self._send(sock, [TOPIC_META, self._meta], samples=False)
            self._send_events(sock)
            # Full batches always (at most a ring's worth per wake-up, so that meta, status
            # and stop are served even when the loop outruns us), several per message after a
            # stall; a partial one once its oldest row has waited a batch span (slow loop, or
            # the run ended) or when stopping.
            budget = self.ring.capacity
            while budget > 0 and (available := self._cursor.available()) >= self.batch:
                want = self.batch
                if available > CATCH_UP_BATCHES * self.batch:
                    want = min(available // self.batch * self.batch, self.catch_up_rows)
                self._send_rows(sock, buf, want)
                budget -= want
                pending_since = None
            left = min(self._cursor.available(), self.batch)
            if left > 0:
                if pending_since is None:
                    pending_since = now
                if stopping or now - pending_since >= self.batch * self.period:
                    self._send_rows(sock, buf, left)
                    pending_since = None
            if now >= next_status:
                next_status = now + STATUS_INTERVAL
                self._send_status(sock)
            if stopping:
                self._send_events(sock)
                return

    def _drain_subscriptions(self, sock: zmq.Socket) -> None:
        got = self._subs.drain(sock)
        if got.meta_wanted:
            self._meta_wanted = True
        self.stats.flooders_cut_off = self._subs.cut_off
        self.stats.flooders_closed = self._subs.closed

    @staticmethod
    def _send_frames(sock: zmq.Socket, frames: list[Any]) -> None:
        # Zero-copy only pays above pyzmq's copy threshold (64 KiB): below it, a tracked
        # zmq.Frame costs more than copying (measured: 5 kB batches go 2× faster copied).
        last = len(frames) - 1
        for i, f in enumerate(frames):
            flags = zmq.NOBLOCK | (zmq.SNDMORE if i < last else 0)
            sock.send(f, flags, copy=len(memoryview(f).cast("B")) < zmq.COPY_THRESHOLD)

    def _send(self, sock: zmq.Socket, frames: list[Any], *, samples: bool) -> None:
        # With XPUB_NODROP only the first frame can raise EAGAIN (the high-water mark counts
        # whole messages), so a refused message leaves nothing half-sent.
        try:
            self._send_frames(sock, frames)
            return
        except zmq.Again:
            pass
        # Some subscriber is full: lose it for that one only (lossy resend to the rest).
        if samples:
            self.stats.dropped_batches += 1
        else:
            self.stats.dropped_other += 1
        sock.setsockopt(zmq.XPUB_NODROP, 0)
        try:
            self._send_frames(sock, frames)
        except zmq.Again:  # lossy XPUB does not raise; be safe anyway
            pass
        finally:
            sock.setsockopt(zmq.XPUB_NODROP, 1)

    def _send_rows(self, sock: zmq.Socket, buf: np.ndarray, want: int) -> None:
        lost_before = self._cursor.lost
        n = self._cursor.read_into(buf[:want])
        if self._cursor.lost != lost_before:
            self.stats.lost_rows += self._cursor.lost - lost_before
            self.stats.lapped += 1
        if n == 0:  # every row it tried was overwritten during the copy: nothing to send
            return
        start = 0
        seqs = buf[:n, self._seq_col]
        # A batch holds consecutive seq only (a new run restarts seq; lapped rows leave a gap).
        breaks = np.flatnonzero(np.diff(seqs) != 1.0) + 1
        for end in [*breaks.tolist(), n]:
            self._send_segment(sock, buf[start:end])
            start = end

    def _send_segment(self, sock: zmq.Socket, rows: np.ndarray) -> None:
        n = len(rows)
        # Column-major, little-endian: a fresh array per message, so that a zero-copy send
        # (large batches) can keep a reference until the I/O thread is done with it.
        payload = np.ascontiguousarray(rows.T, dtype=PAYLOAD_DTYPE)
        header = pack(
            {
                "v": SCHEMA_VERSION,
                "rig": self.rig_id,
                "layout_id": self.layout_id,
                "seq0": int(rows[0, self._seq_col]),
                "n": n,
                "t0": float(rows[0, self._t_col]),
                "t1": float(rows[-1, self._t_col]),
                "width": rows.shape[1],
                "sent": time.time(),
            }
        )
        self._send(sock, [TOPIC_SAMPLES, header, payload], samples=True)
        self.stats.batches_sent += 1
        self.stats.rows_sent += n

    def _last_row(self) -> tuple[int, float]:
        k = self.ring.published - 1
        if k < 0:
            return -1, 0.0
        row = self.ring.rows[k & self.ring.mask]
        return int(row[self._seq_col]), float(row[self._t_col])

    def _send_events(self, sock: zmq.Socket) -> None:
        while self._events:
            kind, payload = self._events.popleft()
            seq, t = self._last_row()
            header = {"v": SCHEMA_VERSION, "rig": self.rig_id, "seq": seq, "t": t}
            header.update(payload)
            header["kind"] = kind
            try:
                frame = pack(header)
            except (TypeError, ValueError, OverflowError) as e:
                log.error("event '%s' cannot be encoded (%s); dropped", kind, e)
                self.stats.dropped_events += 1
                continue
            self._send(sock, [TOPIC_EVENT, frame], samples=False)
            self.stats.events_sent += 1

    def _send_status(self, sock: zmq.Socket) -> None:
        try:
            status = dict(self.status_fn())
            status.setdefault("state", "unknown")
            status.setdefault("fault", None)
            status.update(v=SCHEMA_VERSION, rig=self.rig_id, telemetry=self.stats.as_dict())
            frame = pack(status)
        except Exception as e:  # a broken status function must not kill telemetry
            log.error("telemetry status not sent: %s", e)
            return
        self._send(sock, [TOPIC_STATUS, frame], samples=False)
