"""Read a `.rigrun` file back, trusting nothing the checksums do not vouch for.

The reader walks the records in order. A record whose header fails its CRC is skipped by
scanning forward for the next header that passes (re-synchronisation); a chunk whose payload
fails its CRC is reported in `corrupt_chunks` and left out of `data`; a file that ends inside a
record is `truncated` and yields every record before the cut. So a run killed with SIGKILL or cut
short by a full disk reads back intact up to its last complete chunk.
"""

from __future__ import annotations

import logging
import mmap
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from daq.recording import format as fmt

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CorruptRecord:
    offset: int  # file offset of the damaged record (or of the skipped bytes)
    kind: str  # "chunk", "event", "trailer" or "unknown" (a damaged header)
    reason: str
    first_seq: int | None = None  # for a chunk whose header is intact
    rows: int | None = None


@dataclass
class Run:
    path: Path
    meta: dict[str, Any]
    columns: tuple[str, ...]
    data: np.ndarray  # (N, width) float64, every intact chunk in file order
    events: list[dict[str, Any]]
    trailer: dict[str, Any] | None
    truncated: bool
    corrupt_chunks: list[CorruptRecord]
    #: Rows the writer was lapped on (trailer, or the `rows_lost` events if there is none).
    lost: int
    #: Ring index of every row in `data` (contiguous unless rows were lost or corrupt).
    seq: np.ndarray = field(repr=False)

    @property
    def complete(self) -> bool:
        """True only for a cleanly stopped run with every row present and intact."""
        return (
            self.trailer is not None
            and bool(self.trailer.get("complete"))
            and not self.truncated
            and not self.corrupt_chunks
            and self.lost == 0
        )

    @property
    def units(self) -> tuple[str, ...]:
        return tuple(str(c.get("unit", "")) for c in self.meta.get("columns", ()))

    def column(self, name: str) -> np.ndarray:
        try:
            i = self.columns.index(name)
        except ValueError:
            raise KeyError(
                f"no column '{name}' in {self.path.name}; it has {self.columns}"
            ) from None
        return self.data[:, i]


def read_run(path: str | Path) -> Run:
    """Read a run file; raise `RunFileError` if it is not one, `OSError` if it cannot be read."""
    path = Path(path)
    with path.open("rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            raise fmt.RunFileError(f"{path}: empty file (the writer died before its header)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            try:
                return _parse(path, mm)
            except fmt.RunFileError as exc:
                raise fmt.RunFileError(f"{path}: {exc}") from None


def _parse(path: Path, mm: mmap.mmap) -> Run:
    meta, pos = fmt.decode_file_header(mm)
    width = int(meta.get("width", 0))
    columns = tuple(str(c["name"]) for c in meta.get("columns", ()))
    if width <= 0 or len(columns) != width:
        raise fmt.RunFileError(f"header describes {len(columns)} columns but width {width}")
    chunks: list[tuple[int, int, int]] = []  # (body offset, rows, first_seq) of intact chunks
    events: list[dict[str, Any]] = []
    corrupt: list[CorruptRecord] = []
    trailer: dict[str, Any] | None = None
    truncated = False
    end = len(mm)
    while pos < end:
        tail = end - pos
        tag = mm[pos : pos + 4]
        if tag == fmt.TAG_CHUNK:
            if tail < fmt.CHUNK_HEADER.size:
                truncated = True  # the file ends inside a record header
                break
            ch = fmt.decode_chunk_header(mm, pos)
            if ch is not None:
                body = pos + fmt.CHUNK_HEADER.size
                if body + ch.body_size > end:
                    truncated = True
                    break
                reason = None
                if ch.width != width:
                    reason = f"chunk width {ch.width} differs from the header's {width}"
                elif zlib.crc32(mm[body : body + ch.body_size]) != ch.body_crc:
                    reason = "payload fails its CRC check"
                if reason is None:
                    chunks.append((body, ch.rows, ch.first_seq))
                else:
                    corrupt.append(CorruptRecord(pos, "chunk", reason, ch.first_seq, ch.rows))
                pos = body + ch.body_size
                continue
        elif tag in (fmt.TAG_EVENT, fmt.TAG_TRAILER):
            if tail < fmt.BLOB_HEADER.size:
                truncated = True
                break
            bh = fmt.decode_blob_header(mm, pos)
            if bh is not None:
                body = pos + fmt.BLOB_HEADER.size
                if body + bh.length > end:
                    truncated = True
                    break
                kind = "event" if bh.tag == fmt.TAG_EVENT else "trailer"
                obj = _decode_blob(mm[body : body + bh.length], bh.body_crc)
                if isinstance(obj, str):
                    corrupt.append(CorruptRecord(pos, kind, obj))
                elif kind == "event":
                    events.append(obj)
                else:
                    trailer = obj
                pos = body + bh.length
                continue
        elif tail < 4 and any(t.startswith(tag) for t in fmt.TAGS):
            truncated = True
            break
        nxt = _resync(mm, pos + 1)
        corrupt.append(CorruptRecord(pos, "unknown", f"damaged record; {nxt - pos} bytes skipped"))
        pos = nxt
    data, seq = _gather(mm, chunks, width)
    lost = _lost(trailer, events)
    run = Run(path, meta, columns, data, events, trailer, truncated, corrupt, lost, seq)
    if corrupt:
        log.warning("%s: %d damaged record(s) skipped", path, len(corrupt))
    return run


def _decode_blob(body: bytes, crc: int) -> dict[str, Any] | str:
    if zlib.crc32(body) != crc:
        return "body fails its CRC check"
    try:
        obj = fmt.unpack_msg(body)
    except Exception as exc:  # msgpack raises several types for bad input
        return f"body is not valid msgpack: {exc}"
    return obj if isinstance(obj, dict) else "body is not a map"


def _resync(mm: mmap.mmap, start: int) -> int:
    """Offset of the next record header that passes its CRC at or after `start`, else EOF."""
    end = len(mm)
    pos = start
    while pos < end:
        hits = [i for i in (mm.find(t, pos) for t in fmt.TAGS) if i >= 0]
        if not hits:
            return end
        i = min(hits)
        tag = mm[i : i + 4]
        if tag == fmt.TAG_CHUNK and end - i >= fmt.CHUNK_HEADER.size:
            if fmt.decode_chunk_header(mm, i) is not None:
                return i
        elif end - i >= fmt.BLOB_HEADER.size and fmt.decode_blob_header(mm, i) is not None:
            return i
        elif end - i < fmt.CHUNK_HEADER.size:
            return i  # too short to judge: the main loop reports truncation
        pos = i + 1
    return end


def _gather(
    mm: mmap.mmap, chunks: list[tuple[int, int, int]], width: int
) -> tuple[np.ndarray, np.ndarray]:
    total = sum(rows for _, rows, _ in chunks)
    data = np.empty((total, width), dtype=np.float64)
    seq = np.empty(total, dtype=np.int64)
    row = 0
    for body, rows, first in chunks:
        # The view into the mmap is released at once, so the mapping can close afterwards.
        data[row : row + rows] = np.frombuffer(
            mm, dtype=fmt.DTYPE, count=rows * width, offset=body
        ).reshape(rows, width)
        seq[row : row + rows] = np.arange(first, first + rows)
        row += rows
    return data, seq


def _lost(trailer: dict[str, Any] | None, events: list[dict[str, Any]]) -> int:
    if trailer is not None and isinstance(trailer.get("lost"), int):
        return int(trailer["lost"])
    return sum(int(e.get("count", 0)) for e in events if e.get("kind") == "rows_lost")
