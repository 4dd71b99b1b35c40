"""The real-time and hardware-paced loops' arithmetic on a fake clock: deadlines, cycle count,
overrun lateness and wake-up latency as exact numbers (the loop reads `time.monotonic_ns` and
`time.sleep` through the module, so a clock that moves only when asked makes them exact; the
tests on the real clock can only bound them on a busy machine)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from daq.loop import Loop, cycle
from daq.loop.interlocks import STALL, Trip
from daq.loop.states import State
from daq.profile.schema import Profile
from tests.loop.conftest import post, with_changes
from tests.loop.fakes import FakeBackend, HoldP

#: What every clock read costs on the fake clock, ns: time moves a little at each look.
TICK = 1_000


class FakeClock:
    def __init__(self) -> None:
        self.ns = 5_000_000_000
        self.sleeps: list[float] = []

    def monotonic_ns(self) -> int:
        self.ns += TICK
        return self.ns

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.ns += round(seconds * 1e9)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(
        cycle, "time", SimpleNamespace(monotonic_ns=fake.monotonic_ns, sleep=fake.sleep)
    )
    return fake


class _SlowStep(FakeBackend):
    """The rig's share of cycle `at` (its `between_cycles`) takes `extra_ns` of the clock."""

    def __init__(self, profile: Profile, clock: FakeClock, at: int, extra_ns: int) -> None:
        super().__init__(profile)
        self.clock, self.at, self.extra_ns, self.calls = clock, at, extra_ns, 0
        self.t_next: list[float] = []

    def between_cycles(self, t_next: float) -> None:
        if self.calls == self.at:
            self.clock.ns += self.extra_ns
        self.calls += 1
        self.t_next.append(t_next)


def test_a_realtime_run_of_n_periods_runs_n_cycles_each_on_its_deadline(
    profile: Profile, clock: FakeClock
) -> None:
    # Real time is the default: a rig's loop is paced unless asked not to be.
    loop = Loop(profile, FakeBackend(profile), hold=HoldP(), spin_us=200.0)
    assert loop.spin_ns == 200_000 and loop.status()["wall_s"] == 0.0
    loop.run(50 * loop.period)
    snap = loop.timing.snapshot()
    assert loop.seq == 50 and snap["overruns"] == 0 and snap["skipped_cycles"] == 0
    # Each cycle sleeps to its deadline less the spin margin (a few clock reads early), then
    # spins the rest: no sleep longer than a period less the margin.
    assert len(clock.sleeps) == 50
    assert max(clock.sleeps) <= loop.period - 200e-6
    assert min(clock.sleeps) > loop.period - 200e-6 - 50 * TICK * 1e-9
    # The wake-up is a few clock reads after the deadline, never a period.
    assert loop.timing.wake_max_ns <= 5 * TICK
    assert 0 < loop.timing.between_max_ns <= 2 * TICK  # the rig's step: nothing here
    rows = loop.ring.data[:50]
    assert rows[:, 1].tolist() == pytest.approx([k * loop.period for k in range(50)])
    # Once stopped, the wall time is the run's and stays so (the clock moves on regardless).
    wall = loop.status()["wall_s"]
    assert wall == (loop.stopped_ns - loop.started_ns) * 1e-9
    assert 50 * loop.period <= wall < 52 * loop.period
    clock.sleep(1.0)
    assert loop.status()["wall_s"] == wall


def test_a_cycle_that_wakes_within_the_spin_margin_spins_without_sleeping(
    profile: Profile, clock: FakeClock
) -> None:
    """The rig's step after cycle 10 takes 0.9 ms of the 1 ms period: cycle 11's deadline is
    then nearer than the 200 µs spin margin. It must spin the rest, not sleep — a sleep of
    the (negative) remainder is an error from `time.sleep` — and still run on its deadline."""
    backend = _SlowStep(profile, clock, at=10, extra_ns=900_000)
    loop = Loop(profile, backend, hold=HoldP(), spin_us=200.0)
    loop.run(50 * loop.period)
    snap = loop.timing.snapshot()
    assert loop.seq == 50 and snap["overruns"] == 0 and snap["skipped_cycles"] == 0
    assert len(clock.sleeps) == 49 and min(clock.sleeps) > 0.0
    assert loop.timing.wake_max_ns <= 5 * TICK


