from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from controller.feedback import Feedback
from daq.backends.base import BackendStatus
from daq.loop import Loop
from daq.loop.cycle import LoopError
from daq.loop.interlocks import Trip
from daq.loop.states import State
from daq.profile.schema import Profile
from tests.loop.conftest import col, cycles, post, row, with_changes
from tests.loop.fakes import Constant, FakeBackend, HoldP, Ramp

MakeLoop = Callable[..., tuple[Loop, FakeBackend]]


def test_idle_reads_and_keeps_valves_at_null(make_loop: MakeLoop) -> None:
    loop, backend = make_loop()
    cycles(loop, 50)
    assert loop.seq == 50 and backend.writes == 50
    lay = loop.layout
    for s in range(50):
        r = row(loop, s)
        assert r[lay.index("state")] == State.IDLE
        assert np.all(r[lay.span("cmd")] == 0.0)
        assert np.all(np.isnan(r[lay.span("ref")]))
    # The row holds the counts the backend gave and their scaled value.
    q1 = col(loop, 10, "eng.q_1")
    assert abs(np.degrees(q1) - 40.0) < 0.05
    assert col(loop, 10, "raw.q_1") == round(col(loop, 10, "raw.q_1"))


def test_rows_are_contiguous_and_time_is_seq_times_period(make_loop: MakeLoop) -> None:
    loop, _ = make_loop()
    cycles(loop, 1000)
    seq = loop.ring.data[:1000, 0]
    t = loop.ring.data[:1000, 1]
    assert np.array_equal(seq, np.arange(1000))
    np.testing.assert_allclose(t, np.arange(1000) * loop.period, rtol=0, atol=1e-12)
    assert loop.ring.published == 1000


def test_arm_run_stop_disarm_cycle(make_loop: MakeLoop) -> None:
    hold = HoldP()
    loop, _ = make_loop(hold=hold)
    cycles(loop, 5)
    arm = post(loop, "arm")
    cycles(loop, 5)
    assert arm.ok and loop.state == State.ARMED and hold.enabled == 1
    ramp = Ramp(rate=0.1, steps=100)
    run = post(loop, "run", ramp)
    cycles(loop, 50)
    assert run.ok and loop.state == State.RUNNING
    # The reference moves; the valve command follows the error.
    s = loop.seq - 1
    assert col(loop, s, "ref.j1") > col(loop, run.data["seq"], "ref.j1")
    cycles(loop, 100)  # the ramp finishes: back to ARMED holding where it ended
    assert loop.state == State.ARMED
    assert any(e["kind"] == "experiment_done" for e in loop.events)
    stop = post(loop, "stop")
    cycles(loop, 2)
    assert not stop.ok and "stop needs RUNNING" in stop.reason
    disarm = post(loop, "disarm")
    cycles(loop, 2)
    assert disarm.ok and loop.state == State.IDLE
    assert col(loop, loop.seq - 1, "cmd.valve_1") == 0.0
    kinds = [(e["kind"], e.get("state")) for e in loop.events]
    assert kinds[:3] == [("state", "ARMED"), ("state", "RUNNING"), ("experiment_done", None)]


def test_invalid_commands_are_refused_and_change_nothing(make_loop: MakeLoop) -> None:
    loop, _ = make_loop()
    cycles(loop, 2)
    for kind in ("run", "stop", "disarm", "reset"):
        req = post(loop, kind)
        cycles(loop, 1)
        assert req.done.is_set() and not req.ok and req.reason
        assert loop.state == State.IDLE
    bogus = post(loop, "launch")
    cycles(loop, 1)
    assert not bogus.ok and "unknown" in bogus.reason


def test_arm_refused_outside_soft_limits(make_loop: MakeLoop) -> None:
    loop, backend = make_loop()
    backend.q[1] = np.radians(50.0)  # soft max of j2 is 48°
    cycles(loop, 2)
    req = post(loop, "arm")
    cycles(loop, 1)
    assert not req.ok and "j2" in req.reason and "soft" in req.reason
    assert loop.state == State.IDLE


@pytest.mark.parametrize("end", ["soft_min", "soft_max"])
def test_arm_accepted_with_a_joint_exactly_on_a_soft_limit(make_loop: MakeLoop, end: str) -> None:
    """The soft-limit window is closed: a joint read exactly on a limit (here the limit moved
    onto the reading, to the last bit) may be armed — as the cycle's interlock, which trips
    only beyond it, lets it stay armed."""
    loop, _ = make_loop()
    cycles(loop, 2)
    getattr(loop.interlocks, end)[1] = loop.fb.q[1]
    req = post(loop, "arm")
    cycles(loop, 3)
    assert req.ok, req.reason
    assert loop.state == State.ARMED and loop.fault is None


