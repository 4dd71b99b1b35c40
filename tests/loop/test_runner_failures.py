"""The loop's command handling when a runner misbehaves (daq/loop/commands.py): a hold that
cannot start refuses the arm or the new gains and leaves the rig as it was; a runner that
cannot stop refuses the run, naming why; an e-stop over a fault is recorded as the e-stop;
disarming leaves no runner driving the valves."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from controller.feedback import Feedback
from daq.loop import Loop
from daq.loop.interlocks import Trip
from daq.loop.states import State
from tests.loop.conftest import cycles, post
from tests.loop.fakes import FakeBackend, HoldP, Ramp

MakeLoop = Callable[..., tuple[Loop, FakeBackend]]


class _NoStart(HoldP):
    def enable(self, fb: Feedback) -> None:
        raise RuntimeError("valve amplifier not ready")


class _NoStop(HoldP):
    def disable(self) -> None:
        raise RuntimeError("law stuck")


def _ask(loop: Loop, kind: str, payload: Any = None) -> Any:
    req = post(loop, kind, payload)
    cycles(loop, 3)
    assert req.done.is_set()
    return req


def test_arm_is_refused_when_the_hold_cannot_start(make_loop: MakeLoop) -> None:
    loop, _ = make_loop(hold=_NoStart())
    cycles(loop, 3)
    req = _ask(loop, "arm")
    assert not req.ok and req.data["code"] == "rejected"
    assert "arm refused: the controller failed to enable" in req.reason
    assert "valve amplifier not ready" in req.reason
    assert loop.state == State.IDLE and loop.active is None


def test_new_gains_whose_hold_cannot_start_leave_the_old_hold(make_loop: MakeLoop) -> None:
    good = HoldP()
    loop, _ = make_loop(hold=good)
    cycles(loop, 3)
    assert _ask(loop, "arm").ok
    req = _ask(loop, "set_gains", _NoStart())
    assert not req.ok and req.data["code"] == "rejected"
    assert "set_gains refused: the controller failed to enable" in req.reason
    assert loop.hold is good and loop.active is good and loop.state == State.ARMED


def test_a_runner_that_cannot_stop_refuses_the_run_naming_why(make_loop: MakeLoop) -> None:
    loop, _ = make_loop(hold=_NoStop())
    cycles(loop, 3)
    assert _ask(loop, "arm").ok
    req = _ask(loop, "run", Ramp(0.1, 100))
    assert not req.ok and "run refused: the runner failed to disable" in req.reason
    assert "law stuck" in req.reason
    assert loop.error is None  # the loop went on


def test_an_estop_over_a_fault_is_recorded_as_the_estop(make_loop: MakeLoop) -> None:
    loop, backend = make_loop()
    cycles(loop, 3)
    backend.read_error = True
    cycles(loop, 3)
    assert loop.state == State.FAULT and loop.fault is not None
    assert loop.fault.code == Trip.BACKEND_READ
    assert _ask(loop, "estop", "operator").ok
    assert loop.state == State.ESTOP and loop.fault.code == Trip.ESTOP


def test_disarm_leaves_no_runner_and_the_valves_null(make_loop: MakeLoop) -> None:
    loop, backend = make_loop()
    cycles(loop, 3)
    assert _ask(loop, "arm").ok and loop.active is not None
    assert _ask(loop, "disarm").ok
    assert loop.state == State.IDLE and loop.active is None
    null = np.array([c.null_volts for c in loop.profile.outputs])
    assert np.array_equal(backend.last_written, null)


class _Jump(HoldP):
    """A reference 10° away from where the arm is, from its first step on."""

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
        assert self.q0 is not None
        np.copyto(ref_out, self.q0 + np.radians(10.0))
        volts_out.fill(0.0)
        return True


def test_a_new_runners_first_reference_has_no_velocity_allowance(make_loop: MakeLoop) -> None:
    """The following-error limit widens with the reference's velocity. A runner switched in
    starts a new reference: its first step has no velocity (not the jump from the previous
    runner's last reference, which would widen the limit for that cycle), so a reference 10°
    off trips in the run's first cycle."""
    loop, _ = make_loop()
    cycles(loop, 3)
    assert _ask(loop, "arm").ok
    req = post(loop, "run", _Jump())
    start = loop.seq
    cycles(loop, 5)
    assert req.ok and loop.state == State.FAULT and loop.fault is not None
    assert loop.fault.code == Trip.FOLLOWING_ERROR
    assert loop.fault.seq == start, (loop.fault.seq, start)