class _Progress(HoldP):
    """A hold that says where it is, as the experiment runner does."""

    segment_index, segment_name, elapsed, total_duration = 2, "multisine", 12.5, 110.0
    time_in_segment, segment_duration, segment_repeats = 0.5, 20.0, 1
    private = "not reported"


def test_status_reports_the_active_runners_progress(profile: Profile) -> None:
    loop = Loop(profile, FakeBackend(profile), hold=_Progress(), virtual_time=True)
    assert loop.status()["runner"] is None
    post(loop, "arm")
    loop.run(3 * loop.period)
    assert loop.state == State.ARMED
    assert loop.status()["runner"] == {
        "kind": "_Progress",
        "segment_index": 2,
        "segment_name": "multisine",
        "elapsed": 12.5,
        "total_duration": 110.0,
        "time_in_segment": 0.5,
        "segment_duration": 20.0,
        "segment_repeats": 1,
    }


class _ReadRaises(FakeBackend):
    def read(self, t: float, raw_out: Any) -> Any:
        raise RuntimeError("driver blew up")


def test_the_loop_threads_exception_is_kept_for_the_services_exit_code(profile: Profile) -> None:
    loop = Loop(profile, _ReadRaises(profile), hold=HoldP(), virtual_time=True)
    loop.start(1.0)
    assert loop.join(60.0)
    assert isinstance(loop.error, cycle.LoopError) and "driver blew up" in str(loop.error)
    assert loop.state == State.FAULT


def test_a_late_cycle_reports_how_long_after_its_own_deadline_it_ended(
    profile: Profile, clock: FakeClock
) -> None:
    """Cycle 20's plant step takes 2.5 periods: it ends ~2.5 ms after its own deadline, which
    is what the stall limit (2 ms) is compared with; the two deadlines it covered are skipped."""
    prof = with_changes(profile, overrun_limit=100_000, stall_ms=2.0)
    backend = _SlowStep(prof, clock, at=20, extra_ns=2_500_000)
    loop = Loop(prof, backend, hold=HoldP(), virtual_time=False)
    post(loop, "arm")
    loop.run(40 * loop.period)
    f = loop.fault
    assert loop.state == State.FAULT and f is not None and f.code == Trip.OVERRUN
    assert f.where == STALL and f.limit == pytest.approx(2.0)
    assert f.value == pytest.approx(2.5, abs=0.05)  # ms: its own deadline to its end
    assert loop.timing.snapshot()["skipped_cycles"] == 2


def test_a_late_cycle_under_the_stall_limit_does_not_trip(
    profile: Profile, clock: FakeClock
) -> None:
    prof = with_changes(profile, overrun_limit=100_000, stall_ms=3.0)
    backend = _SlowStep(prof, clock, at=20, extra_ns=2_500_000)
    loop = Loop(prof, backend, hold=HoldP(), virtual_time=False)
    post(loop, "arm")
    loop.run(40 * loop.period)
    assert loop.fault is None and loop.state == State.ARMED
    assert loop.timing.snapshot()["overruns"] == 1
    # The rig's step is told the loop time it runs to: the next cycle's, on the period grid
    # (two deadlines skipped after the slow one).
    grid = [(k + 1) * loop.period for k in range(21)] + [
        (k + 3) * loop.period for k in range(21, 38)
    ]
    assert backend.t_next == pytest.approx(grid, rel=0, abs=1e-12)
    # Each row's compute time is the cycle's own, in seconds: a few clock reads, not a period.
    rows = loop.ring.data[: loop.seq]
    assert np.all(rows[:, 6] > 0.0) and np.all(rows[:, 6] < 20 * TICK * 1e-9)


def test_consecutive_overruns_trip_at_the_profiles_limit(
    profile: Profile, clock: FakeClock
) -> None:
    """overrun_limit = 3: three late cycles in a row trip, on the third (the stall form off)."""

    class _SlowRun(FakeBackend):
        def between_cycles(self, t_next: float) -> None:
            if 10 <= round(t_next / prof.period) <= 30:
                clock.ns += round(1.2 * prof.period * 1e9)

    prof = with_changes(profile, overrun_limit=3, stall_ms=0.0)
    loop = Loop(prof, _SlowRun(prof), hold=HoldP(), virtual_time=False)
    post(loop, "arm")
    loop.run(60 * loop.period)
    f = loop.fault
    assert f is not None and f.code == Trip.OVERRUN and f.where != STALL
    assert f.value == 3.0 and f.limit == 3.0
    assert loop.timing.snapshot()["max_consecutive_overruns"] >= 3


