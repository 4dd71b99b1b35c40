"""A full disk or an exhausted quota stops the recording loudly and never the loop."""

from __future__ import annotations

import errno
import logging
import time
from pathlib import Path

import numpy as np
import pytest

from daq.recording import Recorder, appender, read_run
from daq.recording.quota import DiskGuard, directory_size
from daq.ring import SampleRing

from .helpers import expected_rows, layout_2dof, meta, publish_rows


def _publish_until(ring: SampleRing, rec: Recorder, limit: int = 200_000) -> None:
    """Keep the loop running until the recorder gives up (or `limit` rows)."""
    while rec.stats.error is None and ring.published < limit:
        # Never lap the recorder (a slow, loaded machine): this test is about the quota.
        while ring.published - rec.stats.rows_written > ring.capacity // 2:
            if rec.stats.error is not None:
                return
            time.sleep(0.001)
        publish_rows(ring, 100)


def test_quota_stops_recording_loudly_and_the_loop_carries_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    layout = layout_2dof()
    quota = 60_000
    (tmp_path / "older-run.rigrun").write_bytes(b"x" * 10_000)  # the quota covers the directory
    ring = SampleRing(4096, layout.width)
    rec = Recorder(ring, layout, tmp_path, meta(), quota_bytes=quota, chunk_rows=50)
    with caplog.at_level(logging.ERROR, logger="daq.recording"):
        path = rec.start("quota")
        _publish_until(ring, rec)
        stats = rec.stats
        published = ring.published
        publish_rows(ring, 500)  # the loop's hand-off is unaffected
        assert ring.published == published + 500
        final = rec.stop()

    assert stats.error is not None and "quota exceeded" in stats.error
    assert not final.active and not final.complete and final.error == stats.error
    assert any("recording stopped" in r.message for r in caplog.records)
    run = read_run(path)
    assert not run.complete and run.trailer is not None and run.trailer["complete"] is False
    assert "quota" in run.trailer["error"]
    assert [e for e in run.events if e["kind"] == "recording_stopped"]
    # What made it to disk is intact and contiguous from the start.
    np.testing.assert_array_equal(run.seq, np.arange(len(run.data)))
    np.testing.assert_array_equal(run.data, expected_rows(0, len(run.data), layout.width))
    assert final.rows_written == len(run.data) > 0
    # Only the closing event and trailer (a few hundred bytes) may go past the quota.
    assert directory_size(tmp_path) <= quota + 1024


def test_too_little_free_space_refuses_to_start_recording(tmp_path: Path) -> None:
    layout = layout_2dof()
    ring = SampleRing(256, layout.width)
    rec = Recorder(ring, layout, tmp_path, meta(), min_free_bytes=1 << 62)
    path = rec.start("nofree")
    publish_rows(ring, 10)
    stats = rec.stop()
    assert stats.error is not None and "disk nearly full" in stats.error
    assert not stats.complete and stats.rows_written == 0
    assert not path.exists()  # nothing written: no half-made run file left behind


@pytest.mark.parametrize("partial", [False, True])
def test_enospc_stops_recording_and_leaves_a_readable_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, partial: bool
) -> None:
    layout = layout_2dof()
    real = appender._writev
    calls = []

    def disk_full_once(fd: int, parts: list) -> int:
        calls.append(1)
        if len(calls) == 4:  # header, two chunks, then the disk is full
            if partial:  # the kernel took part of the record before failing
                real(fd, [parts[0][:10]])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, parts)

    monkeypatch.setattr(appender, "_writev", disk_full_once)
    ring = SampleRing(4096, layout.width)
    rec = Recorder(ring, layout, tmp_path, meta(), chunk_rows=20)
    path = rec.start("enospc")
    _publish_until(ring, rec)
    stats = rec.stop()
    assert stats.error is not None and "No space left" in stats.error
    run = read_run(path)
    assert not run.truncated and not run.corrupt_chunks  # the partial record was cut off
    assert len(run.data) == 40 and stats.rows_written == 40
    np.testing.assert_array_equal(run.data, expected_rows(0, 40, layout.width))
    assert run.trailer is not None and run.trailer["complete"] is False
    assert "No space left" in run.trailer["error"]


def test_guard_measures_at_most_once_per_interval_and_counts_writes_between(
    tmp_path: Path,
) -> None:
    now = [0.0]
    guard = DiskGuard(tmp_path, quota_bytes=1000, interval_s=1.0, clock=lambda: now[0])
    assert guard.check(900) is None
    guard.wrote(900)
    (tmp_path / "other").write_bytes(b"y" * 50)  # not seen until the next measurement...
    assert guard.check(100) is None
    reason = guard.check(101)  # ...but our own 900 bytes are
    assert reason is not None and "1001 bytes" in reason
    (tmp_path / "ours").write_bytes(b"z" * 900)
    now[0] = 1.0
    reason = guard.check(51)
    assert reason is not None and "1001 bytes" in reason  # 950 measured + 51
    with pytest.raises(ValueError, match=">= 0"):
        DiskGuard(tmp_path, quota_bytes=-1)
