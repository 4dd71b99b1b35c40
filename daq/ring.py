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
"""

from __future__ import annotations

import numpy as np

#: Sequence word of a slot the writer has claimed and not yet published (or never written).
WRITING = -1


class SampleRing:
    def __init__(self, capacity: int, width: int) -> None:
        if capacity < 2 or capacity & (capacity - 1):
            raise ValueError(f"capacity must be a power of two >= 2, got {capacity}")
        self.capacity = capacity
        self.mask = capacity - 1
        self.width = width
        self.data = np.zeros((capacity, width), dtype=np.float64)
        #: Per-slot sequence word: the index of the row the slot holds, or WRITING.
        self.seqs = np.full(capacity, WRITING, dtype=np.int64)
        # One view per slot, made once: the loop writes into `rows[i]` with `out=`/slice
        # assignment and so creates no array per cycle.
        self.rows = [self.data[i] for i in range(capacity)]
        #: Rows published so far; row k lives in slot k & mask.
        self.published = 0

    def claim_slot(self) -> int:
        """Mark the slot of the next row as being written and return its index.

        Call before writing any part of the row: from here on the row it held is gone."""
        slot = self.published & self.mask
        self.seqs[slot] = WRITING
        return slot

    def claim(self) -> np.ndarray:
        """The row the next `publish()` will make visible. Write it completely first."""
        return self.rows[self.claim_slot()]

    def publish(self) -> None:
        k = self.published
        self.seqs[k & self.mask] = k
        self.published = k + 1

    def publish_block(self, rows: np.ndarray) -> None:
        """Write and publish len(rows) <= capacity rows at once (benchmarks, tests), with the
        same claim → write → publish order per slot as one row at a time."""
        n = len(rows)
        if n > self.capacity:
            raise ValueError(f"a block of {n} rows does not fit a ring of {self.capacity}")
        start = self.published & self.mask
        first = min(n, self.capacity - start)
        if first < n:  # wraps: two blocks
            self.publish_block(rows[:first])
            self.publish_block(rows[first:])
            return
        k = self.published
        words = self.seqs[start : start + n]
        words[:] = WRITING
        self.data[start : start + n] = rows
        words[:] = np.arange(k, k + n)
        self.published = k + n


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
