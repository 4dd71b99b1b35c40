"""Telemetry wire format (docs/protocol.md, "Telemetry"): encoding and decoding of one message.

Multipart `[topic, header]` or `[topic, header, payload]`; the header is a msgpack map with a
schema version `v`; sample payloads are column-major little-endian float64. Decoding is shared by
`rigctl monitor`, the estimator and the tests, so it lives here, free of sockets.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from daq.sample_layout import SampleLayout

SCHEMA_VERSION = 1
TOPIC_SAMPLES = b"samples"
TOPIC_META = b"meta"
TOPIC_EVENT = b"event"
TOPIC_STATUS = b"status"
TOPICS = (TOPIC_SAMPLES, TOPIC_META, TOPIC_EVENT, TOPIC_STATUS)
#: dtype of the payload, explicit little-endian whatever the host.
PAYLOAD_DTYPE = np.dtype("<f8")


class WireError(ValueError):
    """A message that does not follow docs/protocol.md (names what is wrong)."""


def layout_id(layout: SampleLayout) -> str:
    """Stable id of a column layout: the first 16 hex digits of SHA-1 over its column list."""
    text = json.dumps(layout.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def pack(header: dict[str, Any]) -> bytes:
    return msgpack.packb(header, use_bin_type=True)


@dataclass(frozen=True)
class SampleBatch:
    """Rows seq0 … seq0+n−1. `data[c]` is column c (a read-only view on the payload)."""

    header: dict[str, Any]
    data: np.ndarray  # shape (width, n), float64

    @property
    def seq0(self) -> int:
        return int(self.header["seq0"])

    @property
    def n(self) -> int:
        return int(self.header["n"])

    @property
    def layout_id(self) -> str:
        return str(self.header["layout_id"])

    def rows(self) -> np.ndarray:
        """Row-major copy, shape (n, width), as rows appear in the ring and the recording."""
        return np.ascontiguousarray(self.data.T)


@dataclass(frozen=True)
class Meta:
    header: dict[str, Any]

    @property
    def layout_id(self) -> str:
        return str(self.header["layout_id"])

    @property
    def names(self) -> list[str]:
        return [c["name"] for c in self.header["columns"]]

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"no column '{name}' in layout {self.layout_id}") from None


@dataclass(frozen=True)
class Event:
    header: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.header["kind"])


@dataclass(frozen=True)
class Status:
    header: dict[str, Any]


Message = SampleBatch | Meta | Event | Status

_REQUIRED = {
    TOPIC_SAMPLES: ("v", "rig", "layout_id", "seq0", "n", "t0", "t1", "width"),
    TOPIC_META: ("v", "rig", "layout_id", "period", "columns"),
    TOPIC_EVENT: ("v", "rig", "seq", "t", "kind"),
    TOPIC_STATUS: ("v", "rig", "state", "fault"),
}


def decode(frames: list[bytes] | list[Any]) -> Message:
    """Decode one multipart message (frames as bytes or zmq.Frame/memoryview).

    Raises `WireError` for an unknown topic, an unsupported version, a missing header key or a
    payload whose size does not match `n · width · 8`.
    """
    if len(frames) < 2:
        raise WireError(f"a telemetry message has 2 or 3 frames, got {len(frames)}")
    topic = bytes(frames[0])
    if topic not in _REQUIRED:
        raise WireError(f"unknown topic {topic!r}")
    try:
        header = msgpack.unpackb(bytes(frames[1]), raw=False)
    except Exception as e:
        raise WireError(f"{topic.decode()}: header is not msgpack: {e}") from e
    if not isinstance(header, dict):
        raise WireError(f"{topic.decode()}: header is not a map")
    if header.get("v") != SCHEMA_VERSION:
        raise WireError(f"{topic.decode()}: schema version {header.get('v')!r}, expected 1")
    missing = [k for k in _REQUIRED[topic] if k not in header]
    if missing:
        raise WireError(f"{topic.decode()}: header lacks {missing}")
    if topic == TOPIC_SAMPLES:
        if len(frames) != 3:
            raise WireError(f"samples: expected 3 frames, got {len(frames)}")
        n, width = int(header["n"]), int(header["width"])
        buf = memoryview(frames[2])
        if buf.nbytes != 8 * n * width:
            raise WireError(
                f"samples: payload of {buf.nbytes} bytes, expected 8·n·width = {8 * n * width}"
            )
        data = np.frombuffer(buf, dtype=PAYLOAD_DTYPE).reshape(width, n)
        return SampleBatch(header, data)
    if topic == TOPIC_META:
        return Meta(header)
    if topic == TOPIC_EVENT:
        return Event(header)
    return Status(header)
