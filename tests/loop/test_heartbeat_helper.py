"""The service's heartbeat does not need its interpreter lock: a service thread holding the lock
for seconds (a starved thread; here one C call that never lets go) leaves the loop running, and
a stopped or killed loop process is reported by the heartbeat helper at once."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from daq.loop.shared_link import W
from daq.profile.schema import Profile
from daq.service import Service
from tests.conditions import wait_until
from tests.loop.conftest import with_changes

pytestmark = pytest.mark.slow

HEARTBEAT_MS = 500.0  # the helper, a normal process, must beat within it on a loaded machine


def hold_the_gil(seconds: float) -> float:
    """Hold the interpreter lock for at least `seconds` in one C call (regular-expression
    backtracking never releases it); returns how long it was held."""
    n = 18
    while True:
        t0 = time.monotonic()
        re.match(r"(a+)+b", "a" * n)
        held = time.monotonic() - t0
        if held >= seconds:
            return held
        n += 1 if held > seconds / 4 else 2


@pytest.fixture(params=[True, False], ids=["helper", "python-only"])
def service(request: pytest.FixtureRequest, profile: Profile, tmp_path: Path) -> Iterator[Service]:
    prof = with_changes(profile, overrun_limit=0, service_heartbeat_ms=HEARTBEAT_MS)
    svc = Service(prof, None, loop_process=True, network=False, run_dir=tmp_path / "runs",
                  heartbeat_helper=request.param)  # fmt: skip
    svc.start()
    try:
        yield svc
    finally:
        svc.shutdown()


def test_a_thread_holding_the_interpreter_lock_does_not_stop_the_rig(service: Service) -> None:
    assert service.api.handle("arm", {})["state"] == "ARMED"
    seq = service.loop.seq
    held: list[float] = []
    t = threading.Thread(target=lambda: held.append(hold_the_gil(5 * HEARTBEAT_MS * 1e-3)))
    t.start()
    t.join()
    assert held[0] >= 5 * HEARTBEAT_MS * 1e-3  # the premise: the lock was held that long
    if service.loop.heartbeat_helper:  # type: ignore[union-attr]
        assert wait_until(lambda: service.loop.seq > seq + 100)  # still cycling after it
        status = service.status()
        assert status["state"] == "ARMED" and status["fault"] is None, status["fault"]
        assert status["loop_process"]["alive"]
        assert status["loop_process"]["heartbeat_helper"]["alive"]
    else:  # the breakage this guards against: the Python heartbeat alone goes stale
        assert wait_until(service.loop.finished.is_set)
        assert service.status()["fault"]["name"] == "PROCESS_LOST"


def test_the_helper_reports_a_stopped_and_a_killed_loop_process(
    profile: Profile, tmp_path: Path
) -> None:
    prof = with_changes(profile, overrun_limit=0)
    svc = Service(prof, None, loop_process=True, network=False, run_dir=tmp_path / "runs")
    svc.start()
    try:
        pid = svc.loop.pid
        assert pid is not None
        helper = lambda: svc.status()["loop_process"]["heartbeat_helper"]  # noqa: E731
        assert wait_until(lambda: svc.loop.seq > 100) and helper()["loop_stalled_s_ago"] is None
        os.kill(pid, signal.SIGSTOP)
        try:
            assert wait_until(lambda: helper()["loop_stalled_s_ago"] is not None)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert wait_until(lambda: helper()["loop_stalled_s_ago"] is None)  # cycling again
        os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda: int(svc.loop.link.words[W.LOOP_STALLED_NS]) != 0)  # type: ignore[union-attr]
    finally:
        svc.shutdown()
