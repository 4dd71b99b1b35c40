"""The command handler against a loop running in real time on the fake plant (no sockets)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from daq.loop import Loop
from daq.loop.interlocks import Trip
from daq.loop.states import State
from daq.profile.schema import Profile
from daq.service import control_api
from daq.service.control_api import CommandError, ControlApi
from tests.conditions import wait_until
from tests.loop.conftest import with_changes
from tests.loop.fakes import FakeBackend, HoldP


@pytest.fixture
def running(profile: Profile) -> Iterator[tuple[Loop, ControlApi, FakeBackend]]:
    # Real time on a shared machine: overruns happen; they are not what these tests are about.
    profile = with_changes(profile, overrun_limit=0)
    backend = FakeBackend(profile)
    loop = Loop(profile, backend, hold=HoldP(), ring_capacity=1 << 13)
    api = ControlApi(loop)
    loop.start()
    try:
        yield loop, api, backend
    finally:
        loop.stop()
        assert loop.join(5.0)
        assert loop.error is None


def _row(loop: Loop, seq: int) -> np.ndarray:
    # The reply comes from inside cycle `seq`; its row is published at the end of that cycle.
    assert wait_until(lambda: loop.ring.published > seq), f"row {seq} never published"
    r = loop.ring.data[seq & loop.ring.mask]
    assert r[0] == seq
    return r


def test_status_and_describe(running: tuple[Loop, ControlApi, FakeBackend]) -> None:
    loop, api, _ = running
    s = api.handle("status", {}, None)
    assert s["state"] == "IDLE" and s["fault"] is None
    assert set(s["timing"]) >= {"overruns", "wake_latency_us", "compute_time_us"}
    d = api.handle("describe", {}, None)
    assert [j["name"] for j in d["joints"]] == ["j1", "j2"]
    assert d["joints"][0]["limits"]["soft_max_deg"] == 58.0
    assert {c["name"] for c in d["channels"]} >= {"q_1", "valve_2", "oil_temp"}
    assert [c["name"] for c in d["columns"]] == list(loop.layout.names)


def test_invalid_transitions_refused_with_reason_and_code(
    running: tuple[Loop, ControlApi, FakeBackend],
) -> None:
    loop, api, _ = running
    for cmd in ("disarm", "stop", "reset"):
        with pytest.raises(CommandError) as exc:
            api.handle(cmd, {}, None)
        assert exc.value.code == "invalid_state"
        assert "IDLE" in exc.value.message
    assert loop.state == State.IDLE


def test_arm_then_estop_acts_in_the_next_cycle(
    running: tuple[Loop, ControlApi, FakeBackend],
) -> None:
    loop, api, _ = running
    armed = api.handle("arm", {}, None)
    assert armed["state"] == "ARMED"
    out = api.handle("estop", {"reason": "test"}, None)
    seq = out["seq"]
    assert out["state"] == "ESTOP"
    r = _row(loop, seq)
    lay = loop.layout
    assert r[lay.index("state")] == State.ESTOP and r[lay.index("fault")] == Trip.ESTOP
    assert np.all(r[lay.span("cmd")] == 0.0)
    prev = _row(loop, seq - 1)
    assert prev[lay.index("state")] == State.ARMED
    assert loop.fault is not None and "test" in loop.fault.where
    with pytest.raises(CommandError) as exc:
        api.handle("arm", {}, None)
    assert exc.value.code == "invalid_state" and "reset first" in exc.value.message
    assert api.handle("reset", {}, None)["state"] == "IDLE"


def test_arm_refused_outside_soft_limits_is_rejected(
    running: tuple[Loop, ControlApi, FakeBackend],
) -> None:
    loop, api, backend = running
    backend.q[0] = np.radians(21.0)  # j1 soft min is 22°
    with pytest.raises(CommandError) as exc:
        api.handle("arm", {}, None)
    assert exc.value.code == "rejected" and "j1" in exc.value.message
    assert loop.state == State.IDLE


def test_recording_commands_without_a_recorder(
    running: tuple[Loop, ControlApi, FakeBackend],
) -> None:
    _, api, _ = running
    with pytest.raises(CommandError) as exc:
        api.handle("record_start", {}, None)
    assert exc.value.code == "recorder_error"


def test_a_stopped_loop_answers_internal(profile: Profile, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(control_api, "LOOP_TIMEOUT_S", 0.05)
    loop = Loop(profile, FakeBackend(profile), hold=HoldP())
    api = ControlApi(loop)
    with pytest.raises(CommandError) as exc:
        api.handle("arm", {}, None)
    assert exc.value.code == "internal" and "did not answer" in exc.value.message
    assert loop.mailbox.take() is None
