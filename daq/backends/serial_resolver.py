"""Serial resolver front-end backend: polls the board once per cycle (docs/serial_protocol.md).

The hot path (`read`) sends one of 256 precomputed SAMPLE requests (one per sequence number),
then reads the response straight from the port's file descriptor into a preallocated buffer with
`select` against a deadline of `timeout_s` (< 1 ms): no array, buffer or frame is created per
cycle (only `select`'s transient result tuple, freed at once; spinning instead would cost a core),
no logging, no wait beyond the deadline. Every failure — timeout, CRC error, malformed or stale
frame, a vanished port — becomes a per-channel fault code and `BackendStatus.ERROR`, never an
exception; the daq interlocks act on it. Reconnecting happens on a background thread (never in
the cycle), which re-runs the IDENTIFY/CONFIGURE handshake and hands the new port to `read`.

pyserial is imported in `open()` only, so `import daq` works without it. The hot path uses POSIX
file-descriptor calls (the rig PC is Linux; pyserial still opens and configures the port).
"""

from __future__ import annotations

import io
import logging
import os
import re
import select
import termios
import threading
import time
from typing import Any

import numpy as np

from daq.backends import serial_protocol as sp
from daq.backends.base import Backend, BackendError, BackendStatus
from daq.profile.schema import Channel, Profile
from daq.station.power import power_lines

log = logging.getLogger(__name__)

# Per-channel fault codes written to `channel_fault` (0 = good).
FAULT_TIMEOUT = 1
FAULT_CRC = 2
FAULT_PROTOCOL = 3  # bad sync/length/type/sequence, NAK, position out of range
FAULT_PORT = 4  # the port is gone (unplugged, board reset); a reconnect is being tried
FAULT_RESOLVER = 5  # the R/D converter flagged this resolver (LOS, DOS, LOT, parity…)
FAULT_BOARD = 6  # the board status flagged the whole sample

_PHYSICAL = re.compile(r"^resolver(\d)$")
_HANDSHAKE_TRIES = 3
_NO_FDS: list[int] = []