def test_arm_refused_without_a_controller(make_loop: MakeLoop) -> None:
    loop, _ = make_loop(hold=None)
    req = post(loop, "arm")
    cycles(loop, 1)
    assert not req.ok and "controller" in req.reason


def test_virtual_time_is_deterministic(make_loop: MakeLoop) -> None:
    def once() -> np.ndarray:
        loop, _ = make_loop()
        cycles(loop, 10)
        post(loop, "arm")
        cycles(loop, 10)
        post(loop, "run", Ramp(rate=0.2, steps=300))
        cycles(loop, 500)
        data = loop.ring.data[:520].copy()
        keep = [
            i
            for i, c in enumerate(loop.layout.columns)
            if c.name not in ("wake_latency", "compute_time")
        ]
        return data[:, keep]

    a, b = once(), once()
    assert np.array_equal(a, b, equal_nan=True)
    assert np.ptp(a[:, 1]) > 0.5  # it did run 520 cycles of loop time


def test_set_gains_in_armed_swaps_runner_bumplessly(make_loop: MakeLoop) -> None:
    loop, _ = make_loop()
    post(loop, "arm")
    cycles(loop, 3)
    new = HoldP(kp=4.0)
    req = post(loop, "set_gains", new)
    cycles(loop, 3)
    assert req.ok and loop.hold is new and loop.active is new and new.enabled == 1
    post(loop, "run")
    cycles(loop, 2)
    refused = post(loop, "set_gains", HoldP())
    cycles(loop, 1)
    assert not refused.ok and "RUNNING" in refused.reason


class _Raises(HoldP):
    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where

    def enable(self, fb: Feedback) -> None:
        if self.where == "enable":
            raise RuntimeError("cannot enable")
        super().enable(fb)

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
        if self.where == "step":
            raise ZeroDivisionError("law blew up")
        return super().step(fb, ref_out, volts_out)


def test_a_runner_that_fails_to_enable_is_refused_and_the_hold_goes_on(
    make_loop: MakeLoop,
) -> None:
    hold = HoldP()
    loop, _ = make_loop(hold=hold)
    post(loop, "arm")
    cycles(loop, 3)
    req = post(loop, "run", _Raises("enable"))
    cycles(loop, 3)
    assert not req.ok and "cannot enable" in req.reason and req.data["code"] == "rejected"
    assert loop.state == State.ARMED and loop.active is hold and hold.enabled == 2


def test_a_runner_raising_in_step_faults_but_the_loop_goes_on(make_loop: MakeLoop) -> None:
    loop, backend = make_loop()
    post(loop, "arm")
    cycles(loop, 3)
    post(loop, "run", _Raises("step"))
    cycles(loop, 10)
    assert loop.error is None and loop.seq == 13
    assert loop.state == State.FAULT and loop.fault is not None
    assert loop.fault.code == Trip.CONTROLLER_ERROR and "law blew up" in loop.fault.where
    assert col(loop, loop.fault.seq, "cmd.valve_1") == 0.0
    assert np.all(backend.last_written == 0.0)


class _ReadRaises(FakeBackend):
    """A backend whose read raises (a driver's bug, not a status) at its sixth call."""

    def __init__(self, profile: Profile) -> None:
        super().__init__(profile)
        self.reads = 0

    def read(self, t: float, raw_out: np.ndarray) -> BackendStatus:
        self.reads += 1
        if self.reads == 6:
            raise RuntimeError("driver blew up")
        return super().read(t, raw_out)


def test_an_exception_outside_the_controller_stops_the_loop_latched_with_valves_null(
    profile: Profile,
) -> None:
    """Not the controller's (that trips and goes on): the loop itself cannot go on. It latches
    FAULT with LOOP_ERROR naming the exception, nulls the valves and says so to its caller."""
    backend = _ReadRaises(profile)
    loop = Loop(profile, backend, hold=HoldP(), virtual_time=True, ring_capacity=1 << 12)
    post(loop, "arm")
    with pytest.raises(LoopError, match="driver blew up"):
        cycles(loop, 20)
    assert loop.state == State.FAULT and loop.fault is not None
    assert loop.fault.code == Trip.LOOP_ERROR and "driver blew up" in loop.fault.where
    assert loop.status()["fault"] == loop.fault.to_dict()  # what clients are told
    assert backend.null_writes >= 1
    assert backend.last_volts.tolist() == [c.null_volts for c in profile.outputs]
    assert loop.finished.is_set()


