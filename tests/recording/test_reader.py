"""Reading damaged files: truncation anywhere, corrupt chunks and headers, foreign files."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from daq.recording import Recorder, RunFileError, read_run
from daq.recording import format as fmt
from daq.ring import SampleRing

from .helpers import expected_rows, layout_2dof, meta, publish_rows, records

N = 1050
CHUNK = 100


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, int]:
    layout = layout_2dof()
    ring = SampleRing(4096, layout.width)
    # Full chunks only (flush_rows = chunk_rows): the damage tests pick chunks by their rows.
    rec = Recorder(
        ring, layout, tmp_path_factory.mktemp("rec"), meta(), chunk_rows=CHUNK, flush_rows=CHUNK
    )
    path = rec.start("damage")
    for i in range(N // CHUNK + 1):  # an event between chunks: records of every kind
        publish_rows(ring, min(CHUNK, N - i * CHUNK))
        rec.event("tick", i=i)
    rec.stop()
    return path, path.read_bytes(), layout.width


def _rows_before(recs: list[tuple[int, bytes, int]], width: int, cut: int) -> int:
    """Rows in the chunks that end at or before `cut`."""
    return sum(
        (size - fmt.CHUNK_HEADER.size) // (8 * width)
        for off, tag, size in recs
        if tag == fmt.TAG_CHUNK and off + size <= cut
    )


def test_file_truncated_anywhere_reads_back_every_complete_chunk(
    recorded: tuple[Path, bytes, int], tmp_path: Path
) -> None:
    _path, buf, width = recorded
    _, header_end = fmt.decode_file_header(buf)
    recs = records(buf)
    boundaries = {off for off, _, _ in recs} | {len(buf)}
    rng = np.random.default_rng(0)
    cuts = set(rng.integers(header_end, len(buf), 150).tolist())
    for off, _, size in recs:  # every kind of cut: in a tag, a header, a payload, at the end
        cuts |= {off + 2, off + 4, off + 20, off + size - 1, off + size}
    full = expected_rows(0, N, width)
    for cut in sorted(c for c in cuts if header_end <= c <= len(buf)):
        cut_path = tmp_path / "cut.rigrun"
        cut_path.write_bytes(buf[:cut])
        run = read_run(cut_path)
        n = _rows_before(recs, width, cut)
        assert run.truncated == (cut not in boundaries), cut
        assert not run.corrupt_chunks, cut
        np.testing.assert_array_equal(run.data, full[:n])
        np.testing.assert_array_equal(run.seq, np.arange(n))
        assert run.complete == (cut == len(buf))
        assert (run.trailer is not None) == (cut == len(buf))


def test_corrupt_chunk_payload_is_reported_and_left_out(
    recorded: tuple[Path, bytes, int], tmp_path: Path
) -> None:
    _path, buf, width = recorded
    chunks = [(off, size) for off, tag, size in records(buf) if tag == fmt.TAG_CHUNK]
    off, _size = chunks[3]
    damaged = bytearray(buf)
    damaged[off + fmt.CHUNK_HEADER.size + 123] ^= 0x10  # one bit in the 4th chunk's payload
    p = tmp_path / "crc.rigrun"
    p.write_bytes(bytes(damaged))
    run = read_run(p)
    assert len(run.corrupt_chunks) == 1 and not run.complete and not run.truncated
    bad = run.corrupt_chunks[0]
    assert (bad.offset, bad.kind, bad.first_seq, bad.rows) == (off, "chunk", 300, 100)
    assert "CRC" in bad.reason
    keep = np.r_[0:300, 400:N]
    np.testing.assert_array_equal(run.seq, keep)
    np.testing.assert_array_equal(run.data, expected_rows(0, N, width)[keep])


def test_damaged_record_header_is_skipped_by_resynchronising(
    recorded: tuple[Path, bytes, int], tmp_path: Path
) -> None:
    _path, buf, width = recorded
    chunks = [off for off, tag, _ in records(buf) if tag == fmt.TAG_CHUNK]
    damaged = bytearray(buf)
    damaged[chunks[5] + 5] ^= 0xFF  # the row count of the 6th chunk: its length is a lie
    p = tmp_path / "head.rigrun"
    p.write_bytes(bytes(damaged))
    run = read_run(p)
    assert [c.kind for c in run.corrupt_chunks] == ["unknown"]
    assert run.corrupt_chunks[0].offset == chunks[5]
    keep = np.r_[0:500, 600:N]
    np.testing.assert_array_equal(run.seq, keep)
    np.testing.assert_array_equal(run.data, expected_rows(0, N, width)[keep])
    assert run.trailer is not None and not run.complete


def test_corrupt_event_is_reported(recorded: tuple[Path, bytes, int], tmp_path: Path) -> None:
    path, buf, _ = recorded
    off, _, size = next(r for r in records(buf) if r[1] == fmt.TAG_EVENT)
    damaged = bytearray(buf)
    damaged[off + size - 1] ^= 0x01
    p = tmp_path / "event.rigrun"
    p.write_bytes(bytes(damaged))
    run = read_run(p)
    assert [(c.kind, c.offset) for c in run.corrupt_chunks] == [("event", off)]
    assert len(run.events) == len(read_run(path).events) - 1
    assert len(run.data) == N


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"seq,t\n1,2\n" * 10, "bad magic"),
        (fmt.MAGIC[:5], "too short"),
        (struct.pack("<8sHHII", fmt.MAGIC, 99, 0, 0, 0), "unsupported run file version 99"),
        (fmt.encode_file_header({"width": 1})[:-2], "header truncated"),
        (fmt.encode_file_header({"width": 2, "columns": [{"name": "a"}]}), "1 columns but width 2"),
    ],
)
def test_files_that_are_not_runs_are_refused_with_the_reason(
    tmp_path: Path, content: bytes, message: str
) -> None:
    p = tmp_path / "x.rigrun"
    p.write_bytes(content)
    with pytest.raises(RunFileError, match=message):
        read_run(p)


def test_header_metadata_damage_is_detected(
    recorded: tuple[Path, bytes, int], tmp_path: Path
) -> None:
    _, buf, _ = recorded
    damaged = bytearray(buf)
    damaged[fmt.FILE_HEADER.size + 3] ^= 0x01
    p = tmp_path / "meta.rigrun"
    p.write_bytes(bytes(damaged))
    with pytest.raises(RunFileError, match="metadata fails its CRC"):
        read_run(p)


def test_unknown_column_names_the_columns(recorded: tuple[Path, bytes, int]) -> None:
    run = read_run(recorded[0])
    with pytest.raises(KeyError, match="no column 'nope'"):
        run.column("nope")
    assert run.units[0] == "1" and len(run.units) == run.data.shape[1]
