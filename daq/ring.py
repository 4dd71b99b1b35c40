"""Lock-free hand-off of sample rows from the real-time loop to its consumers.

One writer (the loop) and any number of readers (recorder, telemetry), each with its own cursor.
The writer never waits and overwrites the oldest row (a recorder wants overwrite-oldest plus a
loss count, not drop-newest). Each slot carries a sequence word, the seqlock of
/work/shared/notes/anchors-rt-identification-plant-liveview.md §1, Lessons 2–3:

- `claim_slot()` sets the slot's word to WRITING *before* the writer touches the row (the row
  being written is the one `capacity` rows older than the next to be published, so it is no
  longer whole even though the counter has not moved yet);
- `publish()` sets the word to the row's index k, then bumps the global `published` counter.

A reader copies rows and then re-reads their words: a row whose word is no longer its index k
was claimed or rewritten while (or before) it was copied, so it is not returned but counted in
`lost`. Words only ever grow per slot, so "word == k after the copy" proves nothing touched the
slot between publish(k) and the end of the copy. Stores are aligned int64 numpy items, ordered
on x86-64 and serialised by the GIL in CPython.

Across processes (issue 15: the loop runs in a process of its own, `daq/loop/process_main.py`),
`SampleRing.create_shared()` puts the counter, the words and the rows in one
`multiprocessing.shared_memory` segment and `SampleRing.attach()` maps it in the service
process, where the recorder and the telemetry publisher read it with the same cursors. The
seqlock argument is unchanged: x86-64 (TSO) keeps the writer's aligned 8-byte stores in program
order for every other core, and a reader's loads are not reordered with older loads, so a
reader that sees word == k after its copy saw a whole row. (A weakly ordered CPU would need
fences between the stores; this project targets x86-64 PCs.)
"""

from __future__ import annotations

import os
import secrets
from multiprocessing import shared_memory

import numpy as np

#: Sequence word of a slot the writer has claimed and not yet published (or never written).
WRITING = -1


#: Bytes before the sequence words in a shared segment: the `published` counter, padded to a
#: cache line so that the writer's counter store never shares a line with a row.
_HEADER_BYTES = 64


def shared_name(what: str) -> str:
    """A segment name unique to this process and call (parallel services and tests never
    collide; POSIX shared-memory names are limited to 255 bytes and one leading slash)."""
    return f"hydrig-{what}-{os.getpid()}-{secrets.token_hex(4)}"


class SharedSegment(shared_memory.SharedMemory):
    """A shared-memory segment whose mapping lives as long as any numpy view of it.

    `SharedMemory.close()` (and its `__del__`) refuses with BufferError while views exist, and
    the recorder, the publisher and the loop each hold views; so this never closes explicitly:
    the mapping goes when the last view does. `unlink()` removes the name (the service does it
    at shutdown; the memory stays valid for whoever still maps it)."""

    def __del__(self) -> None:
        pass

    def unlink_quietly(self) -> None:
        try:
            self.unlink()
        except FileNotFoundError:
            pass


