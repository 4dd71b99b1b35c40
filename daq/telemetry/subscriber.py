"""Telemetry subscriber: connects a SUB socket, decodes messages, tracks sequence gaps.

Used by `rigctl monitor` and the estimator. A gap in `seq` between consecutive sample batches of
one layout means rows this subscriber did not get (it was slow, or the publisher was lapped):
`lost_rows` counts them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import zmq

from daq.security import ClientKeys
from daq.telemetry.wire import TOPICS, Message, Meta, SampleBatch, WireError, decode

log = logging.getLogger(__name__)


class TelemetrySubscriber:
    def __init__(
        self,
        endpoint: str,
        *,
        topics: Iterable[bytes] = TOPICS,
        keys: ClientKeys | None = None,
        ctx: zmq.Context | None = None,
        rcvhwm: int = 1000,
    ) -> None:
        self.endpoint = endpoint
        self._own_ctx = ctx is None
        self.ctx = ctx if ctx is not None else zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.linger = 0
        self.sock.rcvhwm = rcvhwm
        if keys is not None:
            keys.apply(self.sock)
        for t in topics:
            self.sock.subscribe(t)
        self.sock.connect(endpoint)
        #: The newest `meta` (None until one arrives).
        self.meta: Meta | None = None
        self.next_seq: int | None = None
        self.lost_rows = 0
        self.bad_messages = 0

    def recv(self, timeout: float | None = None) -> Message | None:
        """The next decoded message, or None if none arrives within `timeout` seconds.

        Malformed messages are counted in `bad_messages` and skipped."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.sock.poll(None if wait is None else int(wait * 1000)):
                return None
            frames = self.sock.recv_multipart(copy=False)
            try:
                msg = decode([f.buffer for f in frames])
            except WireError as e:
                self.bad_messages += 1
                log.warning("bad telemetry message: %s", e)
                continue
            self._track(msg)
            return msg

    def _track(self, msg: Message) -> None:
        if isinstance(msg, Meta):
            if self.meta is not None and self.meta.layout_id != msg.layout_id:
                self.next_seq = None  # new layout: seq restarts
            self.meta = msg
        elif isinstance(msg, SampleBatch):
            if self.next_seq is not None and msg.seq0 > self.next_seq:
                self.lost_rows += msg.seq0 - self.next_seq
            self.next_seq = msg.seq0 + msg.n

    def wait_meta(self, timeout: float) -> Meta | None:
        """Receive until a `meta` arrives (the publisher sends one as soon as we subscribe)."""
        deadline = time.monotonic() + timeout
        while self.meta is None:
            left = deadline - time.monotonic()
            if left <= 0 or self.recv(left) is None:
                break
        return self.meta

    def close(self) -> None:
        self.sock.close(linger=0)
        if self._own_ctx:
            self.ctx.term()

    def __enter__(self) -> TelemetrySubscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
