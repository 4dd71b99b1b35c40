"""Framing, CRC and message encoding of the resolver front-end protocol (docs/serial_protocol.md).

Pure: bytes in, bytes or dataclasses out, no I/O. Shared by the backend (`serial_resolver`) and the
board emulator (`serial_emulator`), so both sides speak exactly the documented bytes.

Frame (all multi-byte fields little-endian)::

    A5 5A | LEN | TYPE | SEQ | PAYLOAD (LEN bytes) | CRC16 lo, hi

CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, no reflection, xorout 0; check("123456789") =
0x29B1) over LEN, TYPE, SEQ and PAYLOAD — `binascii.crc_hqx` computes exactly this in C.
"""

from __future__ import annotations

import binascii
import struct
from dataclasses import dataclass

SYNC = b"\xa5\x5a"
HEADER_LEN = 5  # sync(2) + len + type + seq
CRC_LEN = 2
OVERHEAD = HEADER_LEN + CRC_LEN
MAX_PAYLOAD = 255
MAX_FRAME = OVERHEAD + MAX_PAYLOAD
CRC_INIT = 0xFFFF
PROTOCOL_VERSION = 1
MAX_RESOLVERS = 8
RESOLUTIONS = (10, 12, 14, 16)  # the AD2S1210's selectable resolutions

# Message types: requests have bit 7 clear, the response to request t is t | 0x80.
IDENTIFY = 0x01
CONFIGURE = 0x02
SAMPLE = 0x03
IDENTIFY_RSP = 0x81
CONFIGURE_RSP = 0x82
SAMPLE_RSP = 0x83
NAK = 0xFF

# NAK codes.
NAK_UNKNOWN_TYPE = 1
NAK_BAD_LENGTH = 2
NAK_BAD_PARAMETER = 3
NAK_NOT_CONFIGURED = 4

# Per-resolver fault byte: the AD2S1210 fault register, bit 0 widened to "any parity error".
FAULT_PARITY = 0x01
FAULT_PHASE_LOCK = 0x02
FAULT_VELOCITY = 0x04
FAULT_LOT = 0x08  # loss of tracking
FAULT_DOS_MISMATCH = 0x10  # degradation of signal: sin/cos amplitude mismatch
FAULT_DOS_OVERRANGE = 0x20
FAULT_LOS = 0x40  # loss of signal
FAULT_CLIPPING = 0x80

# Board status byte of a SAMPLE response: any bit set invalidates every resolver of the sample.
STATUS_EXCITATION = 0x01  # excitation amplifier fault
STATUS_NOT_CONFIGURED = 0x02
STATUS_RESET = 0x04  # the board rebooted since the last CONFIGURE
STATUS_OVERRUN = 0x08  # conversion not finished: positions are from the previous one

_IDENTIFY_FMT = struct.Struct("<BBBBHI")  # version, max_n, n, bits, firmware, board_id
SAMPLE_HEAD = struct.Struct("<BBH")  # status, n, tick_us (board µs counter mod 2**16)
SAMPLE_ITEM = struct.Struct("<HB")  # position code, fault byte


class ProtocolError(ValueError):
    """A frame or payload that does not follow docs/serial_protocol.md."""


def crc16(data: bytes | bytearray | memoryview, init: int = CRC_INIT) -> int:
    """CRC-16/CCITT-FALSE of `data`."""
    return binascii.crc_hqx(data, init)


def encode_frame(msg_type: int, seq: int, payload: bytes = b"") -> bytes:
    if not 0 <= msg_type <= 0xFF or not 0 <= seq <= 0xFF:
        raise ProtocolError(f"type {msg_type} and seq {seq} must each fit in one byte")
    if len(payload) > MAX_PAYLOAD:
        raise ProtocolError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    body = bytes((len(payload), msg_type, seq)) + payload
    return SYNC + body + crc16(body).to_bytes(2, "little")


@dataclass(frozen=True)
class Frame:
    msg_type: int
    seq: int
    payload: bytes


def decode_frame(frame: bytes | bytearray | memoryview) -> Frame:
    """Decode exactly one frame; raise ProtocolError naming what is wrong."""
    frame = bytes(frame)
    if len(frame) < OVERHEAD:
        raise ProtocolError(f"frame of {len(frame)} bytes is shorter than {OVERHEAD}")
    if frame[:2] != SYNC:
        raise ProtocolError(f"bad sync bytes {frame[:2].hex()} (expected a55a)")
    n = frame[2]
    if len(frame) != OVERHEAD + n:
        raise ProtocolError(f"LEN says {n} payload bytes, frame holds {len(frame) - OVERHEAD}")
    got = int.from_bytes(frame[-2:], "little")
    want = crc16(frame[2:-2])
    if got != want:
        raise ProtocolError(f"CRC mismatch: frame has {got:04x}, computed {want:04x}")
    return Frame(frame[3], frame[4], frame[HEADER_LEN:-2])


