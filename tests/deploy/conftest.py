from __future__ import annotations

import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


class NotifyListener:
    """The service manager's end of `NOTIFY_SOCKET`: a bound AF_UNIX datagram socket."""

    def __init__(self, sock: socket.socket, env_name: str) -> None:
        self.sock = sock
        self.env_name = env_name  # what goes into $NOTIFY_SOCKET

    def recv(self, timeout: float = 5.0) -> str | None:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(4096).decode()
        except TimeoutError:
            return None

    def drain(self) -> list[str]:
        out = []
        while (msg := self.recv(0.0001)) is not None:
            out.append(msg)
        return out

    def collect(self, seconds: float) -> list[tuple[float, str]]:
        """Every datagram received during `seconds`, with its arrival time (monotonic)."""
        end = time.monotonic() + seconds
        got = []
        while (left := end - time.monotonic()) > 0:
            msg = self.recv(left)
            if msg is not None:
                got.append((time.monotonic(), msg))
        return got


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    # AF_UNIX paths are limited to 108 bytes; pytest's tmp_path can be longer.
    d = Path(tempfile.mkdtemp(prefix="rigsd"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def notify_listener(short_tmp: Path) -> Iterator[NotifyListener]:
    path = short_tmp / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    yield NotifyListener(sock, str(path))
    sock.close()


@pytest.fixture
def abstract_listener() -> Iterator[NotifyListener]:
    name = f"rig-sdnotify-test-{id(object()):x}-{time.monotonic_ns()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    yield NotifyListener(sock, "@" + name)
    sock.close()
