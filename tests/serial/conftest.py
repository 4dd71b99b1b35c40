"""Fixtures for the serial resolver tests: profiles pointed at a pty, the board emulator, and a
pymeasure-style scripted peer that asserts the exact byte conversation."""

from __future__ import annotations

import os
import select
import threading
import time
import tomllib
import tty
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daq.backends.serial_emulator import BoardEmulator
from daq.backends.serial_resolver import SerialResolverBackend
from daq.profile import Profile, parse_profile

ROOT = Path(__file__).resolve().parents[2]
COMPOSITE = ROOT / "hw_profiles" / "composite-sim-serial.toml"
#: Generous cycle timeout for tests that must not time out on a loaded shared machine.
RELAXED_TIMEOUT_S = 5.0


def composite_dict(port: str, **serial: Any) -> dict[str, Any]:
    with COMPOSITE.open("rb") as f:
        data = tomllib.load(f)
    data["backend"]["serial"].update(port=port, **serial)
    return data


def make_profile(port: str, **serial: Any) -> Profile:
    return parse_profile(composite_dict(port, **serial), COMPOSITE)


def serial_inputs(profile: Profile) -> list[Any]:
    return [c for c in profile.inputs if profile.channel_device(c) == "serial"]


class GatedEmulator(BoardEmulator):
    """A board emulator that can hold its next responses until the test releases them: a late
    answer whose lateness is a condition the test controls, not a time it races."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.hold = 0  # responses to hold back
        self.release = threading.Event()

    def _mangle(self, frame: bytes) -> bytes | None:
        out = super()._mangle(frame)
        if self.hold:
            self.hold -= 1
            self.release.wait(60.0)
        return out

    def wait_for_request(self, timeout: float = 60.0) -> bool:
        """While a response is held: true once the host has sent another request."""
        return bool(select.select([self._fd], [], [], timeout)[0])


@pytest.fixture
def emulator() -> Iterator[GatedEmulator]:
    emu = GatedEmulator(record=True)
    emu.open_pty()
    emu.start()
    yield emu
    emu.release.set()
    emu.stop()


def open_backend(
    port: str, timeout_s: float | None = RELAXED_TIMEOUT_S, **serial: Any
) -> SerialResolverBackend:
    # A handshake try that times out on a loaded machine would be retried, and the retry's
    # requests would shift every request count a test injects faults by: allow the maximum.
    serial.setdefault("open_timeout_s", 5.0)
    prof = make_profile(port, **serial)
    b = SerialResolverBackend(prof, serial_inputs(prof), [], timeout_s=timeout_s)
    b.open()
    return b


@pytest.fixture
def backend(emulator: BoardEmulator) -> Iterator[SerialResolverBackend]:
    b = open_backend(emulator.port)
    yield b
    b.close()


class ExpectedProtocol:
    """A fake board on a pty that expects `exchanges` = [(request bytes, reply bytes), …] in
    order, records what it got and fails the test if a request differs or one is left over."""

    def __init__(self, exchanges: list[tuple[bytes, bytes]]) -> None:
        self.exchanges = list(exchanges)
        self.received: list[bytes] = []
        master, slave = os.openpty()
        tty.setraw(slave)
        self._fds = (master, slave)
        self.port = os.ttyname(slave)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _read(self, n: int, deadline: float) -> bytes:
        got = b""
        while len(got) < n and time.monotonic() < deadline:
            if select.select([self._fds[0]], [], [], 0.05)[0]:
                got += os.read(self._fds[0], n - len(got))
        return got

    def _run(self) -> None:
        for req, rsp in self.exchanges:
            got = self._read(len(req), time.monotonic() + 5.0)
            self.received.append(got)
            if got != req:
                return
            os.write(self._fds[0], rsp)

    def check(self) -> None:
        self._thread.join(timeout=6.0)
        expected = [req for req, _ in self.exchanges]
        assert self.received == expected, "byte conversation differs from the expected one"
        extra = self._read(1, time.monotonic() + 0.05)
        assert extra == b"", f"unexpected bytes after the scripted exchanges: {extra.hex()}"

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
