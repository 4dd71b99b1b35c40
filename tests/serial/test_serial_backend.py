"""The serial resolver backend against the board emulator (and a scripted peer) on a pty."""

from __future__ import annotations

import math
import select
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from daq.backends import serial_protocol as sp
from daq.backends import serial_resolver as sr
from daq.backends.base import BackendError, BackendStatus
from daq.backends.serial_emulator import BoardEmulator
from daq.scaling import eng_to_counts
from tests.serial.conftest import (
    RELAXED_TIMEOUT_S,
    ExpectedProtocol,
    GatedEmulator,
    make_profile,
    open_backend,
    serial_inputs,
)

#: Deadline for anything waited on here: generous, the suite must pass on a loaded machine.
WAIT_S = 60.0


def home_counts(port: str) -> list[float]:
    prof = make_profile(port)
    homes = {j.name: math.radians(j.home_deg) for j in prof.joints}
    return [eng_to_counts(c, homes[c.joint]) for c in serial_inputs(prof) if c.joint]


def test_exact_byte_conversation_of_open_and_one_cycle() -> None:
    ident = sp.Identity(1, 8, 2, 14, 0x0100, 0x52443031).encode()
    sample = sp.Sample(0, 0x1234, (10012, 9557), (0, 0)).encode()
    peer = ExpectedProtocol(
        [
            (bytes.fromhex("a55a0001018cef"), sp.encode_frame(sp.IDENTIFY_RSP, 1, ident)),
            (
                bytes.fromhex("a55a020202020e2b51"),
                sp.encode_frame(sp.CONFIGURE_RSP, 2, sp.encode_configure(2, 14)),
            ),
            (bytes.fromhex("a55a000303aca9"), sp.encode_frame(sp.SAMPLE_RSP, 3, sample)),
        ]
    )
    try:
        b = open_backend(peer.port)
        raw = np.full(2, -1.0)
        assert b.read(0.0, raw) == BackendStatus.OK
        peer.check()
        assert raw.tolist() == [10012.0, 9557.0]
        assert b.channel_fault.tolist() == [0, 0]
        assert b.identity == sp.Identity(1, 8, 2, 14, 0x0100, 0x52443031)
        b.close()
    finally:
        peer.close()


def test_nak_at_configure_fails_open_with_a_clear_message() -> None:
    ident = sp.Identity(1, 8, 2, 14, 0x0100, 1).encode()
    peer = ExpectedProtocol(
        [
            (sp.encode_frame(sp.IDENTIFY, 1), sp.encode_frame(sp.IDENTIFY_RSP, 1, ident)),
            (
                sp.encode_frame(sp.CONFIGURE, 2, sp.encode_configure(2, 14)),
                sp.encode_frame(sp.NAK, 2, sp.encode_nak(sp.NAK_BAD_PARAMETER, sp.CONFIGURE)),
            ),
        ]
    )
    try:
        with pytest.raises(BackendError, match=r"refused request 0x02: NAK 0302"):
            open_backend(peer.port)
        peer.check()
    finally:
        peer.close()


def test_missing_port_fails_open_naming_it(tmp_path: Path) -> None:
    port = str(tmp_path / "no-such-tty")
    prof = make_profile(port)
    b = sr.SerialResolverBackend(prof, serial_inputs(prof), [])
    with pytest.raises(BackendError, match="no-such-tty"):
        b.open()
    b.close()


def test_reads_home_pose_counts_every_cycle(
    backend: sr.SerialResolverBackend, emulator: BoardEmulator
) -> None:
    raw = np.zeros(2)
    for _ in range(50):
        assert backend.read(0.0, raw) == BackendStatus.OK
    assert raw.tolist() == home_counts(emulator.port)
    assert emulator.parser.crc_errors == 0
    assert backend.counters["cycles"] == 50


def test_motion_is_reported(backend: sr.SerialResolverBackend, emulator: BoardEmulator) -> None:
    emulator.set_motion(amplitude_deg=30.0, period_s=0.2)
    raw = np.zeros(2)
    seen: set[float] = set()
    deadline = time.monotonic() + WAIT_S
    while len(seen) < 10 and time.monotonic() < deadline:
        assert backend.read(0.0, raw) == BackendStatus.OK
        seen.add(raw[0])
        time.sleep(0.002)
    assert len(seen) >= 10
    lo, hi = (210.0 - 30.0) / 360 * 16384, (220.0 + 30.0) / 360 * 16384
    assert all(lo - 1 <= c <= hi + 1 for c in seen)


def test_crc_error_is_a_channel_fault_then_recovers(
    backend: sr.SerialResolverBackend, emulator: BoardEmulator
) -> None:
    raw = np.zeros(2)
    assert backend.read(0.0, raw) == BackendStatus.OK
    good = raw.copy()
    emulator.inject_crc_errors(1)
    assert backend.read(0.0, raw) == BackendStatus.ERROR
    assert backend.channel_fault.tolist() == [sr.FAULT_CRC] * 2
    assert raw.tolist() == good.tolist()  # last good counts kept, flagged
    assert backend.read(0.0, raw) == BackendStatus.OK
    assert backend.channel_fault.tolist() == [0, 0]
    assert backend.counters["crc_errors"] == 1


