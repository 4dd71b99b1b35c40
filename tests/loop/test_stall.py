"""The overrun interlock's second form: one long stall trips while the valves are live."""

from __future__ import annotations

from typing import Any

import pytest

from daq.backends.sim import SimBackend
from daq.loop import Loop
from daq.loop.interlocks import STALL, Trip
from daq.loop.states import State
from daq.profile.schema import Profile
from tests.loop.conftest import post, with_changes
from tests.loop.fakes import HoldP


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