class SerialResolverBackend(Backend):
    """Resolver angles from the front-end board; no outputs."""

    def __init__(
        self,
        profile: Profile,
        inputs: list[Channel],
        outputs: list[Channel],
        *,
        timeout_s: float | None = None,
    ) -> None:
        super().__init__(len(inputs), len(outputs))
        cfg = profile.backend.serial
        if cfg is None:
            raise BackendError("the serial backend needs a [backend.serial] section")
        if outputs:
            names = ", ".join(c.name for c in outputs)
            raise BackendError(f"the serial resolver board has no outputs; got {names}")
        if power_lines(profile, "serial"):
            raise BackendError(
                "the serial resolver board has no digital outputs for [hydraulics]' power "
                "lines; put them on another device (hydraulics.device)"
            )
        self.cfg = cfg
        self.inputs = inputs
        self.timeout_s = cfg.timeout_s if timeout_s is None else timeout_s
        self._resolver = _resolver_indices(inputs, cfg.resolvers)
        self.bits = _common_bits(inputs)
        self._full = 1 << self.bits
        n = cfg.resolvers
        # Offsets of each channel's position code in the response buffer.
        self._offset = [sp.HEADER_LEN + sp.SAMPLE_HEAD.size + 3 * k for k in self._resolver]
        self._rsp_len = sp.sample_frame_len(n)
        self._rsp_payload = sp.sample_payload_len(n)
        self._requests = [sp.encode_frame(sp.SAMPLE, s) for s in range(256)]
        self._buf = bytearray(sp.MAX_FRAME)
        mv = memoryview(self._buf)
        self._tails = [mv[i:] for i in range(sp.MAX_FRAME)]
        self._crc_view = mv[2 : sp.HEADER_LEN + self._rsp_payload]
        self._seq = 0
        self._ser: Any = None
        self._fd = -1
        self._file: io.FileIO | None = None
        self._rlist: list[int] = []
        self._dirty = False
        self._pending: Any = None  # a reconnected port waiting to be adopted by `read`
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.identity: sp.Identity | None = None
        self.counters = dict.fromkeys(
            (
                "cycles",
                "timeouts",
                "crc_errors",
                "protocol_errors",
                "stale",
                "port_losses",
                "reconnects",
            ),
            0,
        )

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        ser = self._open_port()
        if ser is None:
            raise BackendError(f"serial resolver board: cannot open {self.cfg.port}")
        try:
            self.identity = self._handshake(ser)
        except BackendError:
            ser.close()
            raise
        self._adopt(ser)
        self._thread = threading.Thread(
            target=self._reconnector, name="serial-reconnect", daemon=True
        )
        self._thread.start()
        log.info("serial resolver board on %s: %s", self.cfg.port, self.identity)

    def read(self, t: float, raw_out: np.ndarray) -> BackendStatus:
        self.counters["cycles"] += 1
        if self._fd < 0 and self._pending is not None:
            ser, self._pending = self._pending, None
            self._adopt(ser)
        code = FAULT_PORT if self._fd < 0 else self._exchange()
        if code:
            self.channel_fault[:] = code
            return BackendStatus.ERROR
        buf = self._buf
        status = buf[sp.HEADER_LEN]
        bad = False
        for i, off in enumerate(self._offset):
            pos = buf[off] | (buf[off + 1] << 8)
            if pos >= self._full:
                self.channel_fault[i] = FAULT_PROTOCOL
                bad = True
                continue
            raw_out[i] = pos
            if status:
                self.channel_fault[i] = FAULT_BOARD
                bad = True
            elif buf[off + 2]:
                self.channel_fault[i] = FAULT_RESOLVER
                bad = True
            else:
                self.channel_fault[i] = 0
        return BackendStatus.ERROR if bad else BackendStatus.OK

    def write(self, t: float, volts: np.ndarray) -> BackendStatus:
        return BackendStatus.OK  # no outputs (checked in __init__)

    def write_null(self) -> None:
        return None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._lost.set()  # wake the reconnector so it sees the stop
        if self._thread is not None:
            self._thread.join(timeout=2.0 + self.cfg.open_timeout_s * _HANDSHAKE_TRIES * 2)
        self._drop_port()
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.close()

    # ------------------------------------------------------------------ hot path

    def _exchange(self) -> int:
        """One SAMPLE request/response; 0 or a fault code. Leaves the frame in `self._buf`."""
        buf = self._buf
        try:
            if self._dirty:  # bytes of an earlier, failed exchange may still be arriving
                termios.tcflush(self._fd, termios.TCIFLUSH)
                self._dirty = False
            seq = self._seq = (self._seq + 1) & 0xFF
            if os.write(self._fd, self._requests[seq]) != sp.OVERHEAD:
                raise BlockingIOError  # partial write: the line is stalled
            deadline = time.perf_counter() + self.timeout_s
            got = 0
            while True:
                need = sp.HEADER_LEN
                while True:
                    if need == sp.HEADER_LEN and got >= sp.HEADER_LEN:
                        if buf[0] != 0xA5 or buf[1] != 0x5A:
                            return self._protocol_error()
                        need = sp.OVERHEAD + buf[2]
                    if got >= need:
                        break
                    remaining = deadline - time.perf_counter()
                    if remaining <= 0.0:
                        self._dirty = True
                        self.counters["timeouts"] += 1
                        return FAULT_TIMEOUT
                    if not select.select(self._rlist, _NO_FDS, _NO_FDS, remaining)[0]:
                        continue
                    assert self._file is not None
                    n = self._file.readinto(self._tails[got])
                    if n is None:
                        continue
                    if n == 0:
                        raise OSError("end of file on the serial port")
                    got += n
                code = self._check_frame(seq)
                if code >= 0:
                    if got > need:
                        self._dirty = True  # trailing bytes: flush before the next request
                    return code
                # A late answer to an earlier request (it came in after the flush): drop it and
                # keep waiting for ours within the same deadline. Rare path: may allocate.
                self.counters["stale"] += 1
                rest = got - need
                if rest:
                    buf[:rest] = buf[need:got]
                got = rest
        except BlockingIOError:  # output buffer full: the board stopped reading; not a loss
            self._dirty = True
            self.counters["timeouts"] += 1
            return FAULT_TIMEOUT
        except (OSError, termios.error):  # EIO/ENXIO/EOF: the port is gone
            self._lose_port()
            return FAULT_PORT

    def _check_frame(self, seq: int) -> int:
        """0 = our SAMPLE response; −1 = a valid response to an earlier request; else a fault."""
        buf = self._buf
        if buf[2] != self._rsp_payload:  # a NAK, or a corrupted LEN byte
            return self._protocol_error()
        # CRC before the other header fields, so that line noise counts as a CRC error.
        end = sp.HEADER_LEN + self._rsp_payload
        if sp.crc16(self._crc_view) != buf[end] | (buf[end + 1] << 8):
            self._dirty = True
            self.counters["crc_errors"] += 1
            return FAULT_CRC
        if buf[3] != sp.SAMPLE_RSP or buf[sp.HEADER_LEN + 1] != self.cfg.resolvers:
            return self._protocol_error()  # not a sample, or a misconfigured board
        if buf[4] != seq:
            return -1
        return 0

    def _protocol_error(self) -> int:
        self._dirty = True
        self.counters["protocol_errors"] += 1
        return FAULT_PROTOCOL

    # ------------------------------------------------------------------ port handling

    def _adopt(self, ser: Any) -> None:
        self._ser = ser
        self._fd = ser.fileno()
        os.set_blocking(self._fd, False)
        self._file = io.FileIO(self._fd, "r+", closefd=False)
        self._rlist = [self._fd]
        self._dirty = True

    def _drop_port(self) -> None:
        ser, self._ser, self._fd = self._ser, None, -1
        if self._file is not None:
            self._file.close()
            self._file = None
        if ser is not None:
            try:
                ser.close()
            except Exception:  # the port may already be gone; closing must not raise
                pass

    def _lose_port(self) -> None:
        self.counters["port_losses"] += 1
        self._drop_port()
        self._lost.set()

    def _open_port(self) -> Any:
        try:
            import serial  # pyserial, lazily: `import daq` must not need it
        except ImportError as e:
            raise BackendError("the serial backend needs pyserial (pip install pyserial)") from e
        try:
            return serial.Serial(
                self.cfg.port,
                self.cfg.baudrate,
                timeout=self.cfg.open_timeout_s,
                write_timeout=self.cfg.open_timeout_s,
                exclusive=True,
            )
        except (OSError, serial.SerialException, ValueError) as e:
            log.debug("cannot open %s: %s", self.cfg.port, e)
            return None

    def _reconnector(self) -> None:
        """Outside the cycle: after a loss, reopen and re-handshake every reconnect interval."""
        while not self._stop.is_set():
            self._lost.wait()
            if self._stop.wait(self.cfg.reconnect_interval_s):
                return
            if self._fd >= 0 or self._pending is not None:
                self._lost.clear()
                continue
            ser = self._open_port()
            if ser is None:
                continue
            try:
                ident = self._handshake(ser)
            except (BackendError, OSError) as e:
                log.warning("serial resolver board on %s: reconnect failed: %s", self.cfg.port, e)
                ser.close()
                continue
            self.identity = ident
            self.counters["reconnects"] += 1
            self._lost.clear()
            self._pending = ser
            log.warning("serial resolver board on %s: reconnected", self.cfg.port)

    def _handshake(self, ser: Any) -> sp.Identity:
        """IDENTIFY, check, CONFIGURE; BackendError with a clear message otherwise."""
        port, n = self.cfg.port, self.cfg.resolvers
        ident = sp.Identity.decode(self._transact(ser, sp.IDENTIFY, b"", sp.IDENTIFY_RSP))
        if ident.version != sp.PROTOCOL_VERSION:
            raise BackendError(
                f"board on {port} speaks protocol v{ident.version}, this host v"
                f"{sp.PROTOCOL_VERSION}"
            )
        if ident.max_resolvers < n:
            raise BackendError(
                f"board on {port} has {ident.max_resolvers} resolver inputs, profile wants {n}"
            )
        payload = self._transact(
            ser, sp.CONFIGURE, sp.encode_configure(n, self.bits), sp.CONFIGURE_RSP
        )
        if sp.decode_configure(payload) != (n, self.bits):
            raise BackendError(
                f"board on {port} applied {sp.decode_configure(payload)}, "
                f"asked for ({n}, {self.bits})"
            )
        return sp.Identity(
            ident.version, ident.max_resolvers, n, self.bits, ident.firmware, ident.board_id
        )

    def _transact(self, ser: Any, msg_type: int, payload: bytes, rsp_type: int) -> bytes:
        """Slow-path request/response with retries (open and reconnect only)."""
        last = "no response"
        for _ in range(_HANDSHAKE_TRIES):
            self._seq = seq = (self._seq + 1) & 0xFF
            ser.reset_input_buffer()
            ser.write(sp.encode_frame(msg_type, seq, payload))
            head = ser.read(sp.HEADER_LEN)
            if len(head) < sp.HEADER_LEN:
                last = f"timeout after {self.cfg.open_timeout_s} s"
                continue
            frame = head + ser.read(head[2] + sp.CRC_LEN)
            try:
                f = sp.decode_frame(frame)
            except sp.ProtocolError as e:
                last = str(e)
                continue
            if f.seq != seq:
                last = f"sequence {f.seq} answers request {seq}"
                continue
            if f.msg_type == sp.NAK:
                raise BackendError(
                    f"board on {self.cfg.port} refused request 0x{msg_type:02x}: "
                    f"NAK {f.payload.hex()}"
                )
            if f.msg_type != rsp_type:
                last = f"response type 0x{f.msg_type:02x}, expected 0x{rsp_type:02x}"
                continue
            return f.payload
        raise BackendError(
            f"serial resolver board on {self.cfg.port}: request 0x{msg_type:02x} failed: {last}"
        )


def _common_bits(inputs: list[Channel]) -> int:
    bits = {c.converter.bits for c in inputs}
    if len(bits) > 1:
        raise BackendError(
            f"serial resolvers must share one resolution; profile has {sorted(bits)}"
        )
    b = bits.pop() if bits else 16
    if b not in sp.RESOLUTIONS:
        raise BackendError(f"resolver resolution {b} bits not one of {list(sp.RESOLUTIONS)}")
    return b


def _resolver_indices(inputs: list[Channel], n: int) -> list[int]:
    out: list[int] = []
    for c in inputs:
        m = _PHYSICAL.match(c.physical)
        if c.role != "resolver" or m is None:
            raise BackendError(
                f"channel '{c.name}' ({c.role}, physical '{c.physical}'): the serial board only "
                f"provides resolver channels with physical = 'resolver0' … 'resolver{n - 1}'"
            )
        k = int(m.group(1))
        if k >= n:
            raise BackendError(
                f"channel '{c.name}' is on {c.physical}, but [backend.serial] resolvers = {n}"
            )
        if k in out:
            raise BackendError(f"channel '{c.name}': {c.physical} is used twice")
        out.append(k)
    return out
