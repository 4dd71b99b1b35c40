"""The overrun interlock's second form: one long stall trips while the valves are live."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from daq.backends.sim import SimBackend
from daq.loop import Loop
from daq.loop.interlocks import STALL, Trip
from daq.loop.states import State
from daq.profile.schema import Profile
from tests.loop.conftest import post, with_changes
from tests.loop.fakes import FakeBackend, HoldP


def _stalled_run(profile: Profile, *, arm: bool, **interlocks: Any) -> Loop:
    prof = with_changes(profile, **interlocks)
    backend = SimBackend.from_profile(prof)
    backend.open()
    loop = Loop(prof, backend, hold=HoldP(), virtual_time=False, ring_capacity=1 << 14)
    loop.warm_up()
    backend.inject_fault("q_1:stall_read:0.15@0.2")  # one read blocks 150 ms at t = 0.2 s
    if arm:
        post(loop, "arm")
    loop.run(1.0)
    return loop


def test_one_long_stall_trips_while_armed(profile: Profile) -> None:
    # A consecutive-overrun limit far beyond reach: only the stall form can trip.
    loop = _stalled_run(profile, arm=True, overrun_limit=100_000, stall_ms=20.0)
    f = loop.fault
    assert loop.state == State.FAULT and f is not None, loop.status()
    assert f.code == Trip.OVERRUN and f.where == STALL, f
    # On a loaded machine a stall of the machine's own may come first: any > 20 ms trips.
    assert f.limit == pytest.approx(20.0) and f.value > 20.0, f
    assert "stall limit 20.0 ms" in f.message


def test_a_stall_in_idle_does_not_trip(profile: Profile) -> None:
    loop = _stalled_run(profile, arm=False, overrun_limit=100_000, stall_ms=20.0)
    assert loop.fault is None and loop.state == State.IDLE
    assert loop.timing.snapshot()["skipped_cycles"] >= 140  # the stall did happen


def test_stall_ms_zero_or_overrun_limit_zero_disables_it(profile: Profile) -> None:
    for keys in ({"overrun_limit": 100_000, "stall_ms": 0.0}, {"overrun_limit": 0}):
        loop = _stalled_run(profile, arm=True, **keys)
        assert loop.fault is None and loop.state == State.ARMED, (keys, loop.status())
        assert loop.timing.snapshot()["skipped_cycles"] >= 140


def test_stall_ms_is_bounded_in_the_profile(profile: Profile) -> None:
    with pytest.raises(ValueError, match="stall_ms"):
        profile.interlocks.model_validate({"stall_ms": -1.0})
    assert type(profile.interlocks)().stall_ms == 20.0


def test_after_a_stall_the_loop_skips_whole_cycles_and_keeps_its_period_grid(
    profile: Profile,
) -> None:
    """A 150 ms stall: the cycles it covered are skipped, counted whole, and the loop goes on on
    its own grid — every row's loop time a whole number of periods, and the last row's index on
    that grid equal to the cycles run plus the cycles skipped."""
    loop = _stalled_run(profile, arm=False, overrun_limit=100_000, stall_ms=20.0)
    first, n = loop.seq - loop.ring.capacity if loop.seq > loop.ring.capacity else 0, loop.seq
    rows = loop.ring.data[np.arange(first, n) & loop.ring.mask]
    k = rows[:, 1] / loop.period
    assert np.allclose(k, np.round(k), rtol=0.0, atol=1e-6), k[np.abs(k - np.round(k)) > 1e-6][:5]
    skipped = loop.timing.snapshot()["skipped_cycles"]
    assert skipped >= 140 and float(skipped).is_integer()
    # The wake-up column is in seconds (a units check: any wake-up is far under a second).
    assert np.all((rows[:, 5] >= 0.0) & (rows[:, 5] < 1.0)), rows[:, 5].max()
    assert round(k[-1]) - round(k[0]) == (n - 1 - first) + skipped


class _Paced(FakeBackend):
    """A backend paced by its own clock (as the NI task's sample clock): its fifth wait reports
    two cycles missed."""

    paced_by_hardware = True

    def __init__(self, profile: Profile) -> None:
        super().__init__(profile)
        self.waits = 0

    def wait_next_cycle(self) -> int:
        self.waits += 1
        return 2 if self.waits == 5 else 0


def test_a_hardware_paced_loop_runs_to_its_duration_on_the_device_clock(profile: Profile) -> None:
    """50 periods of loop time with two cycles missed: 48 cycles run, 2 counted skipped, each
    row at its place on the device's grid (0, 1, 2, 3, 6, 7, …, 49), none past the end."""
    backend = _Paced(profile)
    backend.open()
    loop = Loop(profile, backend, hold=HoldP(), virtual_time=False, ring_capacity=1 << 12)
    loop.run(50 * loop.period)
    assert loop.error is None
    rows = loop.ring.data[np.arange(loop.seq) & loop.ring.mask]
    grid = np.round(rows[:, 1] / loop.period).astype(int)
    assert grid.tolist() == [0, 1, 2, 3, *range(6, 50)]
    assert loop.timing.snapshot()["skipped_cycles"] == 2
