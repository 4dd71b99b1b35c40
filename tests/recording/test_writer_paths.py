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
    publish_rows(ring, 10)
    stats = rec.stop()
    assert stats.error == "ValueError: bad chunk" and not stats.active
    run = read_run(path)
    assert run.trailer is not None and run.trailer["error"] == "ValueError: bad chunk"
    stop = [e for e in run.events if e["kind"] == "recording_stopped"]
    assert len(stop) == 1 and stop[0]["reason"] == "ValueError: bad chunk"
    assert stop[0]["seq"] == 10  # after the rows taken off the ring (none reached the file)
    assert stats.rows_written == 0 and len(run.data) == 0
