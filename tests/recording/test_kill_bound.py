"""What a `kill -9` of the recording process can lose is bounded by the flush policy: rows reach
the file (a `write`, which survives the process) once `flush_rows` are buffered, whatever the
chunk size and however far off the next fsync is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daq.recording import Recorder, read_run
from daq.ring import SampleRing
from tests.conditions import wait_until

from .helpers import expected_rows, layout_2dof, meta, publish_rows

WAIT_S = 30.0


def _rows_on_file(path: Path) -> int:
    return len(read_run(path).data)


@pytest.mark.parametrize("flush_rows", [1, 50])
def test_rows_reach_the_file_once_flush_rows_are_buffered(tmp_path: Path, flush_rows: int) -> None:
    layout = layout_2dof()
    ring = SampleRing(1 << 12, layout.width)
    # No fsync for an hour and 500-row chunks: only the flush policy can put rows on file.
    rec = Recorder(
        ring, layout, tmp_path, meta(), chunk_rows=500, fsync_interval_s=3600.0,
        flush_rows=flush_rows,
    )  # fmt: skip
    path = rec.start("bound")
    try:
        for step in (7, 130, 333, 61):
            publish_rows(ring, step)
            published = ring.published
            # Once the writer has taken the rows (its cursor reached them), all but fewer than
            # flush_rows of them are in the file.
            assert wait_until(lambda p=published: rec.position == p, WAIT_S)
            assert wait_until(lambda p=published: _rows_on_file(path) > p - flush_rows, WAIT_S), (
                f"{_rows_on_file(path)} of {published} rows on file (flush_rows {flush_rows})"
            )
            run = read_run(path)
            n = len(run.data)
            np.testing.assert_array_equal(run.data, expected_rows(0, n, layout.width))
        assert rec.stats.max_unwritten >= 61  # a pass found at least the last step unwritten
    finally:
        stats = rec.stop()
    assert stats.complete and stats.rows_written == ring.published


def test_flush_rows_out_of_range_is_refused(tmp_path: Path) -> None:
    layout = layout_2dof()
    ring = SampleRing(1 << 10, layout.width)
    with pytest.raises(ValueError, match=r"flush_rows must be in 1…chunk_rows \(64\), got 65"):
        Recorder(ring, layout, tmp_path, meta(), chunk_rows=64, flush_rows=65)
