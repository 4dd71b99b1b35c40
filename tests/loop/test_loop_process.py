"""The loop in a process of its own (issue 15): commands round-trip through the shared-memory
mailbox with the in-thread semantics, and either process dying puts the valves at null.

The valves are observed through `DriveMirror` (tests/loop/fakes.py): the loop process's backend
mirrors what it writes to a small shared file, as a valve driver's state is observable on a rig.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daq.loop.interlocks import Trip
from daq.loop.mailbox import MailboxTimeout
from daq.loop.shared_link import LoopLink, W
from daq.loop.shm_mailbox import ShmMailboxClient, ShmMailboxServer
from daq.loop.states import State
from daq.profile.schema import Profile
from daq.ring import RingCursor, SampleRing
from daq.service import Service
from daq.service.control_api import ControlApi
from tests.conditions import wait_until
from tests.loop.conftest import with_changes
from tests.loop.fakes import Constant, DriveMirror, MirroredFactory
from tests.loop.split_child import ARMED

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "hw_profiles" / "sim-2dof.toml"
WAIT_S = 60.0


def until(cond: Any, what: str) -> None:
    assert wait_until(cond, WAIT_S), f"not within {WAIT_S} s: {what}"


def relaxed(profile: Profile) -> Profile:
    # Overruns on a loaded machine must not trip the loop while the test looks at other things.
    return with_changes(profile, overrun_limit=0)


@pytest.fixture
def split(profile: Profile, tmp_path: Path) -> Iterator[tuple[Service, DriveMirror]]:
    prof = relaxed(profile)
    mirror_path = tmp_path / "drive.bin"
    service = Service(
        prof,
        None,
        loop_process=True,
        backend_factory=MirroredFactory(mirror_path),
        network=False,
        run_dir=tmp_path / "runs",
    )
    service.loop.hold = Constant(0.5)
    service.start()
    try:
        yield service, DriveMirror(mirror_path, len(prof.outputs))
    finally:
        service.shutdown()


# ---------------------------------------------------------------------- shared ring


def test_a_shared_ring_is_read_in_another_mapping_with_the_same_cursor_semantics() -> None:
    writer = SampleRing.create_shared(8, 3)
    try:
        reader = SampleRing.attach(writer.shm.name, 8, 3)  # type: ignore[union-attr]
        cursor = RingCursor(reader)
        rows = np.arange(30.0).reshape(10, 3)
        writer.publish_block(rows[:6])
        writer.publish_block(rows[6:])
        out = np.zeros((10, 3))
        n = cursor.read_into(out)
        # 10 rows into 8 slots: the 2 oldest were overwritten before the read, and counted.
        assert (n, cursor.lost) == (8, 2)
        assert np.array_equal(out[:8, 0], np.arange(6.0, 30.0, 3.0))
    finally:
        writer.unlink()


# ---------------------------------------------------------------------- mailbox semantics


class CountingLock:
    """A lock that counts blocking acquisitions (the client takes it only to withdraw)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.blocking = 0

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool:
        if block:
            self.blocking += 1
        return self._lock.acquire(block)

    def release(self) -> None:
        self._lock.release()


@pytest.fixture
def link() -> Iterator[LoopLink]:
    link = LoopLink.create()
    yield link
    link.unlink()


def test_a_request_the_loop_never_took_is_withdrawn(link: LoopLink) -> None:
    lock = CountingLock()
    client = ShmMailboxClient(link, lock, alive=lambda: True)
    server = ShmMailboxServer(link, lock)
    with pytest.raises(MailboxTimeout):
        client.call("stop", timeout=0.05)
    assert link.words[W.CANCELLED] == link.words[W.POSTED] == 1
    assert server.take() is None  # withdrawn: the loop never acts on it


def test_a_request_the_loop_took_reports_its_true_outcome_after_the_timeout(
    link: LoopLink,
) -> None:
    lock = CountingLock()
    client = ShmMailboxClient(link, lock, alive=lambda: True)
    server = ShmMailboxServer(link, lock)
    result: list[Any] = []
    caller = threading.Thread(target=lambda: result.append(client.call("stop", timeout=0.05)))
    caller.start()
    until(lambda: link.words[W.POSTED] == 1, "the request posted")
    req = server.take()
    assert req is not None and req.kind == "stop"
    until(lambda: lock.blocking >= 1, "the caller's timeout (it tries to withdraw)")
    req.finish(True, "", state="ARMED")
    caller.join(WAIT_S)
    assert result and result[0].ok and result[0].data["state"] == "ARMED"
    assert link.words[W.CANCELLED] == 0  # never withdrawn: it was executed


