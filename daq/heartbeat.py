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
loop-stalled-at, stop.
"""

from __future__ import annotations

import mmap
import os
import signal
import sys
import time


def _state(pid: int) -> str:
    """The process state letter from /proc (R, S, D, T, t, Z, X, …); 'X' if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b") ", 1)[1][:1].decode()
    except (OSError, IndexError):
        return "X"


def run(segment: str, parent: int, period: float, stall_s: float, index: list[int]) -> int:
    beat, cycles_i, loop_pid_i, go_i, finished_i, stalled_i, stop_i = index
    fd = os.open(f"/dev/shm/{segment.lstrip('/')}", os.O_RDWR)
    try:
        mm = mmap.mmap(fd, 0)
    finally:
        os.close(fd)
    # Loads and stores through an int64 memoryview: one aligned 8-byte access each. Not
    # struct.pack_into, which zeroes its target before it writes the value: the loop process,
    # reading in between, saw a heartbeat of 0 ("stale for <uptime>") and stopped the rig.
    words = memoryview(mm).cast("q")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # The lowest real-time priority where allowed (the unit's LimitRTPRIO; root): then no
    # ordinary process — CPU hogs included — can keep this tick from running, while the loop
    # (SCHED_FIFO at `[realtime] priority`, far above) always preempts it. It runs ~50 µs in
    # 50 ms. Refused: it stays SCHED_OTHER and competes like any process.
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (OSError, AttributeError):
        pass
    last_cycles, last_change = -1, time.monotonic()
    while os.getppid() == parent:
        if _state(parent) not in "TtZX":
            words[beat] = time.monotonic_ns()
        if stall_s > 0:
            now = time.monotonic()
            cycles = words[cycles_i]
            # From its first cycle on (the first may come seconds after go); a stop is no stall.
            running = cycles > 0 and words[go_i] and not words[finished_i] and not words[stop_i]
            if cycles != last_cycles:
                last_cycles, last_change = cycles, now
                if words[stalled_i]:
                    words[stalled_i] = 0  # cycling again
            elif running and not words[stalled_i]:
                pid = words[loop_pid_i]
                gone = pid > 0 and _state(pid) in "ZX"
                if gone or now - last_change > stall_s:
                    words[stalled_i] = time.monotonic_ns()
                    why = "is gone" if gone else f"has not cycled for {now - last_change:.2f} s"
                    print(
                        f"rig-heartbeat: the loop process {pid} {why} (cycle {cycles})",
                        file=sys.stderr,
                        flush=True,
                    )
        time.sleep(period)
    return 0


if __name__ == "__main__":
    seg, ppid, per, stall, idx = sys.argv[1:6]
    sys.exit(run(seg, int(ppid), float(per), float(stall), [int(w) for w in idx.split(",")]))