def test_timeout_within_the_cycle_and_late_answer_flushed(emulator: GatedEmulator) -> None:
    b = open_backend(emulator.port, timeout_s=None)  # the profile's sub-millisecond timeout
    try:
        raw = np.zeros(2)
        emulator.hold = 1  # the board answers only when released: late by construction
        handshake = len(emulator.tx)  # IDENTIFY_RSP + CONFIGURE_RSP
        assert b.read(0.0, raw) == BackendStatus.ERROR
        assert len(emulator.tx) == handshake  # gave up before the board answered
        assert b.channel_fault.tolist() == [sr.FAULT_TIMEOUT] * 2
        emulator.release.set()
        # Until the late response is in the host's input buffer.
        assert select.select([b._fd], [], [], WAIT_S)[0], "the late answer never arrived"
        b.timeout_s = RELAXED_TIMEOUT_S
        assert b.read(0.0, raw) == BackendStatus.OK  # flushed: the answer is to *this* request
        assert raw.tolist() == home_counts(emulator.port)
    finally:
        b.close()


def test_stale_response_is_skipped_by_sequence(
    backend: sr.SerialResolverBackend, emulator: GatedEmulator
) -> None:
    raw = np.zeros(2)
    backend.timeout_s = 0.02
    emulator.hold = 1
    assert backend.read(0.0, raw) == BackendStatus.ERROR
    assert backend.channel_fault.tolist() == [sr.FAULT_TIMEOUT] * 2
    backend.timeout_s = RELAXED_TIMEOUT_S

    def release_once_the_next_request_is_sent() -> None:
        emulator.wait_for_request()
        emulator.release.set()

    releaser = threading.Thread(target=release_once_the_next_request_is_sent, daemon=True)
    releaser.start()
    # The delayed answer to the previous request arrives after the flush, before ours: its SEQ
    # gives it away, it is dropped, and our own answer is used.
    assert backend.read(0.0, raw) == BackendStatus.OK
    releaser.join(WAIT_S)
    assert backend.counters["stale"] == 1
    assert raw.tolist() == home_counts(emulator.port)
    assert emulator.served == backend.counters["cycles"] + 2  # + IDENTIFY, CONFIGURE


def test_dropped_response_times_out(
    backend: sr.SerialResolverBackend, emulator: BoardEmulator
) -> None:
    raw = np.zeros(2)
    backend.timeout_s = 0.01
    emulator.drop_responses(1)
    assert backend.read(0.0, raw) == BackendStatus.ERROR
    assert backend.channel_fault.tolist() == [sr.FAULT_TIMEOUT] * 2
    backend.timeout_s = RELAXED_TIMEOUT_S
    assert backend.read(0.0, raw) == BackendStatus.OK


def test_resolver_fault_bits_flag_only_that_channel(
    backend: sr.SerialResolverBackend, emulator: BoardEmulator
) -> None:
    raw = np.zeros(2)
    emulator.set_fault(1, sp.FAULT_LOS | sp.FAULT_DOS_OVERRANGE)
    assert backend.read(0.0, raw) == BackendStatus.ERROR
    assert backend.channel_fault.tolist() == [0, sr.FAULT_RESOLVER]
    emulator.set_fault(1, 0)
    emulator.set_status(sp.STATUS_EXCITATION)
    assert backend.read(0.0, raw) == BackendStatus.ERROR
    assert backend.channel_fault.tolist() == [sr.FAULT_BOARD] * 2


def test_stuck_values_keep_answering(
    backend: sr.SerialResolverBackend, emulator: BoardEmulator
) -> None:
    emulator.set_motion(amplitude_deg=30.0, period_s=0.05)
    emulator.set_stuck(True)
    raw = np.zeros(2)
    values = set()
    for _ in range(20):
        assert backend.read(0.0, raw) == BackendStatus.OK
        values.add(tuple(raw))
        time.sleep(0.003)
    assert len(values) == 1  # a seized converter is for the following-error interlock


def test_port_removed_mid_run_is_a_fault_not_an_exception(
    backend: sr.SerialResolverBackend, emulator: BoardEmulator
) -> None:
    raw = np.zeros(2)
    assert backend.read(0.0, raw) == BackendStatus.OK
    emulator.remove_port()
    for _ in range(3):
        assert backend.read(0.0, raw) == BackendStatus.ERROR
        assert backend.channel_fault.tolist() == [sr.FAULT_PORT] * 2
    assert backend.counters["port_losses"] == 1
    backend.close()
    backend.close()  # idempotent


