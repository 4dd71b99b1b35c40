"""Emulator of the resolver front-end board (docs/serial_protocol.md) on a pty or a serial port.

    python -m daq.backends.serial_emulator --pty [--link /tmp/hydrig-resolvers] [--profile P]
    python -m daq.backends.serial_emulator --port /dev/ttyUSB1 --baudrate 921600

The first line on stdout is the port the host should open. Faults can be injected from the
command line (`--crc-error-every`, `--delay-every`, `--stuck-after`, `--fault-after`,
`--remove-after`, `--remove-after-requests`) or, in tests, through the `BoardEmulator` methods.
By default the angles are the reference rig's home pose, so a composite profile (simulated
analog + these resolvers) starts at rest where the simulated plant starts.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import select
import signal
import sys
import threading
import time
import tty
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from daq.backends import serial_protocol as sp

log = logging.getLogger(__name__)

#: Resolver angles (converter degrees, 0–360) of sim-2dof's home pose: j1 = 40°, j2 = 30°,
#: resolvers mounted 180° off (scaling offset −π), so 220° and 210°; spare inputs read 180°.
DEFAULT_ANGLES_DEG = (220.0, 210.0, 180.0, 180.0, 180.0, 180.0, 180.0, 180.0)


class BoardEmulator:
    """The board's behaviour, served from a thread; thread-safe fault-injection setters."""

    def __init__(
        self,
        resolvers: int = 2,
        bits: int = 14,
        angles_deg: Sequence[float] = DEFAULT_ANGLES_DEG,
        *,
        firmware: int = 0x0100,
        board_id: int = 0x52443031,
        record: bool = False,
    ) -> None:
        if not 1 <= resolvers <= sp.MAX_RESOLVERS or bits not in sp.RESOLUTIONS:
            raise ValueError(f"resolvers must be 1…8 and bits one of {sp.RESOLUTIONS}")
        self.resolvers, self.bits, self.configured = resolvers, bits, False
        self.firmware, self.board_id = firmware, board_id
        self._base = [*angles_deg, *DEFAULT_ANGLES_DEG][: sp.MAX_RESOLVERS]
        self._amp = [0.0] * sp.MAX_RESOLVERS
        self._period = 10.0
        self._faults = [0] * sp.MAX_RESOLVERS
        self._frozen: list[int] | None = None
        self.status = 0
        self.crc_errors_pending = 0
        self.crc_error_every = 0
        self.delay_s, self.delays_pending, self.delay_every = 0.0, 0, 0
        self.drops_pending = 0
        self.served = 0
        #: Vanish (like `remove_port`) when request `remove_after + 1` arrives; 0 = never.
        self.remove_after = 0
        self.record = record
        self.rx = bytearray()  # everything received (when `record`)
        self.tx = bytearray()  # everything sent (when `record`)
        self.parser = sp.FrameParser()
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        self._fd = -1
        self._keep: list[int] = []  # fds to close on stop (pty slave kept open: no EIO on idle)
        self._ser: Any = None
        self._link: Path | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.port = ""

    # ------------------------------------------------------------------ transport

    def open_pty(self, link: str | Path | None = None) -> str:
        master, slave = os.openpty()
        tty.setraw(slave)  # no echo or line editing before the host configures the port
        self._fd, self._keep = master, [master, slave]
        self.port = os.ttyname(slave)
        if link is not None:
            self._link = Path(link)
            self._link.unlink(missing_ok=True)
            self._link.symlink_to(self.port)
        return self.port

    def open_port(self, port: str, baudrate: int = 921600) -> str:
        import serial  # pyserial, only for a real port

        self._ser = serial.Serial(port, baudrate, timeout=0)
        self._fd = self._ser.fileno()
        self.port = port
        return port

    def start(self) -> BoardEmulator:
        if self._fd < 0:
            self.open_pty()
        self._thread = threading.Thread(target=self._serve, name="board-emulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self._close_port()

    def remove_port(self) -> None:
        """The board vanishes (USB unplugged): the host's next read or write fails."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        self._close_port()

    def _close_port(self) -> None:
        for fd in self._keep:
            try:
                os.close(fd)
            except OSError:
                pass
        self._keep, self._fd = [], -1
        if self._ser is not None:
            self._ser.close()
            self._ser = None
        if self._link is not None:
            self._link.unlink(missing_ok=True)
            self._link = None

    # ------------------------------------------------------------------ fault injection

    def set_angles(self, angles_deg: Sequence[float]) -> None:
        with self._lock:
            self._base[: len(angles_deg)] = list(angles_deg)

    def set_motion(self, amplitude_deg: float, period_s: float) -> None:
        """Slow sinusoid of `amplitude_deg` about the base angles on every resolver."""
        with self._lock:
            self._amp = [amplitude_deg] * sp.MAX_RESOLVERS
            self._period = period_s

    def set_stuck(self, stuck: bool = True) -> None:
        """Freeze the reported positions (a seized converter) while the board keeps answering."""
        with self._lock:
            self._frozen = self._codes() if stuck else None

    def set_fault(self, resolver: int, bits: int) -> None:
        with self._lock:
            self._faults[resolver] = bits

    def set_status(self, bits: int) -> None:
        self.status = bits

    def inject_crc_errors(self, n: int = 1) -> None:
        self.crc_errors_pending += n

    def inject_delay(self, seconds: float, n: int = 1) -> None:
        self.delay_s, self.delays_pending = seconds, self.delays_pending + n

    def drop_responses(self, n: int = 1) -> None:
        self.drops_pending += n

    # ------------------------------------------------------------------ behaviour

    def angles_deg(self) -> list[float]:
        t = time.monotonic() - self._t0
        s = math.sin(2.0 * math.pi * t / self._period)
        return [b + a * s for b, a in zip(self._base, self._amp, strict=True)]

    def _codes(self) -> list[int]:
        full = 1 << self.bits
        return [math.floor(a / 360.0 * full + 0.5) % full for a in self.angles_deg()]

    def respond(self, f: sp.Frame) -> bytes:
        """The response frame to request `f` (the board's whole protocol logic)."""
        if f.msg_type == sp.IDENTIFY and not f.payload:
            ident = sp.Identity(
                sp.PROTOCOL_VERSION,
                sp.MAX_RESOLVERS,
                self.resolvers,
                self.bits,
                self.firmware,
                self.board_id,
            )
            return sp.encode_frame(sp.IDENTIFY_RSP, f.seq, ident.encode())
        if f.msg_type == sp.CONFIGURE and len(f.payload) == 2:
            n, bits = sp.decode_configure(f.payload)
            if not 1 <= n <= sp.MAX_RESOLVERS or bits not in sp.RESOLUTIONS:
                return sp.encode_frame(
                    sp.NAK, f.seq, sp.encode_nak(sp.NAK_BAD_PARAMETER, f.msg_type)
                )
            with self._lock:
                self.resolvers, self.bits, self.configured = n, bits, True
                self._frozen = None
            return sp.encode_frame(sp.CONFIGURE_RSP, f.seq, sp.encode_configure(n, bits))
        if f.msg_type == sp.SAMPLE and not f.payload:
            with self._lock:
                codes = self._frozen if self._frozen is not None else self._codes()
                faults = self._faults[: self.resolvers]
            status = self.status | (0 if self.configured else sp.STATUS_NOT_CONFIGURED)
            tick = int(time.monotonic() * 1e6) & 0xFFFF
            sample = sp.Sample(status, tick, tuple(codes[: self.resolvers]), tuple(faults))
            return sp.encode_frame(sp.SAMPLE_RSP, f.seq, sample.encode())
        known = f.msg_type in (sp.IDENTIFY, sp.CONFIGURE, sp.SAMPLE)
        code = sp.NAK_BAD_LENGTH if known else sp.NAK_UNKNOWN_TYPE
        return sp.encode_frame(sp.NAK, f.seq, sp.encode_nak(code, f.msg_type))

    def _mangle(self, frame: bytes) -> bytes | None:
        """Apply pending/periodic injections to one response; None = send nothing."""
        self.served += 1
        if self.drops_pending:
            self.drops_pending -= 1
            return None
        delay = self.delays_pending > 0 or (
            self.delay_every and self.served % self.delay_every == 0
        )
        if delay:
            self.delays_pending = max(0, self.delays_pending - 1)
            time.sleep(self.delay_s)
        if self.crc_errors_pending or (
            self.crc_error_every and self.served % self.crc_error_every == 0
        ):
            self.crc_errors_pending = max(0, self.crc_errors_pending - 1)
            frame = frame[:-2] + bytes((frame[-2] ^ 0xFF, frame[-1]))
        return frame

    def _serve(self) -> None:
        fd = self._fd
        while not self._stop.is_set():
            try:
                if not select.select([fd], [], [], 0.05)[0]:
                    continue
                data = os.read(fd, 4096)
            except OSError:
                return  # port closed under us
            if self.record:
                self.rx += data
            for f in self.parser.feed(data):
                if self.remove_after and self.served >= self.remove_after:
                    self._stop.set()  # vanish instead of answering request remove_after + 1
                    self._close_port()
                    return
                out = self._mangle(self.respond(f))
                if out is None:
                    continue
                if self.record:
                    self.tx += out
                try:
                    os.write(fd, out)
                except OSError:
                    return

    def __enter__(self) -> BoardEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def profile_defaults(path: str) -> tuple[int, int, list[float]]:
    """(resolvers, bits, angles) that make the board report the profile's home pose."""
    from daq.profile import load_profile
    from daq.scaling import eng_to_units

    prof = load_profile(path)
    cfg = prof.backend.serial
    if cfg is None:
        raise ValueError(f"{path}: no [backend.serial] section")
    angles = list(DEFAULT_ANGLES_DEG)
    homes = {j.name: math.radians(j.home_deg) for j in prof.joints}
    bits = 14
    for c in prof.inputs:
        if prof.channel_device(c) == "serial" and c.physical.startswith("resolver"):
            k = int(c.physical.removeprefix("resolver"))
            angles[k] = eng_to_units(c, homes[c.joint]) % 360.0 if c.joint else 180.0
            bits = c.converter.bits
    return cfg.resolvers, bits, angles


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m daq.backends.serial_emulator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--pty", action="store_true", help="serve on a new pseudo-terminal")
    where.add_argument("--port", help="serve on this serial port (null-modem to the host)")
    ap.add_argument("--link", help="with --pty: also make this symlink to the pty")
    ap.add_argument("--baudrate", type=int, default=921600)
    ap.add_argument("--profile", help="take resolver count, resolution and home pose from it")
    ap.add_argument("--resolvers", type=int, help="resolver inputs (default 2)")
    ap.add_argument("--bits", type=int, help="resolution before CONFIGURE (default 14)")
    ap.add_argument("--angles", type=_floats, help="converter degrees, comma-separated")
    ap.add_argument("--motion", type=_floats, metavar="AMP_DEG,PERIOD_S")
    ap.add_argument("--crc-error-every", type=int, default=0, metavar="N")
    ap.add_argument("--delay-every", type=_floats, metavar="N,SECONDS")
    ap.add_argument("--stuck-after", type=float, metavar="S")
    ap.add_argument("--fault-after", type=_floats, metavar="S,RESOLVER,BITS")
    ap.add_argument("--remove-after", type=float, metavar="S")
    ap.add_argument("--remove-after-requests", type=int, default=0, metavar="N")
    ap.add_argument("-v", "--verbose", action="count", default=0)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING - 10 * a.verbose)
    n, bits, angles = profile_defaults(a.profile) if a.profile else (2, 14, [*DEFAULT_ANGLES_DEG])
    emu = BoardEmulator(a.resolvers or n, a.bits or bits, a.angles or angles)
    if a.motion:
        emu.set_motion(a.motion[0], a.motion[1])
    emu.crc_error_every = a.crc_error_every
    emu.remove_after = a.remove_after_requests
    if a.delay_every:
        emu.delay_every, emu.delay_s = int(a.delay_every[0]), a.delay_every[1]
    port = emu.open_pty(a.link) if a.pty else emu.open_port(a.port, a.baudrate)
    print(port, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    events: list[tuple[float, Any]] = []
    if a.stuck_after is not None:
        events.append((a.stuck_after, emu.set_stuck))
    if a.fault_after:
        s, k, b = a.fault_after
        events.append((s, lambda: emu.set_fault(int(k), int(b))))
    if a.remove_after is not None:
        events.append((a.remove_after, emu.remove_port))
    t0 = time.monotonic()
    emu.start()
    while not done.wait(0.02):
        now = time.monotonic() - t0
        for ev in [e for e in events if e[0] <= now]:
            events.remove(ev)
            ev[1]()
        if emu._fd < 0:
            break
    emu.stop()
    print(
        f"served {emu.served} requests, {emu.parser.crc_errors} bad request CRCs", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
