"""In the daq loop (in-process, virtual time): a serial fault nulls the valves in the same cycle.

The real `Loop` runs on the composite backend — the simulator for the analog channels and the
valves, the serial backend on the board emulator (pty) for the resolvers. The loop is armed with
a runner that drives a constant valve command, then the emulator injects a fault.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest

from controller.feedback import Feedback
from daq.backends import serial_protocol as sp
from daq.backends import serial_resolver as sr
from daq.backends.composite import CompositeBackend
from daq.backends.serial_emulator import BoardEmulator
from daq.loop import Loop
from daq.loop.interlocks import Trip
from daq.loop.states import State
from daq.profile import Profile
from tests.loop.conftest import col, cycles, post
from tests.loop.fakes import HoldP
from tests.serial.conftest import RELAXED_TIMEOUT_S, make_profile

LIVE_V = 0.5


class Constant(HoldP):
    """Holds the captured position as reference and drives LIVE_V on every valve."""

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
        super().step(fb, ref_out, volts_out)
        volts_out.fill(LIVE_V)
        return True


def _crc(e: BoardEmulator) -> None:
    e.inject_crc_errors(1)


def _timeout(e: BoardEmulator) -> None:
    e.inject_delay(2.0 * RELAXED_TIMEOUT_S)


def _removed(e: BoardEmulator) -> None:
    e.remove_port()


def _los(e: BoardEmulator) -> None:
    e.set_fault(1, sp.FAULT_LOS)


# (injection, serial fault code, first channel flagged)
CASES = [
    (_crc, sr.FAULT_CRC, "q_1"),
    (_timeout, sr.FAULT_TIMEOUT, "q_1"),
    (_removed, sr.FAULT_PORT, "q_1"),
    (_los, sr.FAULT_RESOLVER, "q_2"),
]


@pytest.fixture
def rig() -> Iterator[tuple[BoardEmulator, Callable[[bool], tuple[Loop, CompositeBackend]]]]:
    emu = BoardEmulator()
    emu.open_pty()
    emu.start()
    opened: list[CompositeBackend] = []

    def make(backend_error: bool) -> tuple[Loop, CompositeBackend]:
        base = make_profile(emu.port)
        prof: Profile = base.model_copy(
            update={
                "interlocks": base.interlocks.model_copy(update={"backend_error": backend_error})
            }
        )
        comp = CompositeBackend(prof)
        # A generous deadline: on a loaded test machine the emulator thread may answer late,
        # and only the injected fault may trip here.
        for p in comp.parts:
            if isinstance(p.backend, sr.SerialResolverBackend):
                p.backend.timeout_s = RELAXED_TIMEOUT_S
        comp.open()
        comp.start()
        opened.append(comp)
        return Loop(prof, comp, virtual_time=True, hold=Constant(), ring_capacity=1 << 10), comp

    yield emu, make
    for c in opened:
        c.close()
    emu.stop()


@pytest.mark.parametrize(
    ("inject", "serial_code", "first"), CASES, ids=["crc", "timeout", "port-removed", "los"]
)
@pytest.mark.parametrize("backend_error", [True, False], ids=["backend_error", "channel_only"])
def test_serial_fault_nulls_the_valves_in_the_same_cycle(
    rig: tuple[BoardEmulator, Callable[[bool], tuple[Loop, CompositeBackend]]],
    inject: Callable[[BoardEmulator], None],
    serial_code: int,
    first: str,
    backend_error: bool,
) -> None:
    emu, make = rig
    loop, comp = make(backend_error)
    post(loop, "arm")
    cycles(loop, 20)
    assert loop.state == State.ARMED, loop.fault
    live = loop.seq - 1
    assert col(loop, live, "cmd.valve_1") == col(loop, live, "cmd.valve_2") == LIVE_V

    inject(emu)
    trip_seq = loop.seq
    cycles(loop, 1)
    assert loop.state == State.FAULT
    assert col(loop, trip_seq, "state") == State.FAULT
    assert col(loop, trip_seq, "cmd.valve_1") == col(loop, trip_seq, "cmd.valve_2") == 0.0
    assert loop.fault is not None and loop.fault.seq == trip_seq
    if backend_error:
        assert loop.fault.code == Trip.BACKEND_READ
    else:  # the per-channel fault alone is enough
        assert loop.fault.code == Trip.CHANNEL_FAULT
        assert (loop.fault.where, loop.fault.value) == (first, float(serial_code))
    q = [i for i, c in enumerate(loop.profile.inputs) if c.role == "resolver"]
    assert int(comp.channel_fault[q].max()) == serial_code
    # Latched with the valves at null, whatever the serial line does next.
    cycles(loop, 5)
    assert loop.state == State.FAULT
    assert col(loop, loop.seq - 1, "cmd.valve_1") == 0.0