def test_reconnects_from_outside_the_cycle(tmp_path: Path) -> None:
    link = tmp_path / "resolvers"
    first = BoardEmulator()
    first.open_pty(link)
    first.start()
    b = open_backend(str(link), reconnect_interval_s=0.05)
    second = BoardEmulator(angles_deg=(100.0, 110.0))
    try:
        raw = np.zeros(2)
        assert b.read(0.0, raw) == BackendStatus.OK
        first.remove_port()
        assert b.read(0.0, raw) == BackendStatus.ERROR
        second.open_pty(link)
        second.start()
        deadline = time.monotonic() + WAIT_S
        while b.read(0.0, raw) != BackendStatus.OK and time.monotonic() < deadline:
            assert b.channel_fault.tolist() == [sr.FAULT_PORT] * 2
            time.sleep(0.01)
        assert b.channel_fault.tolist() == [0, 0]
        assert raw.tolist() == [round(100 / 360 * 16384), round(110 / 360 * 16384)]
        assert b.counters["reconnects"] == 1
    finally:
        b.close()
        first.stop()
        second.stop()


def test_profile_mistakes_are_named() -> None:
    prof = make_profile("/dev/null")
    q = serial_inputs(prof)
    valves = prof.outputs
    with pytest.raises(BackendError, match="no outputs; got valve_1"):
        sr.SerialResolverBackend(prof, q, valves)
    p_cap = next(c for c in prof.inputs if c.name == "p_cap_1")
    with pytest.raises(BackendError, match=r"'p_cap_1'.*only provides resolver channels"):
        sr.SerialResolverBackend(prof, [*q, p_cap], [])
    one = make_profile("/dev/null", resolvers=1)
    with pytest.raises(BackendError, match=r"'q_2' is on resolver1, but .* resolvers = 1"):
        sr.SerialResolverBackend(one, serial_inputs(one), [])
    with pytest.raises(BackendError, match="resolver0 is used twice"):
        sr.SerialResolverBackend(prof, [q[0], q[0]], [])


def test_line_noise_nak_and_position_range_at_the_wire() -> None:
    ident = sp.Identity(1, 8, 2, 14, 0x0100, 1).encode()
    good = sp.Sample(0, 7, (100, 200), (0, 0)).encode()
    noisy = bytearray(sp.encode_frame(sp.SAMPLE_RSP, 3, good))
    noisy[9] ^= 0x04  # one flipped bit in resolver 0's position
    nak = sp.encode_frame(sp.NAK, 4, sp.encode_nak(sp.NAK_NOT_CONFIGURED, sp.SAMPLE))
    out_of_range = sp.Sample(0, 7, (1 << 14, 200), (0, 0)).encode()  # 14-bit code overflow
    peer = ExpectedProtocol(
        [
            (sp.encode_frame(sp.IDENTIFY, 1), sp.encode_frame(sp.IDENTIFY_RSP, 1, ident)),
            (
                sp.encode_frame(sp.CONFIGURE, 2, sp.encode_configure(2, 14)),
                sp.encode_frame(sp.CONFIGURE_RSP, 2, sp.encode_configure(2, 14)),
            ),
            (sp.encode_frame(sp.SAMPLE, 3), bytes(noisy)),
            (sp.encode_frame(sp.SAMPLE, 4), nak),
            (sp.encode_frame(sp.SAMPLE, 5), sp.encode_frame(sp.SAMPLE_RSP, 5, out_of_range)),
            (sp.encode_frame(sp.SAMPLE, 6), sp.encode_frame(sp.SAMPLE_RSP, 6, good)),
        ]
    )
    try:
        b = open_backend(peer.port)
        raw = np.zeros(2)
        faults = []
        for _ in range(4):
            b.read(0.0, raw)
            faults.append(b.channel_fault.tolist())
        peer.check()
        assert faults == [
            [sr.FAULT_CRC] * 2,
            [sr.FAULT_PROTOCOL] * 2,
            [sr.FAULT_PROTOCOL, 0],
            [0, 0],
        ]
        assert raw.tolist() == [100.0, 200.0]
        b.close()
    finally:
        peer.close()


def test_stale_and_own_answer_in_one_burst_at_the_wire() -> None:
    ident = sp.Identity(1, 8, 2, 14, 0x0100, 1).encode()
    old = sp.encode_frame(sp.SAMPLE_RSP, 2, sp.Sample(0, 1, (1, 2), (0, 0)).encode())
    ours = sp.encode_frame(sp.SAMPLE_RSP, 3, sp.Sample(0, 2, (300, 400), (0, 0)).encode())
    peer = ExpectedProtocol(
        [
            (sp.encode_frame(sp.IDENTIFY, 1), sp.encode_frame(sp.IDENTIFY_RSP, 1, ident)),
            (
                sp.encode_frame(sp.CONFIGURE, 2, sp.encode_configure(2, 14)),
                sp.encode_frame(sp.CONFIGURE_RSP, 2, sp.encode_configure(2, 14)),
            ),
            (sp.encode_frame(sp.SAMPLE, 3), old + ours),  # both frames in one read()
        ]
    )
    try:
        b = open_backend(peer.port)
        raw = np.zeros(2)
        assert b.read(0.0, raw) == BackendStatus.OK
        peer.check()
        assert raw.tolist() == [300.0, 400.0]
        assert b.counters["stale"] == 1
        b.close()
    finally:
        peer.close()