def test_payload_objects_cross_the_mailbox(link: LoopLink) -> None:
    lock = CountingLock()
    client = ShmMailboxClient(link, lock, alive=lambda: True)
    server = ShmMailboxServer(link, lock)
    result: list[Any] = []
    caller = threading.Thread(
        target=lambda: result.append(client.call("run", Constant(0.25), timeout=WAIT_S))
    )
    caller.start()
    until(lambda: link.words[W.POSTED] == 1, "the request posted")
    req = server.take()
    assert req is not None and isinstance(req.payload, Constant) and req.payload.volts == 0.25
    req.finish(False, "run refused: nope", code="rejected")
    caller.join(WAIT_S)
    assert not result[0].ok and result[0].reason == "run refused: nope"
    assert result[0].data["code"] == "rejected"


def test_commands_round_trip_through_the_loop_process(
    split: tuple[Service, DriveMirror],
) -> None:
    service, mirror = split
    api: ControlApi = service.api
    assert api.handle("arm", {})["state"] == "ARMED"
    assert service.loop.state == State.ARMED
    until(lambda: not np.allclose(mirror.volts, 0.0), "the hold's constant command on the valves")
    assert api.handle("disarm", {})["state"] == "IDLE"
    assert api.handle("arm", {})["state"] == "ARMED"
    assert api.handle("estop", {"reason": "test"})["state"] == "ESTOP"
    assert service.loop.fault is not None and service.loop.fault.code == Trip.ESTOP
    until(lambda: mirror.data[1] > 0 and np.allclose(mirror.volts, 0.0), "valves null")
    assert api.handle("reset", {})["state"] == "IDLE"
    assert service.loop.fault is None
    status = service.status()
    assert status["state"] == "IDLE" and status["loop_process"]["alive"]
    assert status["timing"]["cycles"] > 0
    until(lambda: service.housekeeping.events_forwarded >= 4, "the state events forwarded")


def test_an_experiment_runs_in_the_loop_process_with_its_progress_in_status(
    profile: Profile, tmp_path: Path
) -> None:
    from tests.loop.test_controller_integration import _experiment

    service = Service(
        relaxed(profile), None, loop_process=True, network=False, run_dir=tmp_path / "runs"
    )
    service.start()
    try:
        api = service.api
        api.handle("arm", {})
        reply = api.handle("run", {"experiment": _experiment(5.0, 2.0)})
        assert reply["state"] == "RUNNING" and reply["duration_s"] >= 2.0
        runner = service.status()["runner"]
        assert runner["kind"] == "ExperimentRunner" and runner["total_duration"] >= 2.0
        until(lambda: (service.status()["runner"] or {}).get("segment_name") == "sine", "progress")
        until(lambda: service.loop.state == State.ARMED, "the experiment's end")
        assert service.loop.fault is None
        assert api.handle("disarm", {})["state"] == "IDLE"
    finally:
        assert service.shutdown() == 0


def test_a_refusal_keeps_its_code_and_reason(split: tuple[Service, DriveMirror]) -> None:
    from daq.commands.errors import CommandError

    service, _ = split
    with pytest.raises(CommandError) as err:
        service.api.handle("reset", {})
    assert err.value.code == "invalid_state"


# ---------------------------------------------------------------------- death, both ways


def test_killing_the_loop_process_nulls_the_valves_and_the_service_reports_it(
    split: tuple[Service, DriveMirror], caplog: pytest.LogCaptureFixture
) -> None:
    service, mirror = split
    events: list[tuple[str, dict[str, Any]]] = []

    class Sink:
        def event(self, kind: str, **payload: Any) -> None:
            events.append((kind, payload))

    service.housekeeping.sinks.append(Sink())
    assert service.api.handle("arm", {})["state"] == "ARMED"
    until(lambda: not np.allclose(mirror.volts, 0.0), "the valves commanded")
    nulls_before = mirror.data[1]
    pid = service.loop.pid
    assert pid is not None
    with caplog.at_level(logging.ERROR, logger="daq.service"):
        os.kill(pid, signal.SIGKILL)
        until(service.loop.finished.is_set, "the service noticed the death")
    # Valves null through a fresh handle (the killed process never wrote that null).
    assert np.allclose(mirror.volts, 0.0) and mirror.data[1] > nulls_before
    status = service.status()
    assert status["state"] == "FAULT"
    assert status["fault"]["code"] == Trip.PROCESS_LOST and str(pid) in status["fault"]["where"]
    assert "SIGKILL" in status["fault"]["where"]
    assert "written to null" in status["loop_process"]["crash"]["valves"]
    assert any("died" in r.getMessage() for r in caplog.records)
    until(lambda: any(k == "fault" for k, _ in events), "the fault event forwarded")
    fault = next(p for k, p in events if k == "fault")
    assert fault["name"] == "PROCESS_LOST"