class FrameParser:
    """Stream → frames for the board side: hunts for SYNC, drops bytes of bad frames.

    Not used by the host's cycle (which reads one response of known size); the emulator and
    tools use it. `feed` returns complete frames; `crc_errors` and `dropped` count rejects.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self.crc_errors = 0
        self.dropped = 0

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        out: list[Frame] = []
        while True:
            i = self._buf.find(SYNC)
            if i < 0:
                keep = 1 if self._buf[-1:] == SYNC[:1] else 0
                self.dropped += len(self._buf) - keep
                del self._buf[: len(self._buf) - keep]
                return out
            if i:
                self.dropped += i
                del self._buf[:i]
            if len(self._buf) < HEADER_LEN:
                return out
            size = OVERHEAD + self._buf[2]
            if len(self._buf) < size:
                return out
            raw = bytes(self._buf[:size])
            if crc16(raw[2:-2]) != int.from_bytes(raw[-2:], "little"):
                # Skip only the sync: a real frame may start inside the rejected bytes.
                self.crc_errors += 1
                self.dropped += 2
                del self._buf[:2]
                continue
            del self._buf[:size]
            out.append(Frame(raw[3], raw[4], raw[HEADER_LEN:-2]))


# ------------------------------------------------------------------ payloads


@dataclass(frozen=True)
class Identity:
    version: int
    max_resolvers: int
    resolvers: int
    bits: int
    firmware: int
    board_id: int

    def encode(self) -> bytes:
        return _IDENTIFY_FMT.pack(
            self.version,
            self.max_resolvers,
            self.resolvers,
            self.bits,
            self.firmware,
            self.board_id,
        )

    @classmethod
    def decode(cls, payload: bytes) -> Identity:
        if len(payload) != _IDENTIFY_FMT.size:
            raise ProtocolError(f"IDENTIFY response of {len(payload)} bytes (expected 10)")
        return cls(*_IDENTIFY_FMT.unpack(payload))


def encode_configure(resolvers: int, bits: int) -> bytes:
    return bytes((resolvers, bits))


def decode_configure(payload: bytes) -> tuple[int, int]:
    if len(payload) != 2:
        raise ProtocolError(f"CONFIGURE payload of {len(payload)} bytes (expected 2)")
    return payload[0], payload[1]


def sample_payload_len(resolvers: int) -> int:
    return SAMPLE_HEAD.size + SAMPLE_ITEM.size * resolvers


def sample_frame_len(resolvers: int) -> int:
    return OVERHEAD + sample_payload_len(resolvers)


@dataclass(frozen=True)
class Sample:
    status: int
    tick_us: int
    positions: tuple[int, ...]
    faults: tuple[int, ...]

    def encode(self) -> bytes:
        if len(self.positions) != len(self.faults):
            raise ProtocolError("a sample needs one fault byte per position")
        parts = [SAMPLE_HEAD.pack(self.status, len(self.positions), self.tick_us & 0xFFFF)]
        parts += [SAMPLE_ITEM.pack(p, f) for p, f in zip(self.positions, self.faults, strict=True)]
        return b"".join(parts)

    @classmethod
    def decode(cls, payload: bytes) -> Sample:
        if len(payload) < SAMPLE_HEAD.size:
            raise ProtocolError(f"SAMPLE response of {len(payload)} bytes is too short")
        status, n, tick = SAMPLE_HEAD.unpack_from(payload)
        if len(payload) != sample_payload_len(n):
            raise ProtocolError(f"SAMPLE response says {n} resolvers but holds {len(payload)} B")
        items = [SAMPLE_ITEM.unpack_from(payload, SAMPLE_HEAD.size + 3 * i) for i in range(n)]
        return cls(status, tick, tuple(p for p, _ in items), tuple(f for _, f in items))


def encode_nak(code: int, request_type: int) -> bytes:
    return bytes((code, request_type))


def frame_time_s(n_bytes: int, baudrate: int) -> float:
    """Wire time of `n_bytes` at 8N1 (10 bit times per byte)."""
    return 10.0 * n_bytes / baudrate
