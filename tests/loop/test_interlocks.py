"""Every interlock trips on the data, nulls the valves in the same cycle and latches."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from controller.feedback import Feedback
from daq.loop import Loop
from daq.loop.interlocks import CLAMP_FLAG, Trip, flag
from daq.loop.states import State
from tests.loop.conftest import col, cycles, post, with_changes
from tests.loop.fakes import FakeBackend, HoldP, Scripted

MakeLoop = Callable[..., tuple[Loop, FakeBackend]]
LIVE_V = 0.5


class Constant(HoldP):
    """Holds the reference at the captured position and drives a constant command, so that a
    trip visibly takes the valves from LIVE_V to null."""

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
        super().step(fb, ref_out, volts_out)
        volts_out.fill(LIVE_V)
        return True


def _override(ch: str, value: float) -> Callable[[FakeBackend], None]:
    def inject(b: FakeBackend) -> None:
        b.override[ch] = value

    return inject


def _attr(name: str, value: Any) -> Callable[[FakeBackend], None]:
    def inject(b: FakeBackend) -> None:
        setattr(b, name, value)

    return inject


CASES = [
    # (trip, injection, where)
    (Trip.CHANNEL_RANGE, _override("oil_temp", -20.0), "oil_temp"),  # broken wire, 0 V rail
    (Trip.CHANNEL_RANGE, _override("spool_1", 3.5), "spool_1"),  # LVDT beyond its range
    (Trip.CHANNEL_FAULT, _attr("flag_channel", "q_2"), "q_2"),
    (Trip.SOFT_LIMIT, _override("q_1", math.radians(59.0)), "j1"),
    (Trip.PRESSURE, _override("p_cap_2", 8.0e6), "p_cap_2"),
    (Trip.FOLLOWING_ERROR, _override("q_2", math.radians(30.0 + 4.0)), "j2"),
    (Trip.BACKEND_READ, _attr("read_error", True), ""),
    (Trip.BACKEND_WRITE, _attr("write_error", True), ""),
]


@pytest.mark.parametrize(("code", "inject", "where"), CASES, ids=lambda x: str(x))
def test_interlock_trips_nulls_same_cycle_and_latches(
    make_loop: MakeLoop, code: Trip, inject: Callable[[FakeBackend], None], where: str
) -> None:
    loop, backend = make_loop(hold=Constant())
    post(loop, "arm")
    cycles(loop, 20)
    assert loop.state == State.ARMED
    live = loop.seq - 1
    assert col(loop, live, "cmd.valve_1") == LIVE_V
    assert backend.last_written[0] == LIVE_V

    inject(backend)
    trip_seq = loop.seq
    nulls = backend.null_writes
    cycles(loop, 1)
    # The very cycle that saw the condition wrote null and records why.
    assert loop.state == State.FAULT
    assert col(loop, trip_seq, "state") == State.FAULT
    assert col(loop, trip_seq, "fault") == code
    assert int(col(loop, trip_seq, "flags")) & flag(code)
    assert col(loop, trip_seq, "cmd.valve_1") == 0.0
    assert col(loop, trip_seq, "cmd.valve_2") == 0.0
    if code == Trip.BACKEND_WRITE:
        # The failed write is followed by write_null in the same cycle (+1 at run()'s exit).
        assert backend.null_writes == nulls + 2
    else:
        assert np.all(backend.last_written == 0.0)
    assert loop.fault is not None and loop.fault.code == code
    assert where in loop.fault.where and loop.fault.seq == trip_seq
    faults = [e for e in loop.events if e["kind"] == "fault"]
    assert len(faults) == 1 and faults[0]["code"] == code and faults[0]["message"]
    status = loop.status()
    assert status["state"] == "FAULT" and status["fault"]["name"] == code.name

    # Latched: the condition going away does not clear it, and arming is refused.
    backend.override.clear()
    backend.flag_channel = None
    backend.read_error = backend.write_error = False
    cycles(loop, 10)
    assert loop.state == State.FAULT and col(loop, loop.seq - 1, "fault") == code
    arm = post(loop, "arm")
    cycles(loop, 1)
    assert not arm.ok and "reset first" in arm.reason
    assert np.all(backend.last_written == 0.0)

    reset = post(loop, "reset")
    cycles(loop, 2)
    assert reset.ok and loop.state == State.IDLE and loop.fault is None
    assert col(loop, loop.seq - 1, "fault") == 0


def test_channel_range_trips_in_idle_too(make_loop: MakeLoop) -> None:
    loop, backend = make_loop()
    backend.override["p_rod_1"] = 9.9e6  # saturated transducer, beyond valid_max
    cycles(loop, 1)
    assert loop.state == State.FAULT and loop.fault is not None
    assert loop.fault.code == Trip.CHANNEL_RANGE and loop.fault.where == "p_rod_1"
    assert loop.fault.limit == 9.5e6


@pytest.mark.parametrize(
    ("volts", "code"), [(5.0, Trip.VALVE_RATE), (math.nan, Trip.COMMAND_INVALID)]
)
def test_bad_commands_trip(make_loop: MakeLoop, volts: float, code: Trip) -> None:
    loop, backend = make_loop(hold=Scripted(volts, after=5))
    post(loop, "arm")
    cycles(loop, 5)
    assert loop.state == State.ARMED
    trip_seq = loop.seq  # the runner steps from the arming cycle on: 6th step is seq 5
    cycles(loop, 5)
    assert loop.state == State.FAULT and loop.fault is not None
    assert loop.fault.code == code and loop.fault.where == "valve_1"
    assert loop.fault.seq == trip_seq
    assert col(loop, trip_seq, "cmd.valve_1") == 0.0 and np.all(backend.last_written == 0.0)
    if code == Trip.VALVE_RATE:
        assert loop.fault.value > loop.fault.limit == pytest.approx(2000.0)


def test_amplitude_is_clamped_and_counted_not_tripped(make_loop: MakeLoop) -> None:
    class Climb(HoldP):
        def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
            super().step(fb, ref_out, volts_out)
            self.k = getattr(self, "k", 0) + 1
            volts_out.fill(min(9.0, 1.0 * self.k))  # 1 V/ms: within the 2000 V/s rate
            return True

    prof = with_changes(loop_profile(make_loop), following_error=False)
    loop, backend = make_loop(prof, hold=Climb())
    post(loop, "arm")
    cycles(loop, 30)
    assert loop.state == State.ARMED, loop.fault
    assert col(loop, loop.seq - 1, "cmd.valve_1") == 6.0  # valve_max_v
    assert backend.last_written[0] == 6.0
    assert loop.interlocks.clamped >= 20
    assert int(col(loop, loop.seq - 1, "flags")) & CLAMP_FLAG


def loop_profile(make_loop: MakeLoop) -> Any:
    loop, _ = make_loop()
    return loop.profile


def test_disabled_interlock_does_not_trip(make_loop: MakeLoop) -> None:
    prof = with_changes(loop_profile(make_loop), pressure=False)
    loop, backend = make_loop(prof)
    backend.override["p_cap_2"] = 8.0e6
    cycles(loop, 10)
    assert loop.state == State.IDLE


def test_estop_acts_in_the_next_cycle(make_loop: MakeLoop) -> None:
    loop, backend = make_loop(hold=Constant())
    post(loop, "arm")
    cycles(loop, 10)
    req = post(loop, "estop", "operator")
    before = loop.seq
    cycles(loop, 1)
    assert req.ok and req.data["seq"] == before
    assert col(loop, before, "state") == State.ESTOP
    assert col(loop, before, "fault") == Trip.ESTOP
    assert (
        col(loop, before, "cmd.valve_1") == 0.0 and col(loop, before - 1, "cmd.valve_1") == LIVE_V
    )
    assert np.all(backend.last_written == 0.0)
    # A fault after an e-stop does not replace it.
    backend.override["p_cap_1"] = 8.0e6
    cycles(loop, 3)
    assert loop.state == State.ESTOP and loop.fault is not None and loop.fault.code == Trip.ESTOP


def test_consecutive_overruns_trip_in_real_time(profile: Any) -> None:
    class Slow(FakeBackend):
        def read(self, t: float, raw_out: np.ndarray) -> Any:
            time.sleep(0.0025)  # every cycle takes longer than the 1 ms period
            return super().read(t, raw_out)

    prof = with_changes(profile, overrun_limit=3)
    backend = Slow(prof)
    loop = Loop(prof, backend, hold=HoldP(), ring_capacity=1 << 10)
    loop.run(0.05)
    assert loop.fault is not None and loop.fault.code == Trip.OVERRUN
    assert loop.fault.seq == 3  # cycles 0, 1, 2 overran; cycle 3 trips
    timing: dict[str, Any] = loop.timing.snapshot()
    assert timing["overruns"] >= 3 and timing["skipped_cycles"] >= 3
    # Skipped, not bunched: consecutive rows are at least two periods apart.
    t = loop.ring.data[: loop.seq, 1]
    assert np.all(np.diff(t) >= 2 * loop.period - 1e-9)


def test_reset_is_refused_while_the_cause_is_present(make_loop: MakeLoop) -> None:
    loop, backend = make_loop()
    backend.override["p_cap_2"] = 8.0e6
    cycles(loop, 3)
    assert loop.state == State.FAULT
    req = post(loop, "reset")
    cycles(loop, 1)
    assert not req.ok and req.data["code"] == "rejected"
    assert "still present" in req.reason and "PRESSURE" in req.reason
    assert loop.state == State.FAULT
    backend.override.clear()
    cycles(loop, 1)
    req = post(loop, "reset")
    cycles(loop, 1)
    assert req.ok and loop.state == State.IDLE


def test_flag_bits_are_the_recorded_ones_and_described_by_name() -> None:
    """The `flags` column is recorded: each trip's bit is 1 << (code − 1), never renumbered,
    all distinct and below the clamp bit."""
    from daq.loop.interlocks import describe_flags

    assert flag(Trip.CHANNEL_RANGE) == 1 and flag(Trip.PRESSURE) == 8
    assert flag(Trip.PROCESS_LOST) == 1 << 13
    bits = [flag(t) for t in Trip if t != Trip.NONE]
    assert len(set(bits)) == len(bits) and max(bits) < CLAMP_FLAG
    assert describe_flags(0) == "none"
    assert describe_flags(flag(Trip.PRESSURE)) == "PRESSURE"
    assert describe_flags(flag(Trip.ESTOP) | CLAMP_FLAG) == "ESTOP, CLAMPED"


def test_trip_messages_tell_a_stall_from_consecutive_overruns() -> None:
    from daq.loop.interlocks import STALL, TripInfo

    info = TripInfo(Trip.OVERRUN, "", 5.0, 3.0)
    assert info.seq == -1 and info.to_dict()["seq"] == -1  # not stamped with a row yet
    assert info.message == "5 consecutive overruns (limit 3)"
    stall = TripInfo(Trip.OVERRUN, STALL, 12.25, 5.0)
    assert stall.message == "a cycle ended 12.2 ms late (stall limit 5.0 ms)"
    assert TripInfo(Trip.PRESSURE, "p_cap_1", 2.1e7, 2.0e7).message.startswith("pressure on")
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):  # a latched fault is not edited
        info.value = 0.0  # type: ignore[misc]


def test_a_command_moving_exactly_at_the_rate_limit_does_not_trip(profile: Any) -> None:
    from daq.loop.interlocks import Interlocks

    il = Interlocks(profile)
    lim = profile.joints[0].limits.valve_max_rate_v_per_s * profile.period
    null = np.array([c.null_volts for c in profile.outputs])
    il.begin_cycle()
    il.limit_outputs(null + lim, null.copy())
    assert il.first is None, il.first
    il.limit_outputs(null + 1.001 * lim, null.copy())
    assert il.first is not None and il.first.code == Trip.VALVE_RATE