def test_the_sim_backend_loop_death_is_reported(profile: Profile, tmp_path: Path) -> None:
    service = Service(
        relaxed(profile), None, loop_process=True, network=False, run_dir=tmp_path / "runs"
    )
    service.start()
    try:
        pid = service.loop.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        until(service.loop.finished.is_set, "the service noticed the death")
        status = service.status()
        assert status["state"] == "FAULT" and status["fault"]["name"] == "PROCESS_LOST"
        assert "simulated" in status["loop_process"]["crash"]["valves"]
    finally:
        assert service.shutdown() == 1  # the loop died: not a clean exit


def _start_child(tmp_path: Path, heartbeat_ms: float) -> tuple[subprocess.Popen[str], int, Path]:
    prof = tmp_path / PROFILE.name
    text, n = re.subn(r"overrun_limit = \d+", "overrun_limit = 0", PROFILE.read_text())
    assert n == 1
    text = text.replace("[interlocks]", f"[interlocks]\nservice_heartbeat_ms = {heartbeat_ms}", 1)
    prof.write_text(text)
    mirror = tmp_path / "drive.bin"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("split_child.py")),
            str(mirror),
            str(prof),
            str(tmp_path / "runs"),
        ],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith(ARMED):
            return proc, int(line.split()[-1]), mirror
    proc.kill()
    pytest.fail("the child never armed:\n" + "".join(lines))


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie of a dead parent is reaped by init; /proc says which it is.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] in "ZX"
    except (FileNotFoundError, IndexError):
        return True


@pytest.mark.parametrize("how", ["SIGKILL", "SIGSTOP"])
def test_losing_the_service_makes_the_loop_null_the_valves(tmp_path: Path, how: str) -> None:
    """SIGKILL: the parent is gone (parent-death signal, getppid). SIGSTOP: the service is
    alive but frozen — only its stale heartbeat tells, and the loop must act on it alone."""
    proc, loop_pid, mirror_path = _start_child(tmp_path, heartbeat_ms=300.0)
    try:
        mirror = DriveMirror(mirror_path, 2)
        until(lambda: not np.allclose(mirror.volts, 0.0), "the valves commanded")
        nulls_before = mirror.data[1]
        proc.send_signal(getattr(signal, how))
        until(lambda: mirror.data[1] > nulls_before, "the loop process nulled the valves")
        assert np.allclose(mirror.volts, 0.0)
        until(lambda: _gone(loop_pid), "the loop process exited")
    finally:
        if how == "SIGSTOP":
            proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.communicate(timeout=WAIT_S)


