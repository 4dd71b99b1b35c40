"""Whichever process survives ends the recording with the null cycle: after a kill of the loop
process the service publishes the null row in its place; after a kill of the service the loop
process runs one more cycle at null (FAULT, PROCESS_LOST) and closes the run file from the
shared ring itself. No row is lost either way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from daq.loop.interlocks import Trip
from daq.loop.states import State
from daq.profile.schema import Profile
from daq.recording import read_run
from daq.recording.format import SUFFIX
from daq.service import Service
from tests.conditions import GENEROUS_S, wait_until
from tests.loop.conftest import with_changes
from tests.loop.fakes import Constant, DriveMirror, MirroredFactory
from tests.loop.split_child import ARMED

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "hw_profiles" / "sim-2dof.toml"

pytestmark = pytest.mark.slow


def _check_ends_with_the_null_cycle(run_dir: Path) -> object:
    (path,) = sorted(run_dir.glob(f"*{SUFFIX}"))
    run = read_run(path)
    assert len(run.seq) >= 3 and run.lost == 0 and not run.corrupt_chunks
    np.testing.assert_array_equal(run.seq, np.arange(run.seq[0], run.seq[0] + len(run.seq)))
    np.testing.assert_array_equal(run.column("seq"), run.seq)  # recorded from the first cycle
    cmd = [i for i, c in enumerate(run.columns) if c.startswith("cmd.")]
    last, before = run.data[-1], run.data[-2]
    assert last[2] == State.FAULT and last[3] == Trip.PROCESS_LOST, last[:7]
    np.testing.assert_array_equal(last[cmd], 0.0)  # the profile's null
    assert before[2] == State.ARMED and np.allclose(before[cmd], 0.5)  # live until then
    assert any(e.get("kind") == "fault" and e.get("name") == "PROCESS_LOST" for e in run.events)
    return run


def test_after_a_loop_process_kill_the_recording_ends_with_the_null_row(
    profile: Profile, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    service = Service(
        with_changes(profile, overrun_limit=0),
        None,
        loop_process=True,
        backend_factory=MirroredFactory(tmp_path / "drive.bin"),
        network=False,
        run_dir=runs,
    )
    service.loop.hold = Constant(0.5)
    service.start(record=True)
    try:
        mirror = DriveMirror(tmp_path / "drive.bin", 2)
        assert service.api.handle("arm", {})["state"] == "ARMED"
        assert wait_until(lambda: np.allclose(mirror.volts, 0.5))
        seq = service.loop.seq
        assert wait_until(lambda: service.loop.seq > seq + 700)  # rows on disk and in a buffer
        pid = service.loop.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        assert wait_until(service.loop.finished.is_set)
    finally:
        assert service.shutdown() == 1
    run = _check_ends_with_the_null_cycle(runs)
    raw = [i for i, c in enumerate(run.columns) if c.startswith("raw.")]  # type: ignore[attr-defined]
    assert np.isnan(run.data[-1][raw]).all()  # type: ignore[attr-defined]  # nothing was read
    assert run.complete  # type: ignore[attr-defined]  # every row: lossless, though faulted


def test_after_a_service_kill_the_loop_process_closes_the_recording_with_the_null_cycle(
    tmp_path: Path,
) -> None:
    prof = tmp_path / PROFILE.name
    prof.write_text(PROFILE.read_text().replace("overrun_limit = ", "overrun_limit = 0 #", 1))
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("split_child.py")),
         str(tmp_path / "drive.bin"), str(prof), str(runs), "record"],
        env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        loop_pid = None
        for line in proc.stdout:
            if line.startswith(ARMED):
                loop_pid = int(line.split()[-1])
                break
        assert loop_pid is not None, "the child never armed"
        mirror = DriveMirror(tmp_path / "drive.bin", 2)
        assert wait_until(lambda: np.allclose(mirror.volts, 0.5))
        # Long enough for the recorder to have written a chunk and to hold rows in its buffer.
        assert wait_until(lambda: sum(p.stat().st_size for p in runs.glob(f"*{SUFFIX}")) > 2e5)
        proc.kill()
        proc.wait(GENEROUS_S)
        assert wait_until(
            lambda: (
                not Path(f"/proc/{loop_pid}").exists()
                or Path(f"/proc/{loop_pid}/stat").read_text().split(") ")[1][0] in "ZX"
            )
        )
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=GENEROUS_S)
    run = _check_ends_with_the_null_cycle(runs)
    assert run.trailer["closed_by"] == "loop process"  # type: ignore[attr-defined]
    assert "service process lost" in run.trailer["error"]  # type: ignore[attr-defined]