def test_a_ring_of_another_width_is_refused_and_a_loop_never_started_joins_at_once(
    profile: Profile,
) -> None:
    from daq.ring import SampleRing

    loop = Loop(profile, FakeBackend(profile), virtual_time=True)
    assert loop.join(0.0) is True  # nothing to wait for
    width = loop.layout.width
    Loop(profile, FakeBackend(profile), virtual_time=True, ring=SampleRing(64, width))
    with pytest.raises(ValueError, match=f"ring rows have {width + 1} columns"):
        Loop(profile, FakeBackend(profile), virtual_time=True, ring=SampleRing(64, width + 1))


class _PacedLate(FakeBackend):
    """Paced by its own clock: each wait returns 30 µs after the device's tick (on the fake
    clock), the eighth 130 µs after it; the first reports one tick missed (the task started a
    tick before the loop waited), the fifth two."""

    paced_by_hardware = True
    LATENCY_NS, SLOW_NS = 30_000, 130_000

    def __init__(self, profile: Profile, clock: FakeClock) -> None:
        super().__init__(profile)
        self.clock, self.calls, self.ticks = clock, 0, 0
        self.tick0 = clock.ns

    def wait_next_cycle(self) -> int:
        period_ns = round(self.profile.period * 1e9)
        missed = {0: 1, 4: 2}.get(self.calls, 0)
        latency = self.SLOW_NS if self.calls == 7 else self.LATENCY_NS
        self.calls += 1
        self.ticks += 1 + missed
        # The device's tick for this wait, then the driver's latency after it.
        self.clock.ns = self.tick0 + self.ticks * period_ns + latency
        return missed


def test_a_hardware_paced_loop_measures_wake_up_against_the_device_grid(
    profile: Profile, clock: FakeClock
) -> None:
    """The grid's origin is the first wait's tick as the loop saw it (its latency included);
    every later wake-up is measured against it: 0 at the usual latency, the 100 µs more of the
    slow wait, never a period."""
    loop = Loop(profile, _PacedLate(profile, clock), hold=HoldP(), virtual_time=False)
    loop.run(20 * loop.period)
    snap = loop.timing.snapshot()
    # Missed ticks: one before the first cycle (an overrun too) and two at the fifth wait.
    assert snap["overruns"] == 2 and snap["skipped_cycles"] == 3
    assert loop.seq == 17
    slow = _PacedLate.SLOW_NS - _PacedLate.LATENCY_NS
    assert slow <= loop.timing.wake_max_ns <= slow + 5 * TICK
    # The rig's step between cycles (nothing here) costs the clock reads around it.
    assert 0 < loop.timing.between_max_ns <= 2 * TICK


class _PacedMissing(_PacedLate):
    """A hardware-paced rig whose twentieth wait reports three device ticks missed."""

    def wait_next_cycle(self) -> int:
        period_ns = round(self.profile.period * 1e9)
        missed = 3 if self.calls == 20 else 0
        self.calls += 1
        self.ticks += 1 + missed
        self.clock.ns = self.tick0 + self.ticks * period_ns + self.LATENCY_NS
        return missed


@pytest.mark.parametrize(("stall_ms", "trips"), [(2.5, True), (3.5, False)])
def test_a_hardware_paced_loop_judges_missed_ticks_against_the_stall_limit(
    profile: Profile, clock: FakeClock, stall_ms: float, trips: bool
) -> None:
    """On a device clock the lateness of a cycle that missed ticks is the ticks it missed
    times the period: three missed at 1 kHz are 3 ms late, over a 2.5 ms stall limit (a trip
    naming 3 ms) and under a 3.5 ms one."""
    prof = with_changes(profile, overrun_limit=100_000, stall_ms=stall_ms)
    loop = Loop(prof, _PacedMissing(prof, clock), hold=HoldP(), virtual_time=False)
    post(loop, "arm")
    loop.run(40 * loop.period)
    f = loop.fault
    if trips:
        assert f is not None and f.code == Trip.OVERRUN and f.where == STALL
        assert f.value == pytest.approx(3.0) and f.limit == pytest.approx(stall_ms)
    else:
        assert f is None and loop.state == State.ARMED
        assert loop.timing.snapshot()["skipped_cycles"] == 3


