"""The estimator's two sockets, secured like the service's (daq/security.py).

Without `network.keys_dir` both are plain and the estimates PUB may bind only to loopback (the
same `check_bind` rule the service applies). With a keys directory:

- telemetry SUB: a CURVE client with the key `<keys_dir>/<key>.key_secret` (default name
  `estimator`; create it with `rigctl keys generate estimator --role monitor --dir KEYS` — a
  monitor key is enough, the estimator only reads) and the service's `server.key`;
- estimates PUB: a CURVE server with the service's own pair and allow-list, so every client that
  may subscribe to telemetry may subscribe to estimates, with the same key.

Anything that stops it from working raises `TransportError` with the reason, before any data is
read: the caller exits non-zero and writes nothing.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from daq.profile.schema import Network
from daq.security import (
    ClientKeys,
    CurveConfig,
    SecurityError,
    acquire_authenticator,
    check_bind,
    connect_endpoint,
    release_authenticator,
)
from daq.telemetry.subscriber import TelemetrySubscriber
from daq.telemetry.wire import TOPIC_EVENT, TOPIC_META, TOPIC_SAMPLES, Meta

log = logging.getLogger(__name__)

#: The estimator's client key name in the keys directory (`--key` overrides).
DEFAULT_KEY = "estimator"


class TransportError(RuntimeError):
    """The estimator cannot subscribe or publish; the message says why and what to do."""


@dataclass
class Sockets:
    ctx: zmq.Context
    sub: TelemetrySubscriber
    pub: zmq.Socket
    auth: CurveConfig | None

    def close(self) -> None:
        self.sub.close()
        self.pub.close(0)
        if self.auth is not None:
            release_authenticator(self.ctx)


def open_sockets(
    net: Network,
    telemetry: str | None,
    publish: str | None,
    *,
    key: str | None = None,
    rcvhwm: int = 1000,
    ctx: zmq.Context,
) -> Sockets:
    """Connect the telemetry SUB and bind the estimates PUB (`net` gives the defaults)."""
    tel_ep = telemetry or connect_endpoint(net.telemetry)
    pub_ep = publish or net.estimates
    auth: CurveConfig | None = None
    keys: ClientKeys | None = None
    try:
        if net.keys_dir is not None:
            auth = CurveConfig.from_keys_dir(net.keys_dir)
            keys = ClientKeys.load(key or DEFAULT_KEY, net.keys_dir)
        elif key is not None:
            raise SecurityError("--key given but the profile sets no network.keys_dir (no CURVE)")
        check_bind(pub_ep, auth, "rig-estimator --publish")
    except SecurityError as e:
        raise TransportError(str(e)) from e
    sub = TelemetrySubscriber(
        tel_ep,
        topics=(TOPIC_META, TOPIC_SAMPLES, TOPIC_EVENT),
        keys=keys,
        ctx=ctx,
        rcvhwm=rcvhwm,
    )
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 10)
    pub.setsockopt(zmq.LINGER, 0)
    if auth is not None:
        acquire_authenticator(ctx, auth)
        auth.apply_server(pub)
    try:
        pub.bind(pub_ep)
    except zmq.ZMQError as e:
        pub.close(0)
        sub.close()
        if auth is not None:
            release_authenticator(ctx)
        raise TransportError(f"cannot bind the estimates socket {pub_ep}: {e}") from e
    log.info("telemetry from %s, estimates on %s (%s)", tel_ep, pub_ep, "CURVE" if auth else "open")
    return Sockets(ctx, sub, pub, auth)


def await_meta(
    sockets: Sockets, timeout: float, stop: Callable[[], bool] = lambda: False
) -> Meta | None:
    """The service's first `meta`; None if `stop()` turns true first (SIGTERM while waiting:
    not a failure); `TransportError` after `timeout` s (0 = wait forever)."""
    deadline = time.monotonic() + (timeout if timeout > 0 else math.inf)
    meta = None
    while meta is None and not stop():
        left = deadline - time.monotonic()
        if left <= 0:
            break
        meta = sockets.sub.wait_meta(min(left, 0.1))  # short slices: see `stop` promptly
    if meta is None and not stop():
        curve = "; with CURVE: is this key listed in the service's clients/, is server.key the "
        raise TransportError(
            f"no telemetry from {sockets.sub.endpoint} within {timeout:g} s (is rig-daq "
            f"running, is the endpoint right"
            + (curve + "service's?)" if sockets.auth is not None else "?)")
        )
    return meta
