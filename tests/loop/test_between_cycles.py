"""The rig's share of a real-time period: after a cycle's outputs are written the loop hands the
backend the next cycle's time (`Backend.between_cycles`), and the simulator steps its plant
there, so that the cycle's read → write time is the loop's own (docs/loop.md)."""

from __future__ import annotations

import numpy as np

from daq.backends.base import BackendStatus
from daq.backends.sim import SimBackend
from daq.loop import Loop
from daq.profile.schema import Profile
from tests.loop.fakes import FakeBackend, HoldP


class _Logged(FakeBackend):
    """A FakeBackend that logs its reads, writes and between-cycle calls with their times."""

    def __init__(self, profile: Profile) -> None:
        super().__init__(profile)
        self.log: list[tuple[str, float]] = []

    def read(self, t: float, raw_out: np.ndarray) -> BackendStatus:
        self.log.append(("read", t))
        return super().read(t, raw_out)

    def write(self, t: float, volts: np.ndarray) -> BackendStatus:
        self.log.append(("write", t))
        return super().write(t, volts)

    def between_cycles(self, t_next: float) -> None:
        self.log.append(("between", t_next))


class _PacedLogged(_Logged):
    paced_by_hardware = True

    def wait_next_cycle(self) -> int:
        return 0


def _check_order(log: list[tuple[str, float]], period: float) -> int:
    """Every cycle is read, write, between; `between` names the next cycle's time (one period
    on), and the next read is at that time or, after an overrun, later. Returns the cycles."""
    assert len(log) % 3 == 0 and len(log) >= 30, log[:6]
    for i in range(0, len(log), 3):
        (r, t), (w, tw), (b, tb) = log[i : i + 3]
        assert (r, w, b) == ("read", "write", "between"), log[i : i + 3]
        assert tw == t and abs(tb - (t + period)) < 1e-9, log[i : i + 3]
        if i + 3 < len(log):
            assert log[i + 3][1] >= tb - 1e-9, log[i : i + 4]
    return len(log) // 3


def test_a_real_time_loop_hands_the_backend_the_next_cycles_time_after_writing(
    profile: Profile,
) -> None:
    backend = _Logged(profile)
    backend.open()
    loop = Loop(profile, backend, hold=HoldP(), virtual_time=False, ring_capacity=1 << 12)
    loop.run(60 * loop.period)
    assert loop.error is None
    n = _check_order(backend.log, loop.period)
    assert int(loop.timing.between_hist.sum()) == n == loop.cycles
    assert "between_cycles_us" in loop.timing.snapshot()


def test_a_hardware_paced_loop_does_the_same_on_the_device_clock(profile: Profile) -> None:
    backend = _PacedLogged(profile)
    backend.open()
    loop = Loop(profile, backend, hold=HoldP(), virtual_time=False, ring_capacity=1 << 12)
    loop.run(40 * loop.period)
    assert loop.error is None
    assert _check_order(backend.log, loop.period) == 40


def test_the_simulator_steps_its_plant_between_cycles_to_the_same_state(
    profile: Profile,
) -> None:
    """Stepped between cycles or caught up at the next read, the plant reaches the same state
    and the converters the same counts, bit for bit; and the read after `between_cycles`
    finds the plant already there (it steps nothing)."""
    a, b = SimBackend.from_profile(profile), SimBackend.from_profile(profile)
    a.open()
    b.open()
    period = a.period
    raw_a, raw_b = np.zeros(a.n_inputs), np.zeros(b.n_inputs)
    volts = np.array([c.null_volts for c in profile.outputs])
    moved = 0
    for k in range(300):
        t = k * period
        a.read(t, raw_a)
        before = b.true_state()
        b.read(t, raw_b)
        if k > 0:
            assert np.array_equal(b.true_state(), before), k  # already there
        assert np.array_equal(raw_a, raw_b), k
        assert np.array_equal(a.true_state(), b.true_state()), k
        volts[:] = 0.8 * np.sin(2 * np.pi * 5.0 * t + np.arange(len(volts)))
        a.write(t, volts)
        b.write(t, volts)
        before = b.true_state()
        b.between_cycles(t + period)
        moved += not np.array_equal(b.true_state(), before)
    assert moved == 300