def test_a_failed_write_without_the_backend_error_interlock_nulls_and_goes_on(
    profile: Profile,
) -> None:
    """`backend_error = false` (a rig whose driver reports transient errors): a write that
    fails is followed by a null write, and the loop stays armed rather than tripping."""
    prof = with_changes(profile, backend_error=False)
    backend = FakeBackend(prof)
    loop = Loop(prof, backend, hold=Constant(), virtual_time=True, ring_capacity=1 << 12)
    post(loop, "arm")
    cycles(loop, 5)
    nulls = backend.null_writes
    backend.write_error = True
    cycles(loop, 3)
    assert loop.state == State.ARMED and loop.fault is None
    assert backend.null_writes >= nulls + 3  # one after each failed write
    assert col(loop, loop.seq - 1, "cmd.valve_1") == 0.0  # what reached the valves: null
    backend.write_error = False
    cycles(loop, 2)
    assert col(loop, loop.seq - 1, "cmd.valve_1") != 0.0


def test_a_hold_whose_compiled_twin_cannot_be_built_is_only_logged_at_warm_up(
    profile: Profile, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from controller.compiled import runner as compiled_runner

    def refuse(runner: object) -> object:
        raise ValueError("no twin for this law")

    monkeypatch.setattr(compiled_runner, "compile_runner", refuse)
    loop = Loop(profile, FakeBackend(profile), hold=HoldP(), virtual_time=True, compiled=True)
    with caplog.at_level("WARNING"):
        loop.warm_up()  # does not raise: the arm that needs the twin names why
    assert "could not be built" in caplog.text and "no twin for this law" in caplog.text


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_leaving_the_live_states_writes_null_not_the_runners_last_command(
    profile: Profile, compiled: bool
) -> None:
    """The runner's last command stays in the loop's output buffer when it is switched out:
    the cycle that disarms, and every cycle after it in IDLE, must write null, not that
    command (a runner holding 0.5 V would otherwise keep the valves open in IDLE)."""
    backend = FakeBackend(profile)
    loop = Loop(profile, backend, hold=Constant(0.5), virtual_time=True, compiled=compiled)
    post(loop, "arm")
    cycles(loop, 5)
    assert loop.state == State.ARMED and np.all(backend.last_written == 0.5)
    disarm = post(loop, "disarm")
    cycles(loop, 5)
    assert disarm.ok and loop.state == State.IDLE
    cmd = loop.layout.span("cmd")
    for s in range(disarm.data["seq"], loop.seq):
        assert row(loop, s)[cmd].tolist() == loop.null.tolist(), s
    assert backend.last_written.tolist() == loop.null.tolist()


class _ShutdownInRead(FakeBackend):
    """The service's shutdown (`Loop.stop`) lands while the loop's `at`-th read is in the
    driver, as a cycle stuck in a driver call past the shutdown."""

    def __init__(self, profile: Profile, at: int) -> None:
        super().__init__(profile)
        self.at, self.reads = at, 0
        self.loop: Loop | None = None

    def read(self, t: float, raw_out: np.ndarray) -> BackendStatus:
        self.reads += 1
        if self.reads == self.at:
            assert self.loop is not None
            self.loop.stop()
        return super().read(t, raw_out)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_a_cycle_that_a_stop_overtook_writes_null_even_while_armed(
    profile: Profile, compiled: bool
) -> None:
    """The service nulls the valves at shutdown; a cycle that was inside a driver call then
    must not command them again when the call returns, though the loop is still ARMED and its
    runner has a command: that cycle writes null and is the last."""
    backend = _ShutdownInRead(profile, at=8)
    loop = Loop(profile, backend, hold=Constant(0.5), virtual_time=True, compiled=compiled)
    backend.loop = loop
    post(loop, "arm")
    cycles(loop, 20)
    assert loop.seq == 8 and loop.state == State.ARMED  # no state change: only a stop
    assert row(loop, 6)[loop.layout.span("cmd")].tolist() == [0.5] * len(loop.null)
    assert row(loop, 7)[loop.layout.span("cmd")].tolist() == loop.null.tolist()
    assert backend.last_written.tolist() == loop.null.tolist()
