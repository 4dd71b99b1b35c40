"""`daq.ring`: a reader never returns a row other than the one whose index it reports, and every
row overwritten before it was read is counted lost.

Rows written here hold their own index in every column, so "the row returned for index k" is
checked by value. Interleavings inside a copy are made deterministic by a cursor whose `_copy`
lets the writer run in the middle of it (the window a preempted reader thread has).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from daq.ring import WRITING, RingCursor, SampleRing

WIDTH = 5


def write(ring: SampleRing, n: int) -> None:
    for _ in range(n):
        k = ring.published
        ring.claim()[:] = k
        ring.publish()


def check_rows(cursor: RingCursor, out: np.ndarray, n: int) -> None:
    """The n rows returned are indices position−n … position−1, each holding its own index."""
    expected = np.arange(cursor.position - n, cursor.position, dtype=np.float64)
    np.testing.assert_array_equal(out[:n], np.repeat(expected[:, None], out.shape[1], axis=1))


class WriterDuringCopy(RingCursor):
    """A cursor whose copy is interrupted, half-way, by `during()` (the writer running)."""

    def __init__(self, ring: SampleRing, during: Callable[[], None], start: int = 0) -> None:
        super().__init__(ring, start)
        self.during = during

    def _copy(self, out: np.ndarray, position: int, n: int) -> None:
        half = n // 2
        super()._copy(out[:half], position, half)
        self.during()
        super()._copy(out[half:n], position + half, n - half)


def test_rows_come_back_in_order_across_the_wrap() -> None:
    ring = SampleRing(8, WIDTH)
    cursor = RingCursor(ring)
    out = np.empty((8, WIDTH))
    write(ring, 6)
    assert cursor.read_into(out) == 6
    check_rows(cursor, out, 6)
    write(ring, 7)  # slots 6, 7, 0, … 4: wraps
    assert cursor.read_into(out) == 7 and cursor.lost == 0
    check_rows(cursor, out, 7)
    assert cursor.position == 13 and cursor.available() == 0


def test_the_claimed_but_unpublished_slot_is_not_returned_as_the_oldest_row() -> None:
    # The issue's deterministic case: 8 rows published, the writer has claimed row 8's slot
    # (slot 0) and written into it, but not published it yet. Row 0 is gone, not "row 8".
    ring = SampleRing(8, WIDTH)
    cursor = RingCursor(ring, start=0)
    write(ring, 8)
    ring.claim()[:] = 8  # partly or wholly written, not published
    out = np.empty((8, WIDTH))
    n = cursor.read_into(out)
    assert n == 7 and cursor.lost == 1
    check_rows(cursor, out, 7)
    assert cursor.position == 8
    ring.publish()
    assert cursor.read_into(out) == 1
    check_rows(cursor, out, 1)


def test_a_reader_lapped_by_exactly_one_capacity_loses_exactly_one_capacity() -> None:
    ring = SampleRing(8, WIDTH)
    cursor = RingCursor(ring, start=0)
    write(ring, 16)
    out = np.empty((16, WIDTH))
    n = cursor.read_into(out)
    assert (n, cursor.lost, cursor.position) == (8, 8, 16)
    check_rows(cursor, out, 8)


def test_a_reader_lapped_by_one_capacity_during_its_copy_gets_0_rows() -> None:
    # The copy sees rows 0…7 in the ring; while it copies, the writer publishes 8 more rows,
    # so every slot now holds a row 8 higher. Nothing copied is row 0…7: all 8 are lost.
    ring = SampleRing(8, WIDTH)
    write(ring, 8)
    cursor = WriterDuringCopy(ring, lambda: write(ring, 8), start=0)
    out = np.empty((8, WIDTH))
    assert cursor.read_into(out) == 0
    assert cursor.lost == 8 and cursor.position == 8
    # It carries on from where the writer is, with nothing torn.
    cursor.during = lambda: None
    assert cursor.read_into(out) == 8
    check_rows(cursor, out, 8)
    assert cursor.lost == 8


@pytest.mark.parametrize("written_during", [1, 3, 7])
def test_rows_overwritten_during_the_copy_are_dropped_and_counted(written_during: int) -> None:
    ring = SampleRing(8, WIDTH)
    write(ring, 8)

    def writer() -> None:
        write(ring, written_during)
        ring.claim()[:] = -99.0  # and the writer is half-way through the next row

    cursor = WriterDuringCopy(ring, writer, start=0)
    out = np.empty((8, WIDTH))
    n = cursor.read_into(out)
    gone = written_during + 1  # published over, plus the claimed slot
    assert n == 8 - gone and cursor.lost == gone
    check_rows(cursor, out, n)


def test_no_rows_available_returns_0_without_loss() -> None:
    ring = SampleRing(8, WIDTH)
    cursor = RingCursor(ring)
    out = np.empty((4, WIDTH))
    assert cursor.read_into(out) == 0 and cursor.lost == 0
    write(ring, 3)
    assert cursor.read_into(out[:0]) == 0 and cursor.position == 0


def test_capacity_must_be_a_power_of_two() -> None:
    for bad in (12, 1, 0, 3):
        with pytest.raises(ValueError, match="power of two"):
            SampleRing(bad, WIDTH)
    ring = SampleRing(2, WIDTH)  # the smallest ring: two slots
    write(ring, 5)
    out = np.zeros((2, WIDTH))
    cursor = RingCursor(ring, start=3)
    assert cursor.read_into(out) == 2 and list(out[:, 0]) == [3.0, 4.0]


def test_unlink_removes_a_shared_rings_name_once_and_quietly_after() -> None:
    from multiprocessing import shared_memory

    ring = SampleRing.create_shared(8, WIDTH)
    name = ring.shm.name if ring.shm is not None else ""
    attached = SampleRing.attach(name, 8, WIDTH)  # the name exists until unlinked
    assert attached.capacity == 8
    ring.unlink()
    with pytest.raises(FileNotFoundError):
        shared_memory.SharedMemory(name=name)
    ring.unlink()  # a second unlink (both processes at shutdown) is not an error
    write(ring, 3)  # the views stay valid after the name is gone
    assert ring.published == 3
    SampleRing(8, WIDTH).unlink()  # a private ring has no name: nothing to do


def test_threaded_stress_every_returned_row_is_the_row_of_its_index() -> None:
    """A writer thread laps a small ring as fast as it can while a reader with an odd batch size
    copies; every row returned must hold its own index, and rows returned + lost must account
    for every index the reader moved past."""
    ring = SampleRing(16, 64)  # wide rows: copies take long enough to be preempted mid-copy
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            k = ring.published
            row = ring.claim()
            row[:32] = k
            row[32:] = k  # two stores: a row torn between them would be caught
            ring.publish()

    cursor = RingCursor(ring, start=0)
    out = np.empty((13, 64))
    returned = 0
    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline or cursor.lost == 0 or returned < 1000:
            before = cursor.position
            n = cursor.read_into(out)
            if n:
                idx = np.arange(cursor.position - n, cursor.position, dtype=np.float64)
                bad = np.flatnonzero(np.any(out[:n] != idx[:, None], axis=1))
                assert len(bad) == 0, f"row {idx[bad[0]]} holds {out[bad[0], [0, -1]]}"
            assert cursor.position - before >= n
            returned += n
            assert time.monotonic() < deadline + 60, "the writer never lapped the reader"
    finally:
        stop.set()
        thread.join()
    assert returned + cursor.lost == cursor.position


def test_a_published_block_reads_back_like_rows_published_one_by_one() -> None:
    ring = SampleRing(8, WIDTH)
    write(ring, 5)
    cursor = RingCursor(ring)
    ring.publish_block(np.repeat(np.arange(5.0, 11.0)[:, None], WIDTH, axis=1))  # wraps
    out = np.empty((8, WIDTH))
    assert cursor.read_into(out) == 6 and cursor.lost == 0
    check_rows(cursor, out, 6)
    with pytest.raises(ValueError, match="does not fit"):
        ring.publish_block(np.zeros((9, WIDTH)))


def test_a_block_of_exactly_one_capacity_is_published_and_one_more_row_refused() -> None:
    ring = SampleRing(8, WIDTH)
    assert np.all(ring.seqs == WRITING)  # no slot holds a row yet (the seqlock's start)
    block = np.arange(8 * WIDTH, dtype=float).reshape(8, WIDTH)
    ring.publish_block(block)
    assert ring.published == 8 and list(ring.seqs) == list(range(8))
    out = np.zeros((8, WIDTH))
    assert RingCursor(ring, start=0).read_into(out) == 8
    np.testing.assert_array_equal(out, block)
    with pytest.raises(ValueError):
        ring.publish_block(np.zeros((9, WIDTH)))


def test_a_shared_ring_takes_the_name_it_is_given() -> None:
    name = f"hydrig-test-ring-{os.getpid()}"
    ring = SampleRing.create_shared(8, WIDTH, name=name)
    try:
        assert ring.shm is not None and ring.shm.name.lstrip("/") == name
        assert np.all(ring.seqs == WRITING) and ring.published == 0
    finally:
        ring.unlink()
