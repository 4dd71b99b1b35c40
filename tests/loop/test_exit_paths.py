"""Valves on every exit path: armed with a constant non-null command, the rig must write null
*before* the backend is closed, whichever way the service ends.

The backend (`CallLog`) logs its output calls in order and its `close()` does not null, so each
assertion can fail: a path that forgot the null would show "cmd … close".
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import daq.service.rig_service as service_core
from daq.backends.base import BackendStatus
from daq.loop.states import State
from daq.profile.schema import Profile
from daq.service import Service
from tests.conditions import wait_until
from tests.loop.conftest import with_changes
from tests.loop.exit_child import ARMED
from tests.loop.fakes import CallLog, Constant, assert_nulled_before_close

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "hw_profiles" / "sim-2dof.toml"
#: Deadline for anything waited on here: generous, the suite must pass on a loaded machine.
WAIT_S = 60.0


def until(cond: Callable[[], bool], what: str) -> None:
    assert wait_until(cond, WAIT_S), f"not within {WAIT_S} s: {what}"


class Faulty(CallLog):
    """A CallLog whose read can be made to raise, or to hang until released."""

    def __init__(self, profile: Profile) -> None:
        super().__init__(profile)
        self.raise_on_read = False
        self.hang = threading.Event()  # set: the next read blocks until `release` is set
        self.release = threading.Event()
        self.hanging = threading.Event()

    def read(self, t: float, raw_out: np.ndarray) -> BackendStatus:
        if self.raise_on_read:
            raise RuntimeError("driver crashed")
        if self.hang.is_set():
            self.hanging.set()
            self.release.wait(WAIT_S)
        return super().read(t, raw_out)


@pytest.fixture
def armed(profile: Profile) -> Iterator[tuple[Service, Faulty]]:
    """A service in real time (the fake's loop sleeps between cycles), armed with Constant.
    Overruns on a loaded machine are not what these tests are about: the limit is off."""
    profile = with_changes(profile, overrun_limit=0)
    backend = Faulty(profile)
    service = Service(profile, backend, network=False)
    service.loop.hold = Constant(0.5)
    service.start()
    try:
        req = service.loop.request("arm", timeout=WAIT_S)
        assert req.ok, req.reason
        until(backend.commanded, "the valves commanded")
        assert service.loop.state == State.ARMED
        yield service, backend
    finally:
        backend.release.set()
        service.loop.stop()
        service.loop.join(WAIT_S)


def test_shutdown_while_armed_nulls_before_close(armed: tuple[Service, Faulty]) -> None:
    service, backend = armed
    assert service.shutdown() == 0
    assert_nulled_before_close(backend.calls)
    assert backend.closed and np.array_equal(backend.last_volts, backend.null)


def test_a_loop_exception_while_armed_nulls_before_close(armed: tuple[Service, Faulty]) -> None:
    service, backend = armed
    backend.raise_on_read = True
    until(service.loop.finished.is_set, "the loop ended by the exception")
    assert service.loop.state == State.FAULT
    assert service.shutdown() == 1
    assert_nulled_before_close(backend.calls)


def test_a_stuck_loop_is_nulled_by_shutdown_and_never_commands_again(
    armed: tuple[Service, Faulty], monkeypatch: pytest.MonkeyPatch
) -> None:
    service, backend = armed
    monkeypatch.setattr(service_core, "STOP_TIMEOUT_S", 0.2)  # do not wait 3 s for a hang
    backend.hang.set()
    assert backend.hanging.wait(WAIT_S), "the loop never entered the hanging read"
    assert service.shutdown() == 1  # a loop that would not stop is a failure
    assert_nulled_before_close(backend.calls)
    # The driver call returns after all: the rest of that cycle must not command the valves.
    backend.release.set()
    assert service.loop.join(WAIT_S)
    assert_nulled_before_close(backend.calls)
    assert backend.calls[-1] == "null" or backend.calls[-1] == "close", backend.calls


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_armed_nulls_before_close(tmp_path: Path, sig: signal.Signals) -> None:
    log_file = tmp_path / "calls.txt"
    profile = tmp_path / PROFILE.name  # overruns on a loaded machine must not trip it
    text, n = re.subn(r"overrun_limit = \d+", "overrun_limit = 0", PROFILE.read_text())
    assert n == 1
    profile.write_text(text)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [
        sys.executable,
        str(Path(__file__).with_name("exit_child.py")),
        str(log_file),
        "--profile",
        str(profile),
        "--no-network",
        "--run-dir",
        str(tmp_path / "runs"),
        *("--rt-priority", "0", "--cpu", "-1", "--no-mlock"),
    ]
    proc = subprocess.Popen(
        cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    watchdog = threading.Timer(2 * WAIT_S, proc.kill)  # never hang the suite on a stuck child
    watchdog.start()
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if ARMED in line:
                break
        else:
            pytest.fail("the child never armed:\n" + "".join(lines))
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=WAIT_S)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, "".join(lines) + out
    assert f"signal {sig.name}" in out
    assert_nulled_before_close(log_file.read_text().split())
