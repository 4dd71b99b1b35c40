"""End to end: `rig-daq` on the simulator under a stand-in for systemd's notify socket.

The test binds `NOTIFY_SOCKET`, sets `WATCHDOG_USEC`, starts the service in real time and checks
what systemd would see: READY=1 once the loop runs, WATCHDOG=1 at no more than half the
interval while it runs, STATUS= updates, and no more pings once the loop stalls (a simulated
read that blocks for 30 s, injected from the profile) while STATUS keeps coming.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daq.profile import load_profile
from rigctl.session import free_endpoint
from tests.deploy.conftest import NotifyListener

ROOT = Path(__file__).resolve().parents[2]
WATCHDOG_S = 2.0
STALL_AT_S = 3.0  # rig time at which the simulated read blocks
READY_TIMEOUT_S = 180.0  # first start compiles the plant model
OBSERVE_S = 14.0  # after READY: ~3 s of running, then the stall


def _stalling_profile(tmp: Path) -> Path:
    text = (ROOT / "hw_profiles/sim-2dof.toml").read_text()
    subs = {
        r"faults = \[\]": f'faults = ["q_1:stall_read:30@{STALL_AT_S}"]',
        # A good citizen on a shared machine: no SCHED_FIFO, no pinning, no mlockall.
        r"priority = 80": "priority = 0",
        r"cpu = 1 ": "cpu = -1 ",
        r"lock_memory = true": "lock_memory = false",
        r'directory = "runs"': f'directory = "{tmp / "runs"}"',
    }
    # Anchored on the closing quote: a free port put in for 5555 may itself begin "5557".
    for port in ("5555", "5556", "5557"):
        subs[rf'"tcp://127\.0\.0\.1:{port}"'] = f'"{free_endpoint()}"'
    for pattern, repl in subs.items():
        text, n = re.subn(pattern, repl, text)
        assert n == 1, pattern
    path = tmp / "profile.toml"
    path.write_text(text)
    prof = load_profile(path)
    assert prof.backend.sim is not None and prof.backend.sim.faults == [
        f"q_1:stall_read:30@{STALL_AT_S}"
    ]
    return path


def _lines(messages: list[tuple[float, str]]) -> list[tuple[float, str]]:
    return [(t, line) for t, m in messages for line in m.split("\n")]


@pytest.mark.slow
@pytest.mark.timeout(READY_TIMEOUT_S + OBSERVE_S + 60)
def test_ready_watchdog_status_and_silence_once_the_loop_stalls(
    tmp_path: Path, notify_listener: NotifyListener
) -> None:
    profile = _stalling_profile(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("JOURNAL_STREAM", "WATCHDOG_PID")}
    env.update(
        PYTHONPATH=str(ROOT),
        NOTIFY_SOCKET=notify_listener.env_name,
        WATCHDOG_USEC=str(int(WATCHDOG_S * 1e6)),
    )
    cmd = [sys.executable, "-m", "daq.service", "--profile", str(profile), "--duration", "6"]
    log = tmp_path / "service.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    try:
        got: list[tuple[float, str]] = []
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not any(line == "READY=1" for _, line in _lines(got)):
            assert time.monotonic() < deadline, "no READY=1 within the start-up timeout"
            assert proc.poll() is None, f"exited {proc.returncode}:\n{log.read_text()[-3000:]}"
            msg = notify_listener.recv(1.0)
            if msg is not None:
                got.append((time.monotonic(), msg))
        t_ready = next(t for t, line in _lines(got) if line == "READY=1")
        got += notify_listener.collect(OBSERVE_S)
        t_end = time.monotonic()
        assert proc.poll() is None, (
            f"the service ended during the stall ({proc.returncode}):\n{log.read_text()[-3000:]}"
        )
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    lines = [(t, line) for t, line in _lines(got) if t >= t_ready]
    pings = [t for t, line in lines if line == "WATCHDOG=1"]
    statuses = [(t, line) for t, line in lines if line.startswith("STATUS=")]
    context = f"\n{[(round(t - t_ready, 2), m) for t, m in lines]}\n{log.read_text()[-2000:]}"

    # While the loop runs (≈ STALL_AT_S of rig time) it is pinged every interval/4, so that a
    # ping is never as late as the interval even when the feeder thread is scheduled late on a
    # loaded machine: what systemd requires (no kill) is a gap below WatchdogSec.
    assert len(pings) >= 3, context
    gaps = [b - a for a, b in zip([t_ready, *pings], pings, strict=False)]
    assert max(gaps) < WATCHDOG_S, context

    # Then the loop stalls for 30 s: the pings stop for good (systemd would kill it after
    # WatchdogSec), although the service is alive and still reporting its status.
    silence = t_end - pings[-1]
    assert silence >= 2 * WATCHDOG_S, context
    assert any(t > pings[-1] + WATCHDOG_S for t, _ in statuses), context

    # STATUS updates: more than one, and not all the same text.
    assert len(statuses) >= 3 and len({s for _, s in statuses}) >= 2, context
