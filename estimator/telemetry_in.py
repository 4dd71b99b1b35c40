"""Minimal subscriber-side decoder of daq telemetry (docs/architecture.md "Telemetry wire
format"), behind a small interface so that `daq.telemetry`'s own client can replace it.

`decode(frames)` is pure (no sockets); `TelemetrySubscriber` adds a ZeroMQ SUB socket.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np
import zmq

SUPPORTED_VERSION = 1


@dataclass(frozen=True)
class Meta:
    layout_id: Any
    columns: list[dict[str, Any]]
    period: float
    rig: str


@dataclass(frozen=True)
class Samples:
    layout_id: Any
    seq0: int
    rows: np.ndarray  # (n, width), row i is sample seq0 + i


class TelemetryError(ValueError):
    """A message that does not follow the documented format."""


def decode(frames: list[bytes]) -> Meta | Samples | None:
    """One multipart message → `Meta`, `Samples`, or None for topics the estimator ignores."""
    if len(frames) < 2:
        raise TelemetryError(f"expected [topic, header, ...], got {len(frames)} frame(s)")
    topic = bytes(frames[0])
    if topic not in (b"samples", b"meta"):
        return None
    try:
        head = msgpack.unpackb(bytes(frames[1]), raw=False)
    except (ValueError, msgpack.exceptions.ExtraData) as exc:
        raise TelemetryError(f"{topic!r} header is not msgpack: {exc}") from None
    if not isinstance(head, dict) or head.get("v") != SUPPORTED_VERSION:
        raise TelemetryError(f"{topic!r} header version {head!r} unsupported")
    if topic == b"meta":
        return Meta(
            head.get("layout_id"),
            list(head["columns"]),
            float(head["period"]),
            str(head.get("rig", "")),
        )
    if len(frames) < 3:
        raise TelemetryError("samples message without a payload frame")
    n, width = int(head["n"]), int(head["width"])
    buf = memoryview(frames[2])
    if buf.nbytes != 8 * n * width:
        raise TelemetryError(f"samples payload is {buf.nbytes} bytes, expected {8 * n * width}")
    # Column-major on the wire: column c occupies bytes [8·n·c, 8·n·(c+1)).
    rows = np.frombuffer(buf, dtype="<f8").reshape(width, n).T
    return Samples(head.get("layout_id"), int(head["seq0"]), rows)


class TelemetrySubscriber:
    """SUB socket on the daq telemetry endpoint; `recv(timeout_ms)` → decoded message or None."""

    def __init__(self, ctx: zmq.Context, endpoint: str, hwm: int = 1000) -> None:
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.RCVHWM, hwm)
        self.sock.setsockopt(zmq.LINGER, 0)
        for topic in (b"samples", b"meta"):
            self.sock.setsockopt(zmq.SUBSCRIBE, topic)
        self.sock.connect(endpoint)
        self.errors = 0

    def recv(self, timeout_ms: int) -> Meta | Samples | None:
        if not self.sock.poll(timeout_ms):
            return None
        frames = self.sock.recv_multipart(copy=True)
        try:
            return decode(frames)
        except (TelemetryError, KeyError, TypeError) as exc:
            self.errors += 1
            raise TelemetryError(str(exc)) from None

    def close(self) -> None:
        self.sock.close(0)
