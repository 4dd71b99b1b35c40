"""A recording process killed with SIGKILL leaves a file that reads back intact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from daq.recording import read_run

from .helpers import ROOT, expected_rows, layout_2dof


def _first_line_then_sigkill(directory: Path, *args: str) -> str:
    """Run record_child.py, wait for its first line, SIGKILL it, return the line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("record_child.py")), str(directory), *args],
        stdout=subprocess.PIPE, env=env, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    return line


@pytest.mark.parametrize("threshold", [100, 3000])
def test_sigkill_leaves_a_readable_file_up_to_the_last_complete_chunk(
    tmp_path: Path, threshold: int
) -> None:
    line = _first_line_then_sigkill(tmp_path, str(threshold))
    assert line.startswith("ready"), line
    written_then = int(line.split()[1])

    run = read_run(tmp_path / "killed.rigrun")
    n = len(run.data)
    assert n >= written_then >= threshold
    assert run.trailer is None and not run.complete and not run.corrupt_chunks
    np.testing.assert_array_equal(run.seq, np.arange(n))
    np.testing.assert_array_equal(run.data, expected_rows(0, n, layout_2dof().width))
    assert [e["kind"] for e in run.events][:1] == ["state"]


@pytest.mark.parametrize("delay_s", [-1.0, 0.0, 0.001, 0.003, 0.01])
def test_sigkill_as_recording_starts_leaves_no_run_file_or_one_that_reads(
    tmp_path: Path, delay_s: float
) -> None:
    """The run file appears with its header already in it (temporary file, then link): a kill
    at any moment around `start()` never leaves a file `read_run` rejects. −1: killed the
    moment `start()` returned, when the file must exist."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("record_child.py")),
            str(tmp_path),
            "kill-at-start",
            str(delay_s),
        ],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    runs = sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".rigrun")
    if delay_s < 0:
        assert runs == ["killed.rigrun"]
    for name in runs:
        run = read_run(tmp_path / name)
        assert run.meta["rig"] == "sim-2dof" and run.meta["first_seq"] == 0
        assert not run.complete and not run.corrupt_chunks
        np.testing.assert_array_equal(run.seq, np.arange(len(run.data)))


@pytest.mark.parametrize("rows", [1234, 2047])
def test_sigkill_loses_fewer_than_flush_rows_once_the_writer_has_taken_the_rows(
    tmp_path: Path, rows: int
) -> None:
    """The kill -9 bound of docs/recording.md with the writer caught up: the writer appends all
    but fewer than flush_rows rows, whatever the chunk size (500) and with no fsync due, and a
    kill -9 loses nothing it appended."""
    line = _first_line_then_sigkill(tmp_path, "publish-then-idle", str(rows))
    assert line.startswith("taken"), line
    flush_rows = int(line.split()[2])
    run = read_run(tmp_path / "killed.rigrun")
    n = len(run.data)
    assert rows - flush_rows < n <= rows, f"{rows - n} rows lost (flush_rows {flush_rows})"
    np.testing.assert_array_equal(run.data, expected_rows(0, n, layout_2dof().width))
