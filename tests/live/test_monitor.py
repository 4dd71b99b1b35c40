"""`rigctl monitor` in a pseudo-terminal of 80×24 against the service (simulator, real time):
NO DATA within 1 s of the service being killed, live again when it restarts."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest

from rigctl.session import RigSession
from tests.live.conftest import PROFILE_2DOF, spawn

pytestmark = pytest.mark.slow
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]")


class Screen:
    """The monitor's output read from a pty master; `wait(regex)` scans what came after `mark`."""

    def __init__(self, fd: int) -> None:
        self.fd, self.text, self.mark = fd, "", 0

    def wait(self, pattern: str, timeout: float) -> re.Match[str]:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.text, self.mark)
            if m:
                return m
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} on screen within {timeout} s:\n{self.text[-1500:]}"
            if select.select([self.fd], [], [], min(left, 0.5))[0]:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # the child closed the terminal
                    chunk = b""
                self.text += ANSI.sub("", chunk.decode("utf-8", "replace"))

    def set_mark(self) -> None:
        self.mark = len(self.text)


def test_monitor_says_no_data_when_the_service_dies_and_recovers(
    rig: RigSession, tmp_path: Path
) -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env_term = {"TERM": "xterm-256color", "COLUMNS": "80", "LINES": "24"}
    mon = spawn(
        ["-m", "rigctl.main", "monitor", "--endpoint", rig.telemetry, "--timeout", "60"],
        stdin=slave, stdout=slave, stderr=slave, env_extra=env_term,
    )  # fmt: skip
    os.close(slave)
    screen = Screen(master)
    restarted: RigSession | None = None
    try:
        screen.wait(r"sim2dof\s+IDLE\s+seq \d+", 60)
        lines = screen.text.splitlines()
        assert max(len(line) for line in lines) <= 80

        assert rig.daq is not None
        rig.daq.send_signal(signal.SIGKILL)
        rig.daq.wait(60)
        screen.set_mark()
        m = screen.wait(r"NO DATA for (\d+\.\d) s", 30)
        # The monitor's own clock: age of the last sample when it first said NO DATA.
        assert float(m.group(1)) <= 1.0, m.group(0)

        restarted = RigSession(PROFILE_2DOF, tmp_path / "again", virtual_time=False,
                               estimator=False)  # fmt: skip
        restarted.telemetry, restarted.commands = rig.telemetry, rig.commands
        restarted.start()
        screen.set_mark()
        screen.wait(r"sim2dof\s+IDLE\s+seq \d+", 60)
    finally:
        mon.send_signal(signal.SIGINT)
        try:
            mon.wait(30)
        except subprocess.TimeoutExpired:
            mon.kill()
            mon.wait()
        os.close(master)
        if restarted is not None:
            restarted.stop()
