"""The live bridge: telemetry (and estimates) from ZeroMQ → Foxglove WebSocket channels.

Runs as its own process (`rig-bridge`), a plain subscriber like `rigctl monitor`: the service
publishes with a send high-water mark and never waits for it, so a slow or stuck bridge (or
browser) can only lose telemetry, never delay the loop (docs/loop.md). The WebSocket server
(wsserver.py) drops the oldest queued data of a slow client.

Rows are decimated by loop cycle number: every k-th row (`seq % k == 0`, k from the loop
period and `rate_hz`), so what Foxglove shows is exactly what the service published for those
cycles. Log times are each row's own `t` on one epoch fixed at the first row of a layout (the
wall clock then), never the time of arrival (anchors §4, pitfall 4); the server's time
(capability `time`) follows the newest row sent.

Liveness: when no sample batch has come for `STALE_S`, the service's and the estimator's
channels are withdrawn (unadvertised) and the bridge says why (a server status and a STALE
diagnostic); the service's next `meta` advertises them again, and its rows flow from then on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np
import zmq

from daq.bridge.auth import DEFAULT_ORIGINS, TokenStore
from daq.bridge.channels import TOPIC_EVENTS, decimation_step
from daq.bridge.standard import TOPIC_LOG
from daq.bridge.station import Station
from daq.bridge.station_commands import StationCommands
from daq.bridge.wsserver import STATUS_INFO, FoxgloveServer
from daq.security import ClientKeys
from daq.telemetry import Event, Meta, SampleBatch, Status, TelemetrySubscriber

log = logging.getLogger(__name__)

DEFAULT_RATE_HZ = 100.0
DEFAULT_PORT = 8765
#: No sample batch for this long (they come every 20 ms) and the service counts as gone.
STALE_S = 0.5
POLL_MS = 50
#: Telemetry messages handled per poll before `stop` and the liveness check are looked at
#: again: a service in virtual time can publish faster than the bridge handles, and a drain
#: until empty then never ends (a bridge that ignored SIGTERM for 30 s in CI).
DRAIN_MAX = 256


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
        arm_factory: Callable[[dict[str, Any]], Any] | None = None,
        commands: StationCommands | None = None,
        ssl: Any = None,
    ) -> None:
        """`tokens`: required WebSocket credentials (None: none, loopback only, checked by
        the caller with `auth.check_bind`)."""
        decimation_step(1e-3, rate_hz)  # validates the rate
        self.rate_hz = rate_hz
        self.commands = commands
        # The rig's events and log are never dropped for a slow client (wsserver doc).
        self.server = FoxgloveServer(name=name, host=host, port=port, tokens=tokens,
                                     origins=origins, parameters=commands, ssl=ssl,
                                     kept_topics=(TOPIC_EVENTS, TOPIC_LOG))  # fmt: skip
        if commands is not None:
            self.server.add_services(commands.services())
            notice = commands.notice()
            if notice is not None:
                self.server.publish_status(notice, STATUS_INFO, "hydrig.commands")
                log.warning("%s", notice)
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
        self.station = Station(self.server)
        self.arm_factory = arm_factory
        self._layout: str | None = None  # layout whose channels are advertised
        self._known_layout: str | None = None  # the service's last layout, advertised or not
        self._step = 1
        self._epoch_ns: int | None = None
        self._next_seq = 0
        self._last_rows: float | None = None  # monotonic time of the last sample batch
        self._started = time.monotonic()
        self.rows_in = 0
        self.rows_out = 0
        self.station.service_lost("no telemetry yet from " + telemetry, time.time_ns())

    # ------------------------------------------------------------------ telemetry

    def _on_meta(self, meta: Meta) -> None:
        if meta.layout_id == self._layout:
            return
        profile = meta.header.get("profile") or {}
        roles = {str(c.get("name")): str(c.get("role")) for c in profile.get("channels", []) or []}
        arm = self.arm_factory(meta.header) if self.arm_factory is not None else None
        if self.commands is not None:
            self.commands.on_meta(meta.header)
        self.station.rig = str(meta.header.get("rig", ""))
        self.station.set_layout(meta.header["columns"], roles, arm)
        self._step = decimation_step(float(meta.header["period"]), self.rate_hz)
        if meta.layout_id != self._known_layout:
            self._epoch_ns = None  # another layout: another clock
        self._layout = self._known_layout = meta.layout_id
        self._last_rows = time.monotonic()  # a sign of life: rows follow
        log.info("layout %s: every %d-th row", meta.layout_id, self._step)

    def _log_time(self, t: float) -> int:
        if self._epoch_ns is None:
            self._epoch_ns = time.time_ns() - int(t * 1e9)
        return self._epoch_ns + int(t * 1e9)

    def _on_samples(self, batch: SampleBatch) -> None:
        self._last_rows = time.monotonic()
        if self._layout is None or batch.layout_id != self._layout:
            return  # rows of a layout we have no meta for yet
        if batch.seq0 < self._next_seq:  # the service restarted (same layout): new clock
            self._epoch_ns = None
        self._next_seq = batch.seq0 + batch.n
        self.rows_in += batch.n
        t_col = self._t_col(batch)
        seq = batch.seq0 + np.arange(batch.n)
        stamp = None
        for i in np.flatnonzero(seq % self._step == 0).tolist():
            stamp = self._log_time(float(batch.data[t_col, i]))
            self.station.rows(batch.data[:, i].tolist(), stamp)
            self.rows_out += 1
        self.station.service_back(stamp if stamp is not None else time.time_ns())
        if stamp is not None:
            self.server.broadcast_time(stamp)

    def _t_col(self, batch: SampleBatch) -> int:
        assert self.station.cs is not None
        return self.station.cs.t_col

    def _stamp_of(self, header: dict[str, Any]) -> int:
        t = header.get("t")
        if isinstance(t, int | float) and not isinstance(t, bool) and self._epoch_ns is not None:
            return self._log_time(float(t))
        return time.time_ns()

    def _on_estimate(self, raw: bytes) -> None:
        if self._layout is None:
            return  # the service is gone: no estimate is shown as if live
        try:
            h = msgpack.unpackb(raw, raw=False)
            if not isinstance(h, dict):
                raise TypeError(f"a {type(h).__name__}, not a map")
        except (ValueError, TypeError) as e:
            log.warning("bad estimate message: %s", e)
            return
        self.station.estimate(h, self._stamp_of(h))

    def check_liveness(self, now: float) -> None:
        """Withdraw the service's channels once no sample batch came for `STALE_S`."""
        if self._layout is None:
            return
        last = self._last_rows if self._last_rows is not None else self._started
        if now - last > STALE_S:
            self.station.service_lost(f"no telemetry for {now - last:.1f} s", time.time_ns())
            self._layout = None

    # ------------------------------------------------------------------ loop

    def handle(self, msg: Any) -> None:
        if isinstance(msg, Meta):
            self._on_meta(msg)
        elif isinstance(msg, SampleBatch):
            self._on_samples(msg)
        elif self._layout is None:
            return
        elif isinstance(msg, Status):
            self.station.status(msg.header, self._stamp_of(msg.header))
        elif isinstance(msg, Event):
            self.station.event(msg.header, self._stamp_of(msg.header))

    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sub.sock, zmq.POLLIN)
        if self.est is not None:
            poller.register(self.est, zmq.POLLIN)
        while not self._stop.is_set():
            ready = dict(poller.poll(POLL_MS))
            if self.sub.sock in ready:
                for _ in range(DRAIN_MAX):
                    msg = self.sub.recv(timeout=0)
                    if msg is None:
                        break
                    self.handle(msg)
            if self.est is not None and self.est in ready:
                while True:
                    try:
                        frames = self.est.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if len(frames) >= 2:
                        self._on_estimate(frames[1])
            self.check_liveness(time.monotonic())

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self.server.stop()
        if self.commands is not None:
            self.commands.close()
        self.sub.close()
        if self.est is not None:
            self.est.close(0)
        self._zctx.term()
