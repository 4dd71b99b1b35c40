"""Property tests of the record encoders: round trips, and any one damaged byte is detected."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from daq.recording import RunFileError, read_run
from daq.recording import format as fmt

chunks = st.tuples(st.integers(1, 40), st.integers(1, 12)).flatmap(
    lambda shape: arrays(np.float64, shape, elements=st.floats(allow_nan=True, width=64))
)
seqs = st.integers(0, 2**64 - 1)


@given(rows=chunks, first=seqs)
def test_chunk_round_trip_is_exact(rows: np.ndarray, first: int) -> None:
    record = fmt.encode_chunk(first, rows)
    assert len(record) == fmt.CHUNK_HEADER.size + rows.size * 8
    got_first, got = fmt.decode_chunk(record)
    assert got_first == first
    # Bitwise equality: NaN payloads and signed zeros survive too.
    np.testing.assert_array_equal(got.view(np.uint64), rows.view(np.uint64))


@settings(max_examples=200)
@given(rows=chunks, first=seqs, data=st.data())
def test_any_damaged_byte_in_a_chunk_is_detected(rows: np.ndarray, first: int, data) -> None:
    record = bytearray(fmt.encode_chunk(first, rows))
    i = data.draw(st.integers(0, len(record) - 1), label="byte")
    flip = data.draw(st.integers(1, 255), label="xor")
    record[i] ^= flip
    with pytest.raises(RunFileError):
        fmt.decode_chunk(bytes(record))


@given(rows=chunks, first=seqs, data=st.data())
def test_a_cut_chunk_is_detected(rows: np.ndarray, first: int, data) -> None:
    record = fmt.encode_chunk(first, rows)
    cut = data.draw(st.integers(0, len(record) - 1), label="cut")
    with pytest.raises(RunFileError, match="truncated"):
        fmt.decode_chunk(record[:cut])


payloads = st.dictionaries(
    st.text(max_size=8),
    st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=20), st.booleans(), st.none()),
    max_size=6,
)


@given(payload=payloads, tag=st.sampled_from([fmt.TAG_EVENT, fmt.TAG_TRAILER]))
def test_event_record_round_trip(payload: dict, tag: bytes) -> None:
    record = fmt.encode_blob(tag, payload)
    head = fmt.decode_blob_header(record, 0)
    assert head is not None and head.tag == tag
    assert head.length == len(record) - fmt.BLOB_HEADER.size
    assert fmt.unpack_msg(record[fmt.BLOB_HEADER.size :]) == payload


def test_chunk_must_be_two_dimensional() -> None:
    with pytest.raises(ValueError, match="2-D"):
        fmt.encode_chunk(0, np.zeros(3))


def _run_file(rows_per_chunk: list[int], width: int) -> tuple[bytes, np.ndarray]:
    header = fmt.encode_file_header(
        {
            "rig": "p",
            "period": 0.001,
            "width": width,
            "columns": [{"name": f"c{i}"} for i in range(width)],
        }
    )
    total = sum(rows_per_chunk)
    data = np.arange(total * width, dtype=np.float64).reshape(total, width) * 0.5
    parts, seq = [header], 0
    for n in rows_per_chunk:
        parts.append(fmt.encode_chunk(seq, data[seq : seq + n]))
        parts.append(fmt.encode_blob(fmt.TAG_EVENT, {"kind": "tick", "seq": seq}))
        seq += n
    parts.append(fmt.encode_blob(fmt.TAG_TRAILER, {"rows": total, "lost": 0, "complete": True}))
    return b"".join(parts), data


@settings(max_examples=150, deadline=None)
@given(
    rows_per_chunk=st.lists(st.integers(1, 20), min_size=1, max_size=8),
    width=st.integers(1, 6),
    data=st.data(),
)
def test_reader_never_uses_a_damaged_byte(rows_per_chunk: list[int], width: int, data) -> None:
    """Flip any byte after the file header: the reader reports damage and every row it returns
    is exactly the row written under that index."""
    buf, written = _run_file(rows_per_chunk, width)
    header_end = fmt.decode_file_header(buf)[1]
    i = data.draw(st.integers(header_end, len(buf) - 1), label="byte")
    damaged = bytearray(buf)
    damaged[i] ^= data.draw(st.integers(1, 255), label="xor")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.rigrun"
        path.write_bytes(bytes(damaged))
        run = read_run(path)
    assert run.corrupt_chunks or run.truncated
    assert not run.complete
    np.testing.assert_array_equal(run.data, written[run.seq])
