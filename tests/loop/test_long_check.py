"""A legal experiment whose limit check takes minutes never holds the command socket: through
the real service (loop process, command server, check worker process), `estop` and `status` are
answered while the check runs, `estop`/`stop` cancel it, and a check that passes after the
`run` reply starts the experiment on its own."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daq.commands import CommandClient
from daq.profile.plant import plant_params
from daq.profile.schema import Profile
from daq.service import Service
from daq.service import control_api as api_mod
from rigctl.session import free_endpoint
from tests.conditions import GENEROUS_S, wait_until
from tests.loop.conftest import with_changes

pytestmark = pytest.mark.slow

IRRATIONAL = [[0.05, 0.05 * math.sqrt(2), 0.05 * math.pi]] * 2
#: Deadline for the lowest-priority check process to start and finish its first chunk.
CHECK_START_S = 300.0


def multisine(duration_s: float, segments: int = 1) -> dict[str, Any]:
    """Incommensurate frequencies: no common period, so the (valve-capacity) check must sample
    the whole length."""
    return {
        "name": f"multisine-{duration_s:g}x{segments}",
        "home_deg": [40.0, 30.0],
        "segments": [
            {
                "name": f"ms{i}",
                "duration_s": duration_s,
                "trajectory": {
                    "kind": "multisine",
                    "frequencies_hz": IRRATIONAL,
                    "amplitudes_deg": [[1.0, 0.7, 0.5]] * 2,
                },
                "controller": {"kind": "pid"},
            }
            for i in range(segments)
        ],
    }


@pytest.fixture
def service(profile: Profile, tmp_path: Path) -> Iterator[tuple[Service, str]]:
    prof = with_changes(profile, overrun_limit=0)  # a loaded machine must not trip the loop
    endpoint = free_endpoint()
    svc = Service(
        prof,
        None,
        loop_process=True,
        run_dir=tmp_path / "runs",
        telemetry_endpoint=free_endpoint(),
        command_endpoint=endpoint,
        params=plant_params(prof),  # the valve-capacity check samples every point
    )
    svc.start()
    try:
        yield svc, endpoint
    finally:
        svc.shutdown()


def _status(c: CommandClient) -> dict[str, Any]:
    reply = c.request("status")
    assert reply["ok"], reply
    return reply


def _arm_and_run(c: CommandClient, experiment: dict[str, Any]) -> dict[str, Any]:
    """Arm, `run` a long check: the reply says `checking` (the check goes on)."""
    assert c.request("arm")["ok"]
    reply = c.request("run", {"experiment": experiment})
    assert reply["ok"] and reply["checking"] is True, reply
    return reply


def test_estop_and_status_are_served_while_a_two_day_multisine_is_checked(
    service: tuple[Service, str],
) -> None:
    _, endpoint = service
    with CommandClient(endpoint, timeout=GENEROUS_S) as c:
        reply = _arm_and_run(c, multisine(86_400.0, 2))
        assert reply["check"]["samples"] == 2 * (86_400 * 500 + 1)
        # The check advances while status is answered (its progress is shared memory). The
        # check's process runs at the lowest CPU priority (SCHED_BATCH, nice 19) by design, and
        # is spawned and imports the checker first: behind two CPU hogs its first chunk took
        # over the 30 s condition deadline (CI-like run with two hogs), hence CHECK_START_S.
        assert wait_until(lambda: _status(c)["check"]["progress"] > 0.0, CHECK_START_S)
        before = _status(c)
        assert before["check"]["state"] == "checking" and before["state"] == "ARMED"
        assert before["check"]["progress"] < 0.5  # minutes of work left
        estop = c.request("estop", {"reason": "test"})
        assert estop["ok"] and estop["state"] == "ESTOP"
        after = _status(c)
        assert after["state"] == "ESTOP"
        assert wait_until(lambda: _status(c)["check"]["state"] == "cancelled")
        assert "estop" in _status(c)["check"]["message"]
        # Reset and arm: the cancelled check never starts its experiment.
        assert c.request("reset")["ok"] and c.request("arm")["ok"]
        status = _status(c)
        assert status["state"] == "ARMED" and status["runner"]["kind"] == "HoldRunner"


def test_stop_cancels_a_check_and_a_second_run_is_refused_meanwhile(
    service: tuple[Service, str],
) -> None:
    _, endpoint = service
    with CommandClient(endpoint, timeout=GENEROUS_S) as c:
        _arm_and_run(c, multisine(86_400.0))
        again = c.request("run", {"experiment": multisine(86_400.0)})
        assert again["error"] == "invalid_state" and "under way" in again["message"]
        stop = c.request("stop")
        assert stop["ok"] and stop["cancelled"] == "multisine-86400x1", stop
        assert wait_until(lambda: _status(c)["check"]["state"] == "cancelled")
        assert _status(c)["state"] == "ARMED"


def test_a_check_that_passes_after_the_reply_starts_the_experiment(
    service: tuple[Service, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, endpoint = service
    monkeypatch.setattr(api_mod, "CHECK_REPLY_S", 0.0)  # answer "checking" at once
    with CommandClient(endpoint, timeout=GENEROUS_S) as c:
        _arm_and_run(c, multisine(600.0))
        assert wait_until(lambda: _status(c)["check"]["state"] == "started", CHECK_START_S), (
            _status(c)
        )
        status = _status(c)
        assert status["state"] == "RUNNING" and status["check"]["progress"] == 1.0
        assert c.request("stop")["ok"]
