"""The live bridge: telemetry (and estimates) from ZeroMQ → Foxglove WebSocket channels.

Runs as its own process (`rig-bridge`), a plain subscriber like `rigctl monitor`: the service
publishes with a send high-water mark and never waits for it, so a slow or stuck bridge (or
browser) can only lose telemetry, never delay the loop (docs/loop.md). The foxglove-sdk server
drops the oldest queued messages of a slow WebSocket client (`message_backlog_size`).

Rows are decimated by loop cycle number: every k-th row (`seq % k == 0`, k from the loop
period and `rate_hz`), so what Foxglove shows is exactly what the service published for those
cycles. Log times are each row's own `t` on one epoch fixed at the first row of a layout (the
wall clock then), never the time of arrival (anchors §4, pitfall 4).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import msgpack
import numpy as np
import zmq

from daq.bridge.auth import DEFAULT_ORIGINS, TokenStore
from daq.bridge.channels import (
    TOPIC_ESTIMATES,
    TOPIC_EVENTS,
    TOPIC_STATUS,
    ChannelSet,
    decimation_step,
    dumps,
    jsonable,
)
from daq.bridge.wsserver import FoxgloveServer
from daq.security import ClientKeys
from daq.telemetry import Event, Meta, SampleBatch, Status, TelemetrySubscriber

log = logging.getLogger(__name__)

DEFAULT_RATE_HZ = 100.0
DEFAULT_PORT = 8765


class _Channel:
    """One advertised topic of the WebSocket server."""

    def __init__(self, server: FoxgloveServer, topic: str, schema: dict[str, Any]) -> None:
        self.server, self.topic = server, topic
        self.id = server.add_channel(topic, schema)

    def log(self, payload: bytes, log_time: int | None = None) -> None:
        self.server.log(self.id, payload, time.time_ns() if log_time is None else log_time)

    def close(self) -> None:
        self.server.remove_channels([self.id])


class Bridge:
    """Subscribe, convert, log to a foxglove-sdk WebSocket server until `stop()`."""

    def __init__(
        self,
        telemetry: str,
        *,
        estimates: str | None = None,
        keys: ClientKeys | None = None,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        rate_hz: float = DEFAULT_RATE_HZ,
        name: str = "hydrig",
        tokens: TokenStore | None = None,
        origins: tuple[str, ...] = DEFAULT_ORIGINS,
    ) -> None:
        """`tokens`: required WebSocket credentials (None: none, loopback only, checked by
        the caller with `auth.check_bind`)."""
        decimation_step(1e-3, rate_hz)  # validates the rate
        self.rate_hz = rate_hz
        self.server = FoxgloveServer(name=name, host=host, port=port, tokens=tokens,
                                     origins=origins)  # fmt: skip
        self.port: int = self.server.port
        self._zctx = zmq.Context()
        self.sub = TelemetrySubscriber(telemetry, keys=keys, ctx=self._zctx)
        self.est: zmq.Socket[bytes] | None = None
        if estimates:
            self.est = self._zctx.socket(zmq.SUB)
            self.est.linger = 0
            if keys is not None:
                keys.apply(self.est)
            self.est.subscribe(b"estimate")
            self.est.connect(estimates)
        self._stop = threading.Event()
        self._layout: str | None = None
        self._set: ChannelSet | None = None
        self._channels: dict[str, Any] = {}
        self._step = 1
        self._epoch_ns: int | None = None
        self._next_seq = 0
        self._est_channel: Any = None
        self._est_names: list[str] = []
        self.rows_in = 0
        self.rows_out = 0

    # ------------------------------------------------------------------ channels

    def _channel(self, topic: str, schema: dict[str, Any]) -> _Channel:
        return _Channel(self.server, topic, schema)

    def _on_meta(self, meta: Meta) -> None:
        if meta.layout_id == self._layout:
            return
        for ch in self._channels.values():
            ch.close()
        profile = meta.header.get("profile") or {}
        roles = {c.get("name"): c.get("role") for c in profile.get("channels", []) or []}
        self._set = ChannelSet(meta.header["columns"], roles)
        self._channels = {t: self._channel(t, s) for t, s in self._set.schemas().items()}
        self._step = decimation_step(float(meta.header["period"]), self.rate_hz)
        self._layout = meta.layout_id
        self._epoch_ns = None
        log.info("layout %s: %d channels, every %d-th row", meta.layout_id, len(self._channels),
                 self._step)  # fmt: skip

    def _log_time(self, t: float) -> int:
        if self._epoch_ns is None:
            self._epoch_ns = time.time_ns() - int(t * 1e9)
        return self._epoch_ns + int(t * 1e9)

    def _on_samples(self, batch: SampleBatch) -> None:
        if self._set is None or batch.layout_id != self._layout:
            return  # rows of a layout we have no meta for yet
        if batch.seq0 < self._next_seq:  # the service restarted (same layout): new clock
            self._epoch_ns = None
        self._next_seq = batch.seq0 + batch.n
        self.rows_in += batch.n
        seq = batch.seq0 + np.arange(batch.n)
        for i in np.flatnonzero(seq % self._step == 0).tolist():
            row = batch.data[:, i].tolist()
            msgs = self._set.row_messages(row)
            stamp = self._log_time(float(msgs["/rig/joints"]["t"] or 0.0))
            for topic, msg in msgs.items():
                self._channels[topic].log(dumps(msg), log_time=stamp)
            self.rows_out += 1

    def _on_header(self, topic: str, header: dict[str, Any]) -> None:
        ch = self._channels.get(topic)
        if ch is not None:
            t = header.get("t")
            stamp = self._log_time(float(t)) if isinstance(t, int | float) else None
            ch.log(dumps(jsonable(header)), log_time=stamp)

    def _on_estimate(self, raw: bytes) -> None:
        try:
            h = msgpack.unpackb(raw, raw=False)
            names = [str(n) for n in h.get("names", [])]
        except (ValueError, TypeError, AttributeError) as e:
            log.warning("bad estimate message: %s", e)
            return
        if names != self._est_names:
            if self._est_channel is not None:
                self._est_channel.close()
            self._est_channel = self._channel(TOPIC_ESTIMATES, ChannelSet.estimate_schema(names))
            self._est_names = names
        msg = ChannelSet.estimate_message(h)
        t = msg["t"]
        stamp = self._log_time(t) if t is not None and self._epoch_ns is not None else None
        self._est_channel.log(dumps(msg), log_time=stamp)

    # ------------------------------------------------------------------ loop

    def handle(self, msg: Any) -> None:
        if isinstance(msg, Meta):
            self._on_meta(msg)
        elif isinstance(msg, SampleBatch):
            self._on_samples(msg)
        elif isinstance(msg, Status):
            self._on_header(TOPIC_STATUS, msg.header)
        elif isinstance(msg, Event):
            self._on_header(TOPIC_EVENTS, msg.header)

    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sub.sock, zmq.POLLIN)
        if self.est is not None:
            poller.register(self.est, zmq.POLLIN)
        while not self._stop.is_set():
            ready = dict(poller.poll(100))
            if self.sub.sock in ready:
                while (msg := self.sub.recv(timeout=0)) is not None:
                    self.handle(msg)
            if self.est is not None and self.est in ready:
                while True:
                    try:
                        frames = self.est.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if len(frames) >= 2:
                        self._on_estimate(frames[1])

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self.server.stop()
        self.sub.close()
        if self.est is not None:
            self.est.close(0)
        self._zctx.term()
