"""The recorder thread: lossless hand-off, events, lost rows, start/stop contract."""

from __future__ import annotations

import enum
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from daq.recording import Recorder, appender, read_run
from daq.ring import SampleRing
from daq.sample_layout import SampleLayout

from .helpers import expected_rows, layout_2dof, meta, publish_rows


@pytest.fixture
def layout() -> SampleLayout:
    return layout_2dof()


def test_recording_of_n_rows_holds_exactly_n_contiguous_samples(
    tmp_path: Path, layout: SampleLayout
) -> None:
    n = 12_345  # not a multiple of the chunk size: the last chunk is partial
    ring = SampleRing(1 << 14, layout.width)
    rec = Recorder(ring, layout, tmp_path, meta(), chunk_rows=500, fsync_interval_s=0.05)
    path = rec.start("n-rows")
    publish_rows(ring, n, burst=1000)
    stats = rec.stop()

    run = read_run(path)
    assert stats.rows_written == n and stats.lost == 0 and stats.complete and stats.error is None
    assert run.complete and not run.truncated and not run.corrupt_chunks and run.lost == 0
    assert run.data.shape == (n, layout.width)
    np.testing.assert_array_equal(run.column("seq"), np.arange(n))
    np.testing.assert_array_equal(run.seq, np.arange(n))
    np.testing.assert_array_equal(run.data, expected_rows(0, n, layout.width))
    assert run.columns == layout.names
    assert run.meta["rig"] == "sim-2dof" and run.meta["period"] == 0.001
    assert run.meta["columns"] == layout.to_dict()
    assert run.trailer is not None and run.trailer["rows"] == n
    assert stats.bytes_written == path.stat().st_size


def test_records_from_published_onward_and_keeps_profile_text(
    tmp_path: Path, layout: SampleLayout
) -> None:
    ring = SampleRing(1024, layout.width)
    publish_rows(ring, 100)  # before start: not part of the run
    rec = Recorder(ring, layout, tmp_path, meta(), profile_text="[rig]\nid = 'x'\n")
    path = rec.start()
    publish_rows(ring, 250)
    rec.stop()
    run = read_run(path)
    assert path.name.startswith("sim-2dof-") and path.suffix == ".rigrun"
    assert run.meta["first_seq"] == 100 and run.meta["profile"] == "[rig]\nid = 'x'\n"
    np.testing.assert_array_equal(run.seq, np.arange(100, 350))
    np.testing.assert_array_equal(run.data, expected_rows(100, 250, layout.width))


class _State(enum.IntEnum):
    IDLE = 0
    FAULT = 3


def test_events_are_recorded_in_order_with_their_payload(
    tmp_path: Path, layout: SampleLayout
) -> None:
    ring = SampleRing(1024, layout.width)
    rec = Recorder(ring, layout, tmp_path, meta())
    rec.event("ignored_before_start")
    path = rec.start("events")
    publish_rows(ring, 10)
    rec.event("state", old="IDLE", new="ARMED")
    publish_rows(ring, 5)
    rec.event("fault", cause="pressure", channel="p_cap_1", value=2.1e7, state=_State.FAULT)
    rec.event("note", text="operator comment", seq=7)
    stats = rec.stop()
    events = read_run(path).events
    assert [e["kind"] for e in events] == ["state", "fault", "note"]
    assert stats.events_written == 3
    assert events[0]["seq"] == 10 and events[0]["new"] == "ARMED"
    assert events[1]["seq"] == 15 and events[1]["cause"] == "pressure"
    assert events[1]["value"] == 2.1e7 and events[1]["state"] == 3
    assert events[2]["seq"] == 7  # the caller's own seq wins
    assert all(isinstance(e["wall"], float) for e in events)