def test_a_backend_whose_channels_do_not_match_the_profile_is_refused(profile: Profile) -> None:
    class _Short(FakeBackend):
        def __init__(self, p: Profile, inputs: int, outputs: int) -> None:
            super().__init__(p)
            self.n_inputs, self.n_outputs = inputs, outputs

    n_in, n_out = len(profile.inputs), len(profile.outputs)
    for inputs, outputs in ((n_in - 1, n_out), (n_in, n_out + 1)):
        with pytest.raises(ValueError, match=f"backend has {inputs} inputs/{outputs} outputs"):
            Loop(profile, _Short(profile, inputs, outputs), virtual_time=True)


class _PacedLog(_PacedLate):
    """`_PacedLate` that also notes the loop time each rig step between cycles is told."""

    def __init__(self, profile: Profile, clock: FakeClock) -> None:
        super().__init__(profile, clock)
        self.t_next: list[float] = []

    def between_cycles(self, t_next: float) -> None:
        self.t_next.append(t_next)


def test_a_hardware_paced_rigs_step_is_told_the_next_ticks_loop_time(
    profile: Profile, clock: FakeClock
) -> None:
    """After cycle k (loop time k·period on the device's tick grid) the rig steps to the next
    tick's time, (k + 1)·period, also across the ticks missed at the first and fifth waits:
    a step told another time would move the plant to the wrong instant."""
    loop = Loop(profile, _PacedLog(profile, clock), hold=HoldP(), virtual_time=False)
    loop.run(20 * loop.period)
    backend = loop.backend
    assert isinstance(backend, _PacedLog)
    ticks = [1, 2, 3, 4, *range(7, 20)]  # the device ticks the 17 cycles ran on
    assert loop.seq == len(ticks) and len(backend.t_next) == len(ticks)
    rows = loop.ring.data[: loop.seq]
    assert rows[:, 1].tolist() == pytest.approx([k * loop.period for k in ticks], abs=1e-12)
    assert backend.t_next == pytest.approx([(k + 1) * loop.period for k in ticks], abs=1e-12)


class _PacedOnDemand(_PacedLate):
    """A device clock that misses one tick at every wait while `late` is set."""

    late = False

    def wait_next_cycle(self) -> int:
        period_ns = round(self.profile.period * 1e9)
        missed = 1 if self.late else 0
        self.calls += 1
        self.ticks += 1 + missed
        self.clock.ns = self.tick0 + self.ticks * period_ns + self.LATENCY_NS
        return missed


def test_overruns_while_latched_raise_no_flag_and_do_not_block_the_reset(
    profile: Profile, clock: FakeClock
) -> None:
    """A latched rig has its valves null already: overruns are counted but decide nothing.
    Ten in a row, past the limit of three, leave every row's flags at 0 and the e-stop's
    fault as it was; the reset asked right after them is accepted (a pending OVERRUN would
    put its flag in the last row, and `reset` refuses while the last row has a cause)."""
    prof = with_changes(profile, overrun_limit=3, stall_ms=0.0)
    backend = _PacedOnDemand(prof, clock)
    loop = Loop(prof, backend, hold=HoldP(), virtual_time=False)
    post(loop, "estop")
    loop.run(3 * loop.period)
    assert loop.state == State.ESTOP and loop.fault is not None
    fault = loop.fault
    latched_from = loop.seq
    backend.late = True
    loop.run(20 * loop.period)  # every wait misses a tick: ten cycles, each an overrun
    snap = loop.timing.snapshot()
    assert loop.seq - latched_from == 10 and snap["overruns"] == 10
    assert snap["max_consecutive_overruns"] == 10
    flags = loop.ring.data[latched_from : loop.seq, loop.layout.index("flags")]
    assert flags.tolist() == [0.0] * 10 and loop.last_flags == 0
    assert loop.fault is fault and loop.state == State.ESTOP
    backend.late = False
    reset = post(loop, "reset")
    loop.run(3 * loop.period)
    assert reset.ok, reset.reason
    assert loop.state == State.IDLE and loop.fault is None
