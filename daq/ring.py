"""Lock-free hand-off of sample rows from the real-time loop to its consumers.

One writer (the loop) and any number of readers (recorder, telemetry), each with its own cursor.
The writer never waits: it writes a row in place and then publishes it by bumping an integer
counter (a single attribute store is atomic under the GIL). A reader that falls more than the
ring's capacity behind has lost rows; it finds out by comparing counters and counts the loss,
which the writer cannot cause silently.
"""

from __future__ import annotations

import numpy as np


class SampleRing:
    def __init__(self, capacity: int, width: int) -> None:
        if capacity & (capacity - 1):
            raise ValueError("capacity must be a power of two")
        self.capacity = capacity
        self.mask = capacity - 1
        self.width = width
        self.data = np.zeros((capacity, width), dtype=np.float64)
        # One view per slot, made once: the loop writes into `rows[i]` with `out=`/slice
        # assignment and so creates no array per cycle.
        self.rows = [self.data[i] for i in range(capacity)]
        #: Rows published so far; row k lives in slot k & mask.
        self.published = 0

    def claim(self) -> np.ndarray:
        """The row the next `publish()` will make visible. Write it completely first."""
        return self.rows[self.published & self.mask]

    def publish(self) -> None:
        self.published += 1


class RingCursor:
    """A reader's position in a `SampleRing`."""

    def __init__(self, ring: SampleRing, start: int | None = None) -> None:
        self.ring = ring
        self.position = ring.published if start is None else start
        self.lost = 0

    def available(self) -> int:
        return self.ring.published - self.position

    def read_into(self, out: np.ndarray) -> int:
        """Copy up to len(out) published rows into `out` (shape (n, width)); return how many.

        If the writer has lapped this reader, the overwritten rows are skipped and counted in
        `lost` (the caller must report that: a recording with lost rows is incomplete).
        """
        ring = self.ring
        published = ring.published
        behind = published - self.position
        if behind > ring.capacity:
            self.lost += behind - ring.capacity
            self.position = published - ring.capacity
        n = min(published - self.position, len(out))
        if n <= 0:
            return 0
        start = self.position & ring.mask
        first = min(n, ring.capacity - start)
        out[:first] = ring.data[start : start + first]
        if n > first:
            out[first:n] = ring.data[: n - first]
        # The writer may have overwritten the oldest rows while we copied: re-check.
        overrun = ring.published - self.position - ring.capacity
        if overrun > 0:
            # Rows [position, position+overrun) may be torn; drop them from the front.
            drop = min(overrun, n)
            self.lost += drop
            out[: n - drop] = out[drop:n]
            n -= drop
            self.position += drop
        self.position += n
        return n