def test_a_withdrawal_waits_for_a_held_lock_a_bounded_time(
    link: LoopLink, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loop process killed while holding the cross-process lock holds it forever: the
    caller's withdrawal waits at most LOCK_TIMEOUT_S for a real (semaphore) lock and then says
    so, instead of hanging the command server."""
    import multiprocessing

    from daq.loop import shm_mailbox

    monkeypatch.setattr(shm_mailbox, "LOCK_TIMEOUT_S", 0.2)
    lock = multiprocessing.get_context("spawn").Lock()
    client = ShmMailboxClient(link, lock, alive=lambda: True)
    assert lock.acquire(True, WAIT_S)  # held, as by a loop process that died holding it
    errors: list[BaseException] = []

    def call() -> None:
        try:
            client.call("stop", timeout=0.05)
        except BaseException as exc:
            errors.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    try:
        caller.join(WAIT_S)
        assert not caller.is_alive(), f"the caller still waits for the lock after {WAIT_S} s"
    finally:
        lock.release()  # a caller stuck in acquire() returns now
        caller.join(WAIT_S)
    assert len(errors) == 1 and isinstance(errors[0], MailboxTimeout), errors
    assert "never let go" in str(errors[0])
    assert link.words[W.CANCELLED] == 0  # not withdrawn: the caller could not take the lock


def test_an_unanswered_request_is_not_ok() -> None:
    from daq.loop.mailbox import Request

    req = Request("stop")
    assert not req.ok and not req.done.is_set()
    req.finish(True, state="ARMED")
    assert req.ok and req.data == {"state": "ARMED"} and req.done.is_set()


def test_take_survives_a_request_withdrawn_between_its_check_and_its_pop() -> None:
    from daq.loop.mailbox import Mailbox

    class Withdrawn:
        """A slot that held a request when looked at and is empty when popped."""

        def __bool__(self) -> bool:
            return True

        def popleft(self) -> None:
            raise IndexError("pop from an empty deque")

    mailbox = Mailbox()
    mailbox._slot = Withdrawn()  # type: ignore[assignment]
    assert mailbox.take() is None


def test_the_loop_never_waits_for_a_lock_the_service_holds(link: LoopLink) -> None:
    """The loop side only tries the lock: while the service holds it (withdrawing), `take`
    returns None at once and takes the request on a later cycle."""
    import multiprocessing

    lock = multiprocessing.get_context("spawn").Lock()
    server = ShmMailboxServer(link, lock)
    link.words[W.POSTED] = 1  # a request is pending
    assert lock.acquire(True, WAIT_S)
    got: list[Any] = []
    taker = threading.Thread(target=lambda: got.append(server.take()), daemon=True)
    try:
        taker.start()
        taker.join(WAIT_S)
        assert not taker.is_alive(), "take() waited for the lock"
        assert got == [None] and link.words[W.TAKEN] == 0
    finally:
        lock.release()
        taker.join(WAIT_S)


def test_a_request_that_does_not_unpickle_is_refused_not_raised(link: LoopLink) -> None:
    lock = CountingLock()
    server = ShmMailboxServer(link, lock)
    garbage = b"\x80\x05not a pickle"
    link.request[: len(garbage)] = np.frombuffer(garbage, np.uint8)
    link.words[W.REQUEST_LEN] = len(garbage)
    link.words[W.POSTED] = 1
    assert server.take() is None
    assert link.words[W.DONE] == 1  # answered
    ok, reason, data = pickle.loads(link.reply[: int(link.words[W.REPLY_LEN])].tobytes())
    assert not ok and "could not decode" in reason and data["code"] == "internal"


def test_a_reply_of_exactly_the_reply_area_is_kept_whole(link: LoopLink) -> None:
    """The reply area holds REPLY_BYTES: a reply of exactly that size keeps its reason and
    data; one byte more is cut to the first 1000 characters of its reason, without data."""
    from daq.loop.shared_link import REPLY_BYTES

    def size(n: int) -> int:
        return len(pickle.dumps((False, "r" * n, {}), protocol=pickle.HIGHEST_PROTOCOL))

    n = REPLY_BYTES - size(0)
    while size(n) > REPLY_BYTES:
        n -= 1
    assert size(n) == REPLY_BYTES
    lock = CountingLock()
    server = ShmMailboxServer(link, lock)
    for length, want in ((n, n), (n + 1, 1000)):
        posted = int(link.words[W.POSTED]) + 1
        data = pickle.dumps(("status", None), protocol=pickle.HIGHEST_PROTOCOL)
        link.request[: len(data)] = np.frombuffer(data, np.uint8)
        link.words[W.REQUEST_LEN] = len(data)
        link.words[W.POSTED] = posted
        req = server.take()
        assert req is not None
        req.finish(False, "r" * length)
        _, reason, _ = pickle.loads(link.reply[: int(link.words[W.REPLY_LEN])].tobytes())
        assert len(reason) == want


def test_a_request_of_exactly_the_request_area_is_posted(link: LoopLink) -> None:
    from daq.loop.shared_link import REQUEST_BYTES
    from daq.loop.shm_mailbox import MailboxOverflow

    def size(n: int) -> int:
        return len(pickle.dumps(("run", b"x" * n), protocol=pickle.HIGHEST_PROTOCOL))

    n = REQUEST_BYTES - size(0)
    while size(n) > REQUEST_BYTES:
        n -= 1
    assert size(n) == REQUEST_BYTES
    client = ShmMailboxClient(link, CountingLock(), alive=lambda: True)
    with pytest.raises(MailboxTimeout):  # posted (nobody takes it), not refused
        client.call("run", b"x" * n, timeout=0.01)
    assert link.words[W.REQUEST_LEN] == REQUEST_BYTES
    with pytest.raises(MailboxOverflow, match=f"{REQUEST_BYTES + 1} bytes"):
        client.call("run", b"x" * (n + 1), timeout=0.01)


def test_thread_mailbox_reports_the_outcome_of_a_request_taken_after_its_timeout() -> None:
    """In-thread mailbox: the caller's timeout comes, its withdrawal finds the slot empty
    (the loop took the request and is finishing it), so it waits for the loop's answer and
    returns it rather than a timeout."""
    from daq.loop.mailbox import Mailbox, Request

    class TakenSlot:
        req: Request | None = None

        def append(self, req: Request) -> None:
            self.req = req

        def popleft(self) -> Request:
            assert self.req is not None  # the loop took it and answers now
            self.req.finish(True, state="ARMED")
            raise IndexError("pop from an empty deque")

    mailbox = Mailbox()
    mailbox._slot = TakenSlot()  # type: ignore[assignment]
    req = mailbox.call("stop", timeout=0.0)
    assert req.ok and req.data["state"] == "ARMED"
