"""SAMPLE request → response round trip of the serial resolver backend on a pty, at the loop rate.

The board emulator runs in its own process (as the board is its own device); the backend polls
it at `--rate` Hz on absolute deadlines for `--seconds`. Reference measured in the same run: a
bare pty echo peer (a process that answers each 7-byte request with 17 bytes and does nothing
else), polled the same way — the ratio isolates the protocol/backend/emulator cost from the
machine's pty and process wake-up latency. A pty has no baud rate: the figures exclude the
260 µs the 24 bytes take on a 921 600-baud wire (also printed).

    /work/venv/bin/python bench/serial_roundtrip.py [--seconds 5] [--rate 1000]

Last line: JSON with p50/p99/max in µs, timeouts, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daq.backends import serial_protocol as sp  # noqa: E402
from daq.backends.base import BackendStatus  # noqa: E402
from daq.backends.serial_resolver import SerialResolverBackend  # noqa: E402
from daq.profile import load_profile, parse_profile  # noqa: E402

PROFILE = ROOT / "hw_profiles" / "composite-sim-serial.toml"

ECHO = r"""
import os, pty, select, sys, tty
m, s = os.openpty(); tty.setraw(s)
print(os.ttyname(s), flush=True)
reply = bytes(17)
buf = b""
while True:
    r = select.select([m, sys.stdin], [], [], 1.0)[0]
    if sys.stdin in r:
        break
    if m in r:
        buf += os.read(m, 64)
        while len(buf) >= 7:
            buf = buf[7:]
            os.write(m, reply)
"""


def spawn(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(
        [sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert p.stdout is not None
    return p, p.stdout.readline().strip()


def paced(fns: list[Callable[[], bool]], n: int, period: float) -> tuple[np.ndarray, np.ndarray]:
    """Once per period on absolute deadlines, call each of `fns` in turn (so that they see the
    same machine load); return their durations (s) and failure flags, shape (len(fns), n)."""
    dur = np.zeros((len(fns), n))
    fail = np.zeros((len(fns), n), dtype=bool)
    t_next = time.perf_counter()
    for k in range(n):
        t_next += period
        for j, fn in enumerate(fns):
            t0 = time.perf_counter()
            fail[j, k] = not fn()
            dur[j, k] = time.perf_counter() - t0
        delay = t_next - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        else:
            t_next = time.perf_counter()
    return dur, fail


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rate", type=float, default=1000.0)
    a = ap.parse_args(argv)
    n, period = int(a.seconds * a.rate), 1.0 / a.rate
    timeout_s = load_profile(PROFILE).backend.serial.timeout_s  # type: ignore[union-attr]

    # Reference: bare echo peer on a pty, read with the same deadline (pyserial).
    import serial

    echo, echo_port = spawn(["-c", ECHO])
    ser = serial.Serial(echo_port, 921600, timeout=timeout_s)
    req = sp.encode_frame(sp.SAMPLE, 1)

    def echo_once() -> bool:
        ser.reset_input_buffer()  # drop a late reply, as the backend does
        ser.write(req)
        return len(ser.read(17)) == 17

    emu, port = spawn(["-m", "daq.backends.serial_emulator", "--pty", "--profile", str(PROFILE)])
    data = tomllib.loads(PROFILE.read_text())
    data["backend"]["serial"]["port"] = port
    prof = parse_profile(data, PROFILE)
    inputs = [c for c in prof.inputs if prof.channel_device(c) == "serial"]
    b = SerialResolverBackend(prof, inputs, [])
    b.open()
    raw = np.zeros(len(inputs))

    def sample_once() -> bool:
        return b.read(0.0, raw) == BackendStatus.OK

    paced([sample_once, echo_once], 200, period)  # warm-up
    for k in b.counters:
        b.counters[k] = 0
    dur, fail = paced([sample_once, echo_once], n, period)
    counters = dict(b.counters)
    b.close()
    ser.close()
    emu.terminate()
    assert echo.stdin is not None
    echo.stdin.close()
    for p in (emu, echo):
        p.wait(timeout=5)

    us = 1e6
    rt, ref = dur * us
    p50, p99 = np.percentile(rt, [50, 99])
    r50, r99 = np.percentile(ref, [50, 99])
    fails, ref_fail = int(fail[0].sum()), int(fail[1].sum())
    print(
        f"backend on emulator: p50 {p50:.0f} µs, p99 {p99:.0f} µs, max {rt.max():.0f} µs,"
        f" {fails}/{n} failed ({counters})"
    )
    print(f"bare pty echo:       p50 {r50:.0f} µs, p99 {r99:.0f} µs, {ref_fail}/{n} failed")
    wire = sp.frame_time_s(7 + sp.sample_frame_len(len(inputs)), 921600)
    print(
        json.dumps(
            {
                "cycles": n,
                "rate_hz": a.rate,
                "timeout_us": timeout_s * us,
                "p50_us": round(p50, 1),
                "p99_us": round(p99, 1),
                "max_us": round(rt.max(), 1),
                "failed": fails,
                "timeouts": counters["timeouts"],
                "crc_errors": counters["crc_errors"],
                "protocol_errors": counters["protocol_errors"],
                "ref_echo_p50_us": round(r50, 1),
                "ref_echo_p99_us": round(r99, 1),
                "ref_echo_failed": ref_fail,
                "ratio_p50": round(p50 / r50, 2),
                "ratio_p99": round(p99 / r99, 2),
                "wire_time_921600_us": round(wire * us, 1),
                "load_avg_1min": os.getloadavg()[0],
                "cpus": os.cpu_count(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
