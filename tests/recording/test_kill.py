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


@pytest.mark.parametrize("threshold", [100, 3000])
def test_sigkill_leaves_a_readable_file_up_to_the_last_complete_chunk(
    tmp_path: Path, threshold: int
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("record_child.py")),
            str(tmp_path),
            str(threshold),
        ],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("ready"), line
        written_then = int(line.split()[1])
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL

    run = read_run(tmp_path / "killed.rigrun")
    n = len(run.data)
    assert n >= written_then >= threshold
    assert run.trailer is None and not run.complete and not run.corrupt_chunks
    np.testing.assert_array_equal(run.seq, np.arange(n))
    np.testing.assert_array_equal(run.data, expected_rows(0, n, layout_2dof().width))
    assert [e["kind"] for e in run.events][:1] == ["state"]