class SampleRing:
    def __init__(self, capacity: int, width: int, *, shm: SharedSegment | None = None) -> None:
        if capacity < 2 or capacity & (capacity - 1):
            raise ValueError(f"capacity must be a power of two >= 2, got {capacity}")
        self.capacity = capacity
        self.mask = capacity - 1
        self.width = width
        #: The shared segment the ring lives in (None: private memory of this process).
        self.shm = shm
        if shm is None:
            buf = bytearray(self.segment_bytes(capacity, width))
        else:
            if shm.size < self.segment_bytes(capacity, width):
                raise ValueError(
                    f"shared segment {shm.name} has {shm.size} bytes, a ring of {capacity}×{width} "
                    f"needs {self.segment_bytes(capacity, width)}"
                )
            buf = shm.buf  # type: ignore[assignment]
        #: `published[0]`: rows published so far; row k lives in slot k & mask.
        self._published = np.ndarray((1,), dtype=np.int64, buffer=buf, offset=0)
        words = _HEADER_BYTES
        #: Per-slot sequence word: the index of the row the slot holds, or WRITING.
        self.seqs = np.ndarray((capacity,), dtype=np.int64, buffer=buf, offset=words)
        self.data = np.ndarray(
            (capacity, width), dtype=np.float64, buffer=buf, offset=words + 8 * capacity
        )
        if shm is None:
            self.seqs.fill(WRITING)
        # One view per slot, made once: the loop writes into `rows[i]` with `out=`/slice
        # assignment and so creates no array per cycle.
        self.rows = [self.data[i] for i in range(capacity)]
        # The writer's own copy of the counter (a Python int: no numpy scalar per cycle).
        self._next = int(self._published[0])

    @staticmethod
    def segment_bytes(capacity: int, width: int) -> int:
        return _HEADER_BYTES + 8 * capacity + 8 * capacity * width

    @classmethod
    def create_shared(cls, capacity: int, width: int, name: str | None = None) -> SampleRing:
        """A new ring in a new shared segment (the service creates it and unlinks it at exit)."""
        shm = SharedSegment(
            name=name or shared_name("ring"), create=True, size=cls.segment_bytes(capacity, width)
        )
        ring = cls(capacity, width, shm=shm)
        ring.seqs.fill(WRITING)
        ring.data.fill(0.0)
        ring._published[0] = 0
        return ring

    @classmethod
    def attach(cls, name: str, capacity: int, width: int) -> SampleRing:
        """Map a ring another process created (the loop process writes through this)."""
        return cls(capacity, width, shm=SharedSegment(name=name))

    @property
    def published(self) -> int:
        """Rows published so far (read from the shared counter: any process sees it)."""
        return int(self._published[0])

    def unlink(self) -> None:
        """Remove the shared segment's name (the service, at shutdown). Views stay valid."""
        if self.shm is not None:
            self.shm.unlink_quietly()

    def adopt(self) -> None:
        """Become the writer after the previous one (the loop process) died: continue from
        the shared counter. Only while nobody else writes (the service, after the death)."""
        self._next = int(self._published[0])

    def claim_slot(self) -> int:
        """Mark the slot of the next row as being written and return its index.

        Call before writing any part of the row: from here on the row it held is gone."""
        slot = self._next & self.mask
        self.seqs[slot] = WRITING
        return slot

    def claim(self) -> np.ndarray:
        """The row the next `publish()` will make visible. Write it completely first."""
        return self.rows[self.claim_slot()]

    def publish(self) -> None:
        k = self._next
        self.seqs[k & self.mask] = k
        self._next = k + 1
        self._published[0] = k + 1

    def publish_block(self, rows: np.ndarray) -> None:
        """Write and publish len(rows) <= capacity rows at once (benchmarks, tests), with the
        same claim → write → publish order per slot as one row at a time."""
        n = len(rows)
        if n > self.capacity:
            raise ValueError(f"a block of {n} rows does not fit a ring of {self.capacity}")
        start = self._next & self.mask
        first = min(n, self.capacity - start)
        if first < n:  # wraps: two blocks
            self.publish_block(rows[:first])
            self.publish_block(rows[first:])
            return
        k = self._next
        words = self.seqs[start : start + n]
        words[:] = WRITING
        self.data[start : start + n] = rows
        words[:] = np.arange(k, k + n)
        self._next = k + n
        self._published[0] = k + n


class RingCursor:
    """A reader's position in a `SampleRing`."""

    def __init__(self, ring: SampleRing, start: int | None = None) -> None:
        self.ring = ring
        self.position = ring.published if start is None else start
        #: Rows overwritten before this reader could copy them (never returned).
        self.lost = 0

    def available(self) -> int:
        return self.ring.published - self.position

    def read_into(self, out: np.ndarray) -> int:
        """Copy up to len(out) published rows into `out` (shape (n, width)); return how many.

        The rows returned are rows position−n … position−1 after the call, every one intact.
        Rows overwritten before or during the copy are skipped and counted in `lost` (the caller
        must report that: a recording with lost rows is incomplete). The result may be 0 even
        when rows were available, if all of them were overwritten during the copy.
        """
        ring = self.ring
        published = ring.published
        oldest = published - ring.capacity  # rows below this are certainly overwritten
        if self.position < oldest:
            self.lost += oldest - self.position
            self.position = oldest
        n = min(published - self.position, len(out))
        if n <= 0:
            return 0
        self._copy(out, self.position, n)
        # Seqlock re-check: every slot must still hold the row we meant to copy.
        words = self._words(self.position, n)
        bad = np.flatnonzero(words != np.arange(self.position, self.position + n))
        if len(bad):
            # The writer overwrites oldest first, so bad rows are a prefix; dropping through
            # the last bad one is right in any case (nothing returned is torn).
            drop = int(bad[-1]) + 1
            self.lost += drop
            out[: n - drop] = out[drop:n]
            n -= drop
            self.position += drop
        self.position += n
        return n

    def _copy(self, out: np.ndarray, position: int, n: int) -> None:
        ring = self.ring
        start = position & ring.mask
        first = min(n, ring.capacity - start)
        out[:first] = ring.data[start : start + first]
        if n > first:
            out[first:n] = ring.data[: n - first]

    def _words(self, position: int, n: int) -> np.ndarray:
        ring = self.ring
        start = position & ring.mask
        first = min(n, ring.capacity - start)
        if n == first:
            return ring.seqs[start : start + n]
        return np.concatenate((ring.seqs[start:], ring.seqs[: n - first]))