def test_lapped_writer_counts_lost_rows_and_marks_the_run_incomplete(
    tmp_path: Path, layout: SampleLayout, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    # The writer is held inside its first chunk write while the loop laps it: deterministic.
    ring = SampleRing(64, layout.width)
    entered, release = threading.Event(), threading.Event()
    real = appender._writev
    calls = []

    def stalled(fd: int, parts: list) -> int:
        calls.append(1)
        if len(calls) == 2:  # the first write after the header
            entered.set()
            release.wait(10)
        return real(fd, parts)

    monkeypatch.setattr(appender, "_writev", stalled)
    rec = Recorder(ring, layout, tmp_path, meta(), chunk_rows=16)
    path = rec.start("lapped")
    publish_rows(ring, 16)
    assert entered.wait(10)
    publish_rows(ring, 1000)  # 1000 rows into a 64-row ring while the writer is stuck
    release.set()
    publish_rows(ring, 40, burst=8, pause_s=0.01)
    stats = rec.stop()

    run = read_run(path)
    assert stats.lost > 0 and not stats.complete
    assert stats.rows_written + stats.lost == ring.published  # every row written or counted
    assert run.lost == stats.lost and not run.complete
    assert run.trailer is not None and run.trailer["complete"] is False
    lost_events = [e for e in run.events if e["kind"] == "rows_lost"]
    assert sum(e["count"] for e in lost_events) == stats.lost
    # What was written is exactly the rows the loop published under those indices, untorn.
    np.testing.assert_array_equal(run.column("seq"), run.seq)
    np.testing.assert_array_equal(run.data, expected_rows(0, ring.published, layout.width)[run.seq])
    missing = np.setdiff1d(np.arange(ring.published), run.seq)
    assert len(missing) == stats.lost
    gap = lost_events[0]
    assert gap["seq"] == missing[0] and gap["resume_seq"] == missing[0] + gap["count"]
    assert any("rows lost" in r.message for r in caplog.records if r.levelname == "ERROR")


def test_start_stop_contract(tmp_path: Path, layout: SampleLayout) -> None:
    ring = SampleRing(256, layout.width)
    rec = Recorder(ring, layout, tmp_path, meta())
    assert rec.stop().active is False  # stop before start: harmless
    path = rec.start("one")
    assert rec.stats.active and rec.stats.path == path
    with pytest.raises(RuntimeError, match="already running"):
        rec.start("two")
    rec.stop()
    assert rec.stop().complete  # idempotent
    with pytest.raises(FileExistsError):
        rec.start("one")
    second = rec.start("two")  # a recorder can record several runs in turn
    publish_rows(ring, 3)
    rec.stop()
    assert len(read_run(second).data) == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"meta": {"period": 0.001}}, "rig id"),
        ({"meta": {"rig": "r", "period": 0}}, "period"),
        ({"chunk_rows": 0}, "chunk_rows"),
        ({"fsync_interval_s": 0.0}, "fsync_interval_s"),
        ({"width": 3}, "columns but the ring"),
    ],
)
def test_bad_arguments_are_refused_with_the_reason(
    tmp_path: Path, layout: SampleLayout, kwargs: dict, message: str
) -> None:
    args = {"meta": meta(), **kwargs}  # a copy: the parametrize dict is shared across runs
    ring = SampleRing(256, args.pop("width", layout.width))
    with pytest.raises(ValueError, match=message):
        Recorder(ring, layout, tmp_path, **args)


@pytest.mark.parametrize("name", ["../escape", ".hidden", "", "two\nlines", "tab\there", "del\x7f"])
def test_bad_run_name_is_refused(tmp_path: Path, layout: SampleLayout, name: str) -> None:
    rec = Recorder(SampleRing(256, layout.width), layout, tmp_path, meta())
    with pytest.raises(ValueError, match="plain file name"):
        rec.start(name)
    assert list(tmp_path.iterdir()) == []


def test_unusable_directory_fails_loudly_without_raising(
    tmp_path: Path, layout: SampleLayout, caplog: pytest.LogCaptureFixture
) -> None:
    not_a_dir = tmp_path / "runs"
    not_a_dir.write_text("a file where the run directory should be")
    ring = SampleRing(256, layout.width)
    rec = Recorder(ring, layout, not_a_dir, meta())
    rec.start()
    rec.event("state", new="ARMED")  # harmless
    publish_rows(ring, 10)
    stats = rec.stop()
    assert stats.error is not None and "cannot create the run file" in stats.error
    assert not stats.active and not stats.complete and stats.rows_written == 0
    assert any("recording not started" in r.message for r in caplog.records)


def test_complete_only_once_the_run_is_closed(tmp_path: Path, layout: SampleLayout) -> None:
    ring = SampleRing(256, layout.width)
    rec = Recorder(ring, layout, tmp_path, meta())
    path = rec.start("open")
    publish_rows(ring, 10)
    stats = rec.stats
    assert stats.active and not stats.complete  # still recording: not a complete run yet
    assert read_run(path).meta["first_seq"] == 0  # the header is there from the start
    stats = rec.stop()
    assert not stats.active and stats.complete and read_run(path).complete


def test_unnamed_runs_are_numbered_and_the_trailer_says_the_next_seq(
    tmp_path: Path, layout: SampleLayout
) -> None:
    """Two unnamed runs started in the same second: the first takes the plain stem, the
    second `-2`; the trailer's `next_seq` is the row after the last recorded; a name with a
    space is a plain file name; the stats are a frozen snapshot."""
    import dataclasses

    ring = SampleRing(1 << 12, layout.width)
    paths = []
    for _ in range(2):
        rec = Recorder(ring, layout, tmp_path, meta(), chunk_rows=100)
        paths.append(rec.start())
        publish_rows(ring, 250, burst=50)
        stats = rec.stop()
    first, second = paths
    stamp = r"sim-2dof-\d{8}-\d{6}"
    assert re.fullmatch(stamp, first.stem), first.stem
    # The same second: `-2`; a clock tick between the two gives a plain stem again.
    assert re.fullmatch(stamp + "-2", second.stem) or re.fullmatch(stamp, second.stem)
    assert second.stem != first.stem and second.stem.removesuffix("-2") >= first.stem
    run = read_run(second)
    assert run.trailer is not None and run.trailer["next_seq"] == 500
    assert run.seq[0] == 250 and run.seq[-1] == 499
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.rows_written = 0  # type: ignore[misc]
    rec = Recorder(ring, layout, tmp_path / "a" / "b", meta())  # made, parents too
    assert rec.start("with space").name.startswith("with space")
    assert rec.stop().error is None
