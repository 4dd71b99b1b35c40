"""Service-level checks against `python -m daq.service` on the simulator in virtual time.

These need the loop, the service and the recorder (other branches); until those are merged the
tests fail at the service start-up or the `daq.recording` import.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import zmq

from rigctl.session import free_endpoint
from tests.telemetry.test_command_fuzz import _random_obj

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "hw_profiles" / "sim-2dof.toml"
SECONDS = 10.0  # of rig time


def start_service(run_dir: Path, tel: str, cmd: str, duration: float) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = [sys.executable, "-m", "daq.service", "--profile", str(PROFILE), "--virtual-time",
            "--duration", str(duration), "--record", "--run-dir", str(run_dir),
            "--telemetry", tel, "--commands", cmd]  # fmt: skip
    return subprocess.Popen(args, env=env, cwd=run_dir, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip


def finish(proc: subprocess.Popen[str]) -> None:
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out


def read_single_run(run_dir: Path) -> Any:
    from daq.recording import read_run
    from daq.recording.format import SUFFIX

    files = sorted(run_dir.glob(f"*{SUFFIX}"))
    assert len(files) == 1, files
    run = read_run(files[0])
    assert run.complete and run.lost == 0
    np.testing.assert_array_equal(run.seq, np.arange(len(run.seq)))
    return run


def test_stalled_subscriber_changes_neither_timing_nor_recording(tmp_path: Path) -> None:
    runs = []
    for stalled in (False, True):
        run_dir = tmp_path / ("stalled" if stalled else "alone")
        run_dir.mkdir()
        tel = free_endpoint()
        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        sub.linger = 0
        sub.rcvhwm = 1
        sub.setsockopt(zmq.RCVBUF, 4096)
        sub.subscribe(b"")
        if stalled:
            sub.connect(tel)  # before the service binds: ZeroMQ retries until it does
        proc = start_service(run_dir, tel, free_endpoint(), SECONDS)
        try:
            if stalled:
                assert sub.poll(30_000), "the stalled subscriber was never connected"
            finish(proc)
        finally:
            proc.kill() if proc.poll() is None else None
            sub.close()
            ctx.term()
        runs.append(read_single_run(run_dir))
    alone, stalled_run = runs
    n = round(SECONDS * 1000)
    assert len(alone.seq) == len(stalled_run.seq) == n
    # Virtual time: t = seq · period in both runs, no skipped cycle.
    for run in runs:
        np.testing.assert_allclose(run.column("t"), np.arange(n) * 1e-3, atol=1e-9)
    # Same seed, same plant: the measured channels are identical sample for sample.
    for name in alone.columns:
        if name.startswith(("raw.", "eng.", "cmd.")):
            np.testing.assert_array_equal(alone.column(name), stalled_run.column(name), name)


def test_fuzzed_command_socket_keeps_service_and_recording_intact(tmp_path: Path) -> None:
    cmd_ep = free_endpoint()
    proc = start_service(tmp_path, free_endpoint(), cmd_ep, 3600.0)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(cmd_ep)
    rng = random.Random(7)
    try:
        status = msgpack.packb({"cmd": "status", "args": {}})
        sock.send_multipart([b"", status])
        assert sock.poll(30_000), "the service's command socket never answered"
        assert msgpack.unpackb(sock.recv_multipart()[-1])["ok"] is True
        for i in range(3000):
            if i % 2:
                body = rng.randbytes(rng.randrange(64))
            else:
                body = msgpack.packb(_random_obj(rng), use_bin_type=True)
            sock.send_multipart([b"", body])
            assert sock.poll(10_000), f"no reply to fuzz message {i}"
            reply = msgpack.unpackb(sock.recv_multipart()[-1], raw=False)
            assert isinstance(reply, dict) and isinstance(reply["ok"], bool)
            if not reply["ok"]:
                assert isinstance(reply["error"], str) and isinstance(reply["message"], str)
        sock.send_multipart([b"", status])
        assert sock.poll(10_000)
        assert msgpack.unpackb(sock.recv_multipart()[-1])["ok"] is True
        assert proc.poll() is None, "the service died"
        proc.send_signal(signal.SIGINT)
        finish(proc)
    finally:
        proc.kill() if proc.poll() is None else None
        sock.close()
        ctx.term()
    read_single_run(tmp_path)
