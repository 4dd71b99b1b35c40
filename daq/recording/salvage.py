"""Closing a run file whose recorder died: the loop process finishes what the service began.

When the service process dies while recording (kill -9, a crash, the OOM killer), the loop
process notices at once (parent-death signal), nulls the valves, runs one more cycle — the null
cycle, state FAULT, fault PROCESS_LOST, null commands — and ends. The rows the recorder had not
written yet (its chunk buffer died with it) are still in the shared sample ring, which holds the
last `DEFAULT_RING_CAPACITY` rows (16 s at 1 kHz). `close_orphaned_run` then, in the loop
process after its backend is closed:

1. scans the run file's record headers (not the bodies: O(records), not O(rows)) for the end of
   the last complete record and the ring index that follows the last chunk, and stops if the
   file already has a trailer (the service closed it before it died);
2. cuts the file back to that end (a record the dying recorder half wrote);
3. appends the ring's rows from that index to the last one published (the null cycle) as chunk
   records, a `rows_lost` event if the ring no longer held some of them, the loop's events the
   service never drained (the fault, the state change), and a trailer with `complete: false`,
   `error` saying why, `closed_by: "loop process"` and `lost: nil` (the reader then counts
   the file's `rows_lost` events, the recorder's and its own); fsyncs.

The run file therefore ends with the null cycle after a service kill as after a loop-process
kill (where the service, which survives, writes the null row: `daq.service.loop_supervisor`).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from daq.loop.shared_link import EventReader, LoopLink
from daq.recording import format as fmt
from daq.ring import RingCursor, SampleRing

log = logging.getLogger(__name__)

#: Rows per chunk record the salvage writes (as the recorder's default).
CHUNK_ROWS = 500


def scan_tail(mm: Any) -> tuple[dict[str, Any], int, int | None, int, bool]:
    """(meta, end of the last complete record, ring index after the last chunk (None: no
    chunk), rows in chunks, trailer present). Only record headers are read."""
    meta, pos = fmt.decode_file_header(mm)
    end = len(mm)
    good, next_seq, rows, trailer = pos, None, 0, False
    while pos < end:
        tag = bytes(mm[pos : pos + 4])
        if tag == fmt.TAG_CHUNK and end - pos >= fmt.CHUNK_HEADER.size:
            ch = fmt.decode_chunk_header(mm, pos)
            if ch is None or pos + fmt.CHUNK_HEADER.size + ch.body_size > end:
                break
            pos += fmt.CHUNK_HEADER.size + ch.body_size
            next_seq, rows = ch.first_seq + ch.rows, rows + ch.rows
        elif tag in (fmt.TAG_EVENT, fmt.TAG_TRAILER) and end - pos >= fmt.BLOB_HEADER.size:
            bh = fmt.decode_blob_header(mm, pos)
            if bh is None or pos + fmt.BLOB_HEADER.size + bh.length > end:
                break
            pos += fmt.BLOB_HEADER.size + bh.length
            trailer = trailer or bh.tag == fmt.TAG_TRAILER
        else:
            break  # a half-written record: everything after it is cut
        good = pos
    return meta, good, next_seq, rows, trailer


def close_orphaned_run(
    path: Path, ring: SampleRing, events: list[dict[str, Any]], why: str
) -> dict[str, Any] | None:
    """Finish `path` from `ring` (module doc); returns the trailer written, None if the file
    was closed already."""
    import mmap

    with path.open("r+b") as f:
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            meta, good, next_seq, rows, has_trailer = scan_tail(mm)
        if has_trailer:
            return None
        width = int(meta["width"])
        if width != ring.width:
            raise ValueError(f"{path}: {width} columns, the ring {ring.width}")
        start = int(meta.get("first_seq", 0)) if next_seq is None else next_seq
        f.truncate(good)
        f.seek(good)
        cursor = RingCursor(ring, start)
        buf = np.empty((CHUNK_ROWS, width), dtype=fmt.DTYPE)
        written = lost_before = 0
        while cursor.available() > 0:
            lost0 = cursor.lost
            n = cursor.read_into(buf)
            if cursor.lost != lost0:
                lost_at = cursor.position - n
                count = cursor.lost - lost0
                f.write(fmt.encode_blob(fmt.TAG_EVENT, {"kind": "rows_lost", "wall": time.time(),
                        "seq": lost_at - count, "count": count, "resume_seq": lost_at,
                        "total": cursor.lost}))  # fmt: skip
            if n:
                f.write(fmt.encode_chunk(cursor.position - n, buf[:n]))
                written += n
        lost_before = cursor.lost
        for ev in events:
            if not str(ev.get("kind", "")).startswith("_"):
                f.write(fmt.encode_blob(fmt.TAG_EVENT, {"wall": time.time(), **ev}))
        trailer = {
            "rows": rows + written,
            "lost": None,  # the reader sums the file's rows_lost events (the recorder's too)
            "complete": False,
            "error": why,
            "closed_by": "loop process",
            "next_seq": cursor.position,
            "end_wall": time.time(),
        }
        f.write(fmt.encode_blob(fmt.TAG_TRAILER, trailer))
        f.flush()
        os.fsync(f.fileno())
    log.error(
        "%s: closed by the loop process after the service died (%d rows added, %d lost)",
        path,
        written,
        lost_before,
    )
    return trailer


def salvage_from_loop(link: LoopLink, ring: SampleRing, why: str) -> None:
    """The loop process's hook (`LoopSpec.orphan_hook`): close the run file the dead service
    was recording, if any. Never raises: the valves are null already, this is bookkeeping."""
    path = link.run_path()
    if path is None:
        return
    try:
        events = EventReader(link).drain()
        close_orphaned_run(Path(path), ring, events, why)
    except Exception as exc:  # a missing/damaged file, a full disk: say so, exit normally
        log.error("could not close %s after the service died: %s", path, exc)
