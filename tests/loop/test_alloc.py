"""The steady-state cycle allocates nothing: traced memory does not grow over 20 000 cycles,
and no cycle holds more than the interpreter's few short-lived objects at its peak."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable

import numpy as np

from daq.loop import Loop
from daq.loop.states import State
from tests.loop.conftest import cycles, post
from tests.loop.fakes import FakeBackend, Ramp

MakeLoop = Callable[..., tuple[Loop, FakeBackend]]


def _growth(loop: Loop, n: int) -> tuple[int, list[str]]:
    """Net traced memory after n more cycles, and the top growing lines if any."""
    gc.collect()
    tracemalloc.start(1)
    try:
        cycles(loop, 200)  # warm-up: first-call caches, lazily created numpy scalars
        before_snap = tracemalloc.take_snapshot()
        before, _ = tracemalloc.get_traced_memory()
        cycles(loop, n)
        after, _ = tracemalloc.get_traced_memory()
        where = [
            str(s)
            for s in tracemalloc.take_snapshot().compare_to(before_snap, "lineno")
            if s.size_diff > 0
        ][:5]
    finally:
        tracemalloc.stop()
    return after - before, where


def test_no_growth_in_idle(make_loop: MakeLoop) -> None:
    loop, _ = make_loop(ring_capacity=1 << 10)
    grown, where = _growth(loop, 20_000)
    assert grown < 1024, where


def test_no_growth_while_running(make_loop: MakeLoop) -> None:
    loop, _ = make_loop(ring_capacity=1 << 10)
    post(loop, "arm")
    cycles(loop, 5)
    post(loop, "run", Ramp(rate=0.001, steps=10**9))
    cycles(loop, 5)
    assert loop.state == State.RUNNING
    grown, where = _growth(loop, 20_000)
    assert loop.state == State.RUNNING
    assert grown < 1024, where


def _peak_per_cycle(loop: Loop, n: int) -> tuple[np.ndarray, int]:
    """Per cycle over n cycles of the loop's own cycle (as `Loop.run` paces it in virtual
    time, garbage collection off): the traced peak inside the cycle above the memory it
    started with — a buffer made and freed inside one cycle shows here, never in the net
    growth — and the net growth over all n."""
    period, timing, advance = loop.period, loop.timing, loop.backend.advance
    excess = np.zeros(n, dtype=np.int64)
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    tracemalloc.start(1)
    try:
        first, _ = tracemalloc.get_traced_memory()
        for i in range(n):
            tracemalloc.reset_peak()
            before, _ = tracemalloc.get_traced_memory()
            timing.record(0, loop._cycle(loop.seq * period, 0))
            advance(period)
            _, peak = tracemalloc.get_traced_memory()
            excess[i] = peak - before
        last, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        if was_enabled:
            gc.enable()
    return excess, last - first


#: What one steady-state cycle may hold at once beyond what it started with: the interpreter's
#: short-lived objects (ints from the clock, floats, ufunc argument tuples; measured 1.0 kB
#: typical, 3.8 kB at most over 5000 cycles), far below a buffer (a 32 kB scratch array fails).
CYCLE_PEAK_BYTES = 8 * 1024


def test_no_buffer_made_and_freed_in_any_cycle(make_loop: MakeLoop) -> None:
    """Peak, not net: a scratch array allocated and freed inside the cycle leaves no growth
    but raises the cycle's peak; checked for every one of 5000 running cycles."""
    loop, _ = make_loop(ring_capacity=1 << 10)
    post(loop, "arm")
    cycles(loop, 5)
    post(loop, "run", Ramp(rate=0.001, steps=10**9))
    cycles(loop, 300)  # warm-up: first-call caches
    assert loop.state == State.RUNNING
    excess, grown = _peak_per_cycle(loop, 5000)
    assert loop.state == State.RUNNING
    worst = int(np.argmax(excess))
    assert excess[worst] < CYCLE_PEAK_BYTES, f"cycle {worst}: {excess[worst]} B above its start"
    assert np.median(excess) < 2048, np.median(excess)
    assert grown < 16 * 1024, grown


def test_no_growth_while_jogging_with_the_supply_watched(make_loop: MakeLoop) -> None:
    import math

    from controller.jog import JogRunner
    from daq.loop.station import JogRequest
    from daq.service.control_api import joint_gains, joint_limits
    from tests.loop.station_profile import station_profile

    profile = station_profile()
    loop, backend = make_loop(profile, ring_capacity=1 << 10)
    backend.override["p_supply"] = 2.5e6
    post(loop, "power", 1)
    cycles(loop, 5)
    target = math.radians(profile.joints[0].home_deg + 1.0)
    runner = JogRunner(
        joint_gains(profile), joint_limits(profile), profile.period, 0, target, 1e-4, 1e-3
    )
    post(loop, "jog", JogRequest(runner, 0, target))
    cycles(loop, 5)
    assert loop.state == State.ARMED and loop.station.jogging and loop.station.check_supply
    grown, where = _growth(loop, 20_000)
    assert loop.state == State.ARMED and loop.fault is None
    assert grown < 1024, where
