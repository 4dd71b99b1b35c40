"""The recorder's less travelled paths: pending events beyond the bound, the file callback and
the read position, a file system without hard links, a disk that fails again while the failure
is being written down, and an error that is neither I/O nor quota."""

from __future__ import annotations

import errno
import logging
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from daq.recording import Recorder, appender, read_run
from daq.recording import writer as writer_mod
from daq.ring import SampleRing
from daq.sample_layout import SampleLayout
from tests.conditions import GENEROUS_S, wait_until

from .helpers import expected_rows, layout_2dof, meta, publish_rows


@pytest.fixture
def layout() -> SampleLayout:
    return layout_2dof()


def _stall_first_write(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Hold the writer thread inside its first write after the header."""
    entered, release = threading.Event(), threading.Event()
    real = appender._writev
    calls: list[int] = []

    def stalled(fd: int, parts: list) -> int:
        calls.append(1)
        if len(calls) == 2:
            entered.set()
            release.wait(30)
        return real(fd, parts)

    monkeypatch.setattr(appender, "_writev", stalled)
    return entered, release


def test_events_beyond_the_pending_bound_are_counted_dropped_and_the_run_incomplete(
    tmp_path: Path, layout: SampleLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_mod, "MAX_PENDING_EVENTS", 3)
    entered, release = _stall_first_write(monkeypatch)
    ring = SampleRing(1024, layout.width)
    rec = Recorder(ring, layout, tmp_path, meta(), chunk_rows=10, flush_rows=10)
    path = rec.start("events")
    publish_rows(ring, 10)
    assert entered.wait(30)
    for k in range(5):  # the writer is stuck: 3 wait, 2 are dropped
        rec.event("note", k=k)
    assert rec.stats.events_dropped == 2
    release.set()
    stats = rec.stop()
    run = read_run(path)
    assert [e["k"] for e in run.events if e["kind"] == "note"] == [0, 1, 2]
    assert stats.events_written == 3 and stats.events_dropped == 2
    assert stats.lost == 0 and stats.error is None and not stats.complete
    assert run.trailer is not None
    assert run.trailer["events_dropped"] == 2 and run.trailer["complete"] is False


def test_the_file_callback_and_the_position_follow_the_recording(
    tmp_path: Path, layout: SampleLayout
) -> None:
    ring = SampleRing(1024, layout.width)
    publish_rows(ring, 7)
    rec = Recorder(ring, layout, tmp_path, meta())
    told: list[str | None] = []
    rec.on_file = told.append
    assert rec.position is None
    path = rec.start("cb")
    assert told == [str(path.resolve())]
    assert rec.position is not None and rec.position >= 7
    publish_rows(ring, 20)
    stats = rec.stop()
    assert told == [str(path.resolve()), None]  # None once the trailer is on disk
    assert rec.position is None and stats.rows_written == 20


@pytest.mark.parametrize("code", [errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS])
def test_without_hard_links_the_run_is_renamed_and_never_clobbers(
    tmp_path: Path, layout: SampleLayout, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    def no_links(src: object, dst: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(writer_mod.os, "link", no_links)
    ring = SampleRing(1024, layout.width)
    rec = Recorder(ring, layout, tmp_path, meta())
    path = rec.start("renamed")
    publish_rows(ring, 30)
    assert rec.stop().complete
    np.testing.assert_array_equal(read_run(path).data, expected_rows(0, 30, layout.width))
    with pytest.raises(FileExistsError):
        rec.start("renamed")
    assert path.stat().st_size > 0 and sorted(p.name for p in tmp_path.iterdir()) == [
        "renamed.rigrun"
    ]  # no temporary file left behind
    unnamed = rec.start()  # the unnamed run's numbering works without links too
    rec.stop()
    assert unnamed.exists() and unnamed != path


def test_another_link_error_fails_the_start_loudly(
    tmp_path: Path, layout: SampleLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(src: object, dst: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(writer_mod.os, "link", broken)
    rec = Recorder(SampleRing(256, layout.width), layout, tmp_path, meta())
    rec.start("eio")
    stats = rec.stop()
    assert stats.error is not None and "cannot create the run file" in stats.error
    assert "Input/output error" in stats.error and list(tmp_path.iterdir()) == []


def test_a_disk_that_fails_again_while_the_stop_is_written_is_logged(
    tmp_path: Path,
    layout: SampleLayout,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    real = appender._writev
    calls: list[int] = []

    def dead_disk(fd: int, parts: list) -> int:
        calls.append(1)
        if len(calls) >= 3:  # header, one chunk, then nothing more
            raise OSError(errno.EIO, "Input/output error")
        return real(fd, parts)

    monkeypatch.setattr(appender, "_writev", dead_disk)
    ring = SampleRing(1024, layout.width)
    rec = Recorder(ring, layout, tmp_path, meta(), chunk_rows=10, flush_rows=10)
    with caplog.at_level(logging.ERROR, logger="daq.recording"):
        path = rec.start("eio")
        publish_rows(ring, 40, burst=10, pause_s=0.02)
        stats = rec.stop()
    assert stats.error == "OSError: [Errno 5] Input/output error"
    assert not stats.complete and stats.rows_written == 10
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("recording stopped: OSError") for m in messages), messages
    assert any("could not finish" in m and "Input/output error" in m for m in messages), messages
    run = read_run(path)  # what was written before the failure is readable
    np.testing.assert_array_equal(run.data, expected_rows(0, 10, layout.width))
    assert run.trailer is None and not run.complete


def test_an_error_that_is_not_io_stops_the_recording_with_its_type(
    tmp_path: Path, layout: SampleLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kw: object) -> bytes:
        raise ValueError("bad chunk")

    ring = SampleRing(1024, layout.width)
    rec = Recorder(ring, layout, tmp_path, meta(), chunk_rows=10, flush_rows=10)
    path = rec.start("value")
    monkeypatch.setattr(writer_mod.fmt, "encode_chunk_header", broken)
    monkeypatch.setattr(writer_mod, "MAX_PENDING_EVENTS", 3)
    publish_rows(ring, 10)
    assert wait_until(lambda: rec.stats.error is not None, GENEROUS_S)
    for k in range(5):  # after the failure: ignored, neither queued nor counted as dropped
        rec.event("late", k=k)
    stats = rec.stop()
    assert stats.events_dropped == 0
    assert stats.error == "ValueError: bad chunk" and not stats.active
    run = read_run(path)
    assert run.trailer is not None and run.trailer["error"] == "ValueError: bad chunk"
    stop = [e for e in run.events if e["kind"] == "recording_stopped"]
    assert len(stop) == 1 and stop[0]["reason"] == "ValueError: bad chunk"
    assert stop[0]["seq"] == 10  # after the rows taken off the ring (none reached the file)
    assert run.trailer["next_seq"] == 10
    assert stats.rows_written == 0 and len(run.data) == 0


def test_rows_reach_the_file_as_soon_as_flush_rows_are_buffered(
    tmp_path: Path, layout: SampleLayout
) -> None:
    ring = SampleRing(1024, layout.width)
    rec = Recorder(
        ring, layout, tmp_path, meta(), chunk_rows=100, flush_rows=10, fsync_interval_s=3600.0
    )
    path = rec.start("flush")
    try:
        publish_rows(ring, 10)  # exactly flush_rows: appended without waiting for an fsync
        assert wait_until(lambda: len(read_run(path).data) == 10, GENEROUS_S)
        assert rec.stats.chunks_written == 1
    finally:
        rec.stop()


def test_the_unwritten_high_water_mark_counts_the_buffered_rows(
    tmp_path: Path, layout: SampleLayout
) -> None:
    ring = SampleRing(1024, layout.width)
    rec = Recorder(
        ring, layout, tmp_path, meta(), chunk_rows=100, flush_rows=100, fsync_interval_s=3600.0
    )
    rec.start("unwritten")
    try:
        publish_rows(ring, 50)
        assert wait_until(lambda: rec.position == 50, GENEROUS_S)  # 50 rows in the buffer
        assert rec.stats.max_unwritten <= 50 and rec.stats.rows_written == 0
        publish_rows(ring, 30)
        assert wait_until(lambda: rec.position == 80, GENEROUS_S)
        # A pass found at least one new row in the ring besides the 50 buffered.
        assert 51 <= rec.stats.max_unwritten <= 80
    finally:
        rec.stop()


def test_an_idle_writer_does_not_spin_on_an_empty_ring(
    tmp_path: Path, layout: SampleLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daq.ring import RingCursor

    calls: list[int] = []
    real = RingCursor.read_into

    def counted(self: RingCursor, out: np.ndarray) -> int:
        calls.append(1)
        return real(self, out)

    monkeypatch.setattr(RingCursor, "read_into", counted)
    ring = SampleRing(1024, layout.width)
    rec = Recorder(ring, layout, tmp_path, meta(), fsync_interval_s=0.01)
    rec.start("idle")
    publish_rows(ring, 10)
    assert wait_until(lambda: rec.position == 10, GENEROUS_S)
    seen = len(calls)
    assert wait_until(lambda: rec.stats.chunks_written >= 1, GENEROUS_S)  # passes go on
    rec.stop()
    assert 1 <= seen <= 10 and len(calls) <= seen + 1  # reads only when rows are there


class _LappedWriter:
    """A writer on a 64-row ring (16-row chunks) that the test can lap on purpose: `lap(n)`
    holds the writer at the start of its next pass, publishes n rows, then lets it go."""

    def __init__(self, tmp_path: Path, layout: SampleLayout, monkeypatch: pytest.MonkeyPatch):
        self.hold, self.held, self.release = threading.Event(), threading.Event(), threading.Event()
        real = Recorder._note_unwritten

        def gate(rec: Recorder) -> None:
            if self.hold.is_set() and not self.release.is_set():
                self.held.set()
                self.release.wait(GENEROUS_S)  # until the test has lapped the writer
            real(rec)

        monkeypatch.setattr(Recorder, "_note_unwritten", gate)
        self.ring = SampleRing(64, layout.width)
        self.rec = Recorder(
            self.ring, layout, tmp_path, meta(), chunk_rows=16, flush_rows=16,
            fsync_interval_s=3600.0,
        )  # fmt: skip

    def lap(self, rows: int) -> None:
        for e in (self.hold, self.held, self.release):
            e.clear()
        self.hold.set()
        assert self.held.wait(GENEROUS_S)  # the writer waits at the start of its next pass
        publish_rows(self.ring, rows)
        self.release.set()


def test_a_gap_inside_a_partly_filled_chunk_splits_it(
    tmp_path: Path, layout: SampleLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer holds 8 rows (under flush_rows) when the loop laps it: those 8 go out as
    their own chunk, the rows after the gap start the next, every row under its own index."""
    w = _LappedWriter(tmp_path, layout, monkeypatch)
    rec = w.rec
    path = rec.start("gap")
    publish_rows(w.ring, 8)
    assert wait_until(lambda: rec.position == 8, GENEROUS_S)
    w.lap(200)  # laps the 64-row ring: rows 8 … 143 are overwritten
    stats = rec.stop()
    run = read_run(path)
    assert stats.error is None and stats.lost == 200 - 64
    assert stats.rows_written + stats.lost == 208
    np.testing.assert_array_equal(run.seq, np.r_[np.arange(8), np.arange(144, 208)])
    np.testing.assert_array_equal(run.column("seq"), run.seq)
    np.testing.assert_array_equal(run.data, expected_rows(0, 208, layout.width)[run.seq])


def test_a_name_given_with_its_suffix_keeps_one_suffix(
    tmp_path: Path, layout: SampleLayout
) -> None:
    rec = Recorder(SampleRing(256, layout.width), layout, tmp_path, meta())
    assert rec.start("named.rigrun") == tmp_path / "named.rigrun"
    rec.stop()
    assert rec.start("plain") == tmp_path / "plain.rigrun"
    rec.stop()


@pytest.mark.parametrize(("chunk_rows", "flush_rows"), [(20, 20), (50, 50), (500, 50)])
def test_flush_rows_defaults_to_fifty_or_the_chunk(
    tmp_path: Path, layout: SampleLayout, chunk_rows: int, flush_rows: int
) -> None:
    rec = Recorder(SampleRing(256, layout.width), layout, tmp_path, meta(), chunk_rows=chunk_rows)
    assert rec.flush_rows == flush_rows


@pytest.mark.parametrize("rig", ["", None, 5])
def test_the_rig_id_must_be_a_non_empty_string(
    tmp_path: Path, layout: SampleLayout, rig: object
) -> None:
    with pytest.raises(ValueError, match="rig id as a non-empty string"):
        Recorder(SampleRing(256, layout.width), layout, tmp_path, {"rig": rig, "period": 0.001})


def test_the_stop_and_the_trailer_are_written_past_an_exhausted_quota(
    tmp_path: Path, layout: SampleLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the guard refuses every further byte, the recording still ends readable: the
    stop event and the incomplete trailer are written unguarded (a few hundred bytes)."""
    from daq.recording.quota import DiskGuard

    ring = SampleRing(1024, layout.width)
    rec = Recorder(ring, layout, tmp_path, meta(), chunk_rows=10, flush_rows=10)
    path = rec.start("quota")  # the header is written
    monkeypatch.setattr(DiskGuard, "check", lambda self, pending: "quota exceeded (test)")
    publish_rows(ring, 10)
    stats = rec.stop()
    assert stats.error == "quota exceeded (test)" and stats.rows_written == 0
    run = read_run(path)
    assert run.trailer is not None and run.trailer["error"] == "quota exceeded (test)"
    assert [e["kind"] for e in run.events] == ["recording_stopped"]


def test_two_laps_in_one_recording_are_counted_each_on_its_own(
    tmp_path: Path, layout: SampleLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop laps the writer twice: each `rows_lost` event counts its own gap (not the
    running total), the total is their sum, and the rows kept are every one not overwritten."""
    w = _LappedWriter(tmp_path, layout, monkeypatch)
    rec = w.rec
    path = rec.start("two-laps")

    def caught_up(rows: int) -> bool:
        return wait_until(lambda: rec.position == rows, GENEROUS_S)

    published = 0
    for lap in (200, 100):
        publish_rows(w.ring, 16)
        published += 16
        assert caught_up(published)
        w.lap(lap)  # laps the 64-row ring
        published += lap
        assert caught_up(published)
    stats = rec.stop()
    run = read_run(path)
    counts = [e["count"] for e in run.events if e["kind"] == "rows_lost"]
    assert counts == [200 - 64, 100 - 64]
    assert stats.error is None and stats.lost == sum(counts)
    assert stats.rows_written + stats.lost == published
    kept = np.r_[np.arange(16), np.arange(152, 232), np.arange(268, 332)]
    np.testing.assert_array_equal(run.seq, kept)


def test_a_chunk_of_one_row_is_allowed(tmp_path: Path, layout: SampleLayout) -> None:
    """chunk_rows ≥ 1: one row per record is the smallest chunk, and a valid one."""
    ring = SampleRing(256, layout.width)
    rec = Recorder(ring, layout, tmp_path, meta(), chunk_rows=1)
    assert rec.flush_rows == 1
    path = rec.start("ones")
    publish_rows(ring, 5)
    assert wait_until(lambda: rec.position == 5, GENEROUS_S)
    stats = rec.stop()
    assert stats.error is None and stats.chunks_written == 5
    np.testing.assert_array_equal(read_run(path).seq, np.arange(5))


def test_rows_read_in_pieces_without_a_gap_fill_one_chunk(
    tmp_path: Path, layout: SampleLayout
) -> None:
    """The writer reads whatever the loop has published; pieces that follow on from the rows
    it holds join them in the same chunk (a new chunk only at chunk_rows or at a gap)."""
    ring = SampleRing(256, layout.width)
    rec = Recorder(
        ring, layout, tmp_path, meta(), chunk_rows=10, flush_rows=10, fsync_interval_s=3600.0
    )
    path = rec.start("pieces")
    for done in (3, 6, 9, 10):
        publish_rows(ring, done - rec.position)
        assert wait_until(lambda d=done: rec.position == d, GENEROUS_S)
    assert wait_until(lambda: rec.stats.chunks_written == 1, GENEROUS_S)
    stats = rec.stop()
    assert stats.chunks_written == 1 and stats.lost == 0
    np.testing.assert_array_equal(read_run(path).seq, np.arange(10))


def test_one_pass_reads_at_most_a_ring_of_rows_however_fast_the_loop_publishes(
    tmp_path: Path, layout: SampleLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loop that publishes 16 more rows whenever the writer looks would keep it reading for
    ever: each pass stops after one ring's worth (64 rows here) so that events and `stop()`
    are served under any load — then the next pass goes on from where it left."""
    from daq.ring import RingCursor

    ring = SampleRing(64, layout.width)
    passes: list[list[int]] = []
    real_available, real_read = RingCursor.available, RingCursor.read_into
    real_drain = Recorder._drain

    def loop_publishes_first(self: RingCursor) -> int:
        if ring.published < 224:
            publish_rows(ring, 16)
        return real_available(self)

    def counted_read(self: RingCursor, out: np.ndarray) -> int:
        n = real_read(self, out)
        passes[-1].append(n)
        return n

    def counted_pass(rec: Recorder) -> None:
        passes.append([])
        real_drain(rec)

    monkeypatch.setattr(RingCursor, "available", loop_publishes_first)
    monkeypatch.setattr(RingCursor, "read_into", counted_read)
    monkeypatch.setattr(Recorder, "_drain", counted_pass)
    rec = Recorder(ring, layout, tmp_path, meta(), chunk_rows=256, flush_rows=256,
                   fsync_interval_s=3600.0)  # fmt: skip
    rec.start("bounded")
    assert wait_until(lambda: rec.position == 224, GENEROUS_S)
    stats = rec.stop()
    busy = [sum(p) for p in passes if p]
    assert busy[0] == 64 and max(busy) <= 64, busy
    assert sum(busy) == 224 and stats.lost == 0 and stats.complete
