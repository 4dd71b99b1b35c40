"""Shared helpers for the recording tests: a deterministic row generator and a record walker."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from daq.profile import load_profile
from daq.recording import format as fmt
from daq.ring import SampleRing
from daq.sample_layout import SampleLayout

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "hw_profiles" / "sim-2dof.toml"
PERIOD = 0.001


def layout_2dof() -> SampleLayout:
    return SampleLayout.from_profile(load_profile(PROFILE))


def meta() -> dict[str, object]:
    return {"rig": "sim-2dof", "period": PERIOD}


def expected_rows(start: int, n: int, width: int) -> np.ndarray:
    """The rows `publish_rows` writes for ring indices start…start+n−1 (seq column = index)."""
    idx = np.arange(start, start + n, dtype=np.float64)[:, None]
    out = np.sin(idx * 0.37 + np.arange(width)[None, :]) * (1.0 + np.arange(width))[None, :]
    out[:, 0] = idx[:, 0]
    out[:, 1] = idx[:, 0] * PERIOD
    return out


def publish_rows(ring: SampleRing, n: int, *, burst: int = 0, pause_s: float = 0.0005) -> None:
    """Publish n rows as the loop would; pause every `burst` rows so the writer thread runs."""
    for _ in range(n):
        i = ring.published
        ring.claim()[:] = expected_rows(i, 1, ring.width)[0]
        ring.publish()
        if burst and (i + 1) % burst == 0:
            time.sleep(pause_s)


def records(buf: bytes) -> list[tuple[int, bytes, int]]:
    """(offset, tag, total size) of every complete record in an intact run file."""
    _, pos = fmt.decode_file_header(buf)
    out = []
    while pos < len(buf):
        tag = buf[pos : pos + 4]
        if tag == fmt.TAG_CHUNK:
            head = fmt.decode_chunk_header(buf, pos)
            assert head is not None
            size = fmt.CHUNK_HEADER.size + head.body_size
        else:
            blob = fmt.decode_blob_header(buf, pos)
            assert blob is not None
            size = fmt.BLOB_HEADER.size + blob.length
        out.append((pos, tag, size))
        pos += size
    return out
