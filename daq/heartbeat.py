"""rig-heartbeat: the service's heartbeat to the loop process, without the service's GIL.

Why a process: the loop process nulls the valves when the service's heartbeat goes stale
(`[interlocks].service_heartbeat_ms`). Written by a Python thread of the service, that
heartbeat needed the service's interpreter lock, so one starved service thread holding the lock
(a telemetry thread at SCHED_IDLE under CPU load: it is scheduled for microseconds a second, and
keeps the lock between) stopped the heartbeat and so the rig, although the service was alive.
This helper is a separate interpreter with nothing else to do: every `period` it

- checks that its parent (the service) is still its parent and is neither stopped (SIGSTOP,
  a debugger: state T/t in /proc/PID/stat) nor dead (Z/X), and only then writes
  `time.monotonic_ns()` into the heartbeat word of the control segment. A service that is
  killed or frozen still stops the heartbeat; a service whose threads are merely slow does not;
- watches the loop process (real time only): when the loop's cycle counter stops advancing for
  `stall_s`, or its process is gone, it stores the time it noticed in a word of the segment and
  writes one line to stderr (the journal) at once — the service's supervisor thread reports it
  (`status.loop_process`) whether or not it could run meanwhile.

It runs as a script with the standard library only (`python -I -S daq/heartbeat.py ...`): it
starts in ~20 ms and holds ~8 MB. It exits when its parent changes (the service died) or on
SIGTERM (the service's shutdown). The service keeps writing the heartbeat from its supervisor
thread too, so the helper's death alone never stops the rig.

Usage: heartbeat.py SEGMENT PARENT_PID PERIOD_S STALL_S WORDS
WORDS: comma-separated int64 word indices: heartbeat, loop cycles, loop pid, go, finished,
loop-stalled-at.
"""

from __future__ import annotations

import mmap
import os
import signal
import struct
import sys
import time

_Q = struct.Struct("<q")


def _state(pid: int) -> str:
    """The process state letter from /proc (R, S, D, T, t, Z, X, …); 'X' if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b") ", 1)[1][:1].decode()
    except (OSError, IndexError):
        return "X"


def run(segment: str, parent: int, period: float, stall_s: float, words: list[int]) -> int:
    beat, cycles_w, loop_pid_w, go_w, finished_w, stalled_w = (8 * w for w in words)
    fd = os.open(f"/dev/shm/{segment.lstrip('/')}", os.O_RDWR)
    try:
        mm = mmap.mmap(fd, 0)
    finally:
        os.close(fd)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    last_cycles, last_change = -1, time.monotonic()
    while os.getppid() == parent:
        if _state(parent) not in "TtZX":
            _Q.pack_into(mm, beat, time.monotonic_ns())
        if stall_s > 0:
            now = time.monotonic()
            cycles = _Q.unpack_from(mm, cycles_w)[0]
            running = (  # from its first cycle on (the first may come seconds after go)
                cycles > 0 and _Q.unpack_from(mm, go_w)[0] and not _Q.unpack_from(mm, finished_w)[0]
            )
            if cycles != last_cycles:
                last_cycles, last_change = cycles, now
                if _Q.unpack_from(mm, stalled_w)[0]:
                    _Q.pack_into(mm, stalled_w, 0)  # cycling again
            elif running and not _Q.unpack_from(mm, stalled_w)[0]:
                pid = _Q.unpack_from(mm, loop_pid_w)[0]
                gone = pid > 0 and _state(pid) in "ZX"
                if gone or now - last_change > stall_s:
                    _Q.pack_into(mm, stalled_w, time.monotonic_ns())
                    why = "is gone" if gone else f"has not cycled for {now - last_change:.2f} s"
                    print(f"rig-heartbeat: the loop process {pid} {why} (cycle {cycles})",
                          file=sys.stderr, flush=True)  # fmt: skip
        time.sleep(period)
    return 0


if __name__ == "__main__":
    seg, ppid, per, stall, idx = sys.argv[1:6]
    sys.exit(run(seg, int(ppid), float(per), float(stall), [int(w) for w in idx.split(",")]))
