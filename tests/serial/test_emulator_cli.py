"""`python -m daq.backends.serial_emulator` as a process: prints its port, serves, injects."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from daq.backends import serial_resolver as sr
from daq.backends.base import BackendStatus
from tests.serial.conftest import COMPOSITE, ROOT, open_backend

#: Deadline for anything waited on here: generous, the suite must pass on a loaded machine.
WAIT_S = 60.0


@contextmanager
def emulator_process(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "daq.backends.serial_emulator", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        port = proc.stdout.readline().strip()
        assert port, proc.stderr.read() if proc.stderr else ""
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=WAIT_S)


def test_cli_pty_with_link_reports_the_profile_home_pose(tmp_path: Path) -> None:
    link = tmp_path / "resolvers"
    with emulator_process("--pty", "--link", str(link), "--profile", str(COMPOSITE)) as (p, port):
        assert port.startswith("/dev/")
        assert link.resolve() == Path(port).resolve()
        b = open_backend(str(link))
        raw = np.zeros(2)
        assert b.read(0.0, raw) == BackendStatus.OK
        # Home j1 = 40°, j2 = 30°, mounted 180° off → 220°, 210° on the 14-bit converter.
        assert raw.tolist() == [round(220 / 360 * 16384), round(210 / 360 * 16384)]
        b.close()
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=WAIT_S) == 0
    assert not link.exists()


def test_cli_injects_crc_errors_and_removes_the_port() -> None:
    # Removal by request count, not by time: the six reads below must all be served whatever
    # the machine's load (handshake 2 + 6 reads = 8 requests; the 9th finds the port gone).
    with emulator_process("--pty", "--crc-error-every", "3", "--remove-after-requests", "8") as (
        p,
        port,
    ):
        b = open_backend(port)
        raw = np.zeros(2)
        codes = []
        for _ in range(6):
            b.read(0.0, raw)
            codes.append(int(b.channel_fault[0]))
        # The handshake used responses 1 and 2; every third response after that is corrupted.
        assert codes == [sr.FAULT_CRC, 0, 0, sr.FAULT_CRC, 0, 0]
        assert b.read(0.0, raw) == BackendStatus.ERROR
        assert b.channel_fault[0] == sr.FAULT_PORT
        b.close()
        assert p.wait(timeout=WAIT_S) == 0


def test_cli_removes_the_port_after_a_time() -> None:
    with emulator_process("--pty", "--remove-after", "0.5") as (p, port):
        assert Path(port).exists()
        # It vanishes on its own (no earlier than 0.5 s: only a lower bound is ever checked).
        assert p.wait(timeout=WAIT_S) == 0
        assert not Path(port).exists()


def test_cli_vanishes_after_a_request_count() -> None:
    with emulator_process("--pty", "--remove-after-requests", "5") as (p, port):
        b = open_backend(port)  # IDENTIFY and CONFIGURE are requests 1 and 2
        raw = np.zeros(2)
        statuses = [b.read(0.0, raw) for _ in range(5)]
        assert statuses == [BackendStatus.OK] * 3 + [BackendStatus.ERROR] * 2
        assert b.channel_fault.tolist() == [sr.FAULT_PORT] * 2
        b.close()
        assert p.wait(timeout=WAIT_S) == 0


def test_cli_fault_bits_and_stuck_values() -> None:
    stuck_after = 3.0  # s of emulator time; its motion must show before, and never after
    flags = ("--pty", "--motion", "20,0.5", "--fault-after", "0,1,64")
    with emulator_process(*flags, "--stuck-after", str(stuck_after)) as (_p, port):
        b = open_backend(port)
        t_open = time.monotonic()
        raw = np.zeros(2)
        deadline = t_open + WAIT_S
        while b.channel_fault[1] != sr.FAULT_RESOLVER:  # until the LOS bit shows up
            assert time.monotonic() < deadline
            b.read(0.0, raw)
            time.sleep(0.005)
        assert b.channel_fault.tolist() == [0, sr.FAULT_RESOLVER]
        # Before --stuck-after the programmed motion shows: two reads a few ms apart differ.
        # Two reads need milliseconds; stuck_after leaves seconds, so this is asserted always.
        moving = set()
        while len(moving) < 2:
            assert time.monotonic() < t_open + stuck_after, "no motion seen before the freeze"
            b.read(0.0, raw)
            moving.add(raw[0])
            time.sleep(0.005)
        # After it the positions freeze: wait for at least ten equal reads spanning 0.2 s (the
        # motion moves the joint by far more than a code in 0.2 s, 40 % of its period). The run
        # of equal reads restarts at every change, whatever the reads cost on this machine.
        same: list[tuple[float, float]] = []
        while not (len(same) >= 10 and same[-1][0] - same[0][0] >= 0.2):
            assert time.monotonic() < deadline, f"the values never froze: {same[-10:]}"
            b.read(0.0, raw)
            value = float(raw[0])
            if same and same[-1][1] != value:
                same = []
            same.append((time.monotonic(), value))
            time.sleep(0.02)
        b.close()
