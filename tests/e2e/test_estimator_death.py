"""A dead estimator changes nothing in daq (issue: estimator, "Killing the estimator mid-run").

In virtual time the seeded simulator makes a run reproducible sample for sample. One run has an
estimator subscribed that is SIGKILLed half-way; the other has no estimator at all. The two
recordings must hold the same samples, both complete and contiguous, and daq must exit 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq

from daq.recording import read_run
from rigctl.session import free_endpoint

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "hw_profiles" / "sim-2dof.toml"
RIG_SECONDS = 240.0
#: Columns that measure the host, not the rig: they differ between any two runs.
HOST_COLUMNS = ("wake_latency", "compute_time")


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT))


def _daq(run_dir: Path, telemetry: str) -> subprocess.Popen[bytes]:
    run_dir.mkdir()
    log = open(run_dir / "rig-daq.log", "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daq.service",
            "--profile",
            str(PROFILE),
            "--virtual-time",
            "--duration",
            str(RIG_SECONDS),
            "--record",
            "--run-dir",
            str(run_dir),
            "--telemetry",
            telemetry,
            "--commands",
            free_endpoint(),
            "--rt-priority",
            "0",
            "--no-mlock",
        ],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    log.close()  # the child has its own descriptor
    return proc


def _log(run_dir: Path) -> str:
    return (run_dir / "rig-daq.log").read_text(errors="replace")[-2000:]


def _recording(run_dir: Path) -> np.ndarray:
    (path,) = run_dir.glob("*.rigrun")
    run = read_run(path)
    assert run.complete and run.lost == 0 and not run.truncated
    seq = run.column("seq")
    np.testing.assert_array_equal(seq, np.arange(len(seq)))
    keep = [i for i, c in enumerate(run.columns) if c not in HOST_COLUMNS]
    return run.data[:, keep]


@pytest.mark.slow
def test_killing_the_estimator_mid_run_changes_nothing_in_daq(tmp_path: Path) -> None:
    # Run 1: an estimator consumes the telemetry and is killed half-way through.
    telemetry, estimates = free_endpoint(), free_endpoint()
    daq = _daq(tmp_path / "with", telemetry)
    est = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "estimator.service",
            "--profile",
            str(PROFILE),
            "--telemetry",
            telemetry,
            "--publish",
            estimates,
            "--param-file",
            str(tmp_path / "p.toml"),
            "--no-resume",
        ],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.subscribe(b"estimate")
    sub.connect(estimates)
    try:
        # Kill it once it is demonstrably working: an estimate over some thousand samples.
        deadline = time.monotonic() + 120.0
        killed_at = None
        while time.monotonic() < deadline and daq.poll() is None:
            if sub.poll(200):
                head = msgpack.unpackb(sub.recv_multipart()[1], raw=False)
                if head["data_seq"] > 5000:
                    est.send_signal(signal.SIGKILL)
                    killed_at = head["data_seq"]
                    break
        assert killed_at is not None, "the estimator never got going before daq finished"
        est.wait(timeout=30)
        assert daq.wait(timeout=300) == 0, _log(tmp_path / "with")
    finally:
        for p in (est, daq):
            if p.poll() is None:
                p.kill()
        sub.close(0)
        ctx.term()
    with_estimator = _recording(tmp_path / "with")

    # Run 2: the same run with no estimator at all.
    daq = _daq(tmp_path / "without", free_endpoint())
    assert daq.wait(timeout=300) == 0, _log(tmp_path / "without")
    without = _recording(tmp_path / "without")

    n = round(RIG_SECONDS * 1000)
    assert with_estimator.shape[0] == without.shape[0] == n
    np.testing.assert_array_equal(with_estimator, without)
