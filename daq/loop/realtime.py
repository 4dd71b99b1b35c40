"""Real-time setup of the loop thread: SCHED_FIFO, mlockall, CPU affinity, timer slack, and the
CPU wake-up latency request (PM QoS).

Everything here is best effort. A development laptop or a container without CAP_SYS_NICE /
CAP_IPC_LOCK runs the same loop with worse timing; that deserves one clear warning naming what
could not be had, not a crash (ros2_control_node behaves the same way).

`sched_setscheduler(0, …)`, `sched_setaffinity(0, …)` and `prctl(PR_SET_TIMERSLACK)` act on the
*calling thread* on Linux, so `apply()` must run in the loop thread itself. `mlockall` is
process-wide.

CPU latency (PM QoS, Documentation/power/pm_qos_interface.rst): while a process holds
`/dev/cpu_dma_latency` open with a value written to it, the idle governor keeps every CPU out of
idle states whose exit latency exceeds it. An idle CPU otherwise halts between cycles, and waking
it costs the loop tens of µs — on the development VM (cpuidle `haltpoll`) a bare Python sleep
loop pinned at SCHED_FIFO 80 woke with p99 65 µs, and 0 µs with the request held (same spin,
same machine). `cyclictest` makes this request by default ("/dev/cpu_dma_latency set to 0us"),
so without it the loop is compared with a floor it is not allowed to reach. The price is power:
the CPUs poll instead of sleeping while the service runs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import resource
import sys
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

MCL_CURRENT = 1
MCL_FUTURE = 2
PR_SET_TIMERSLACK = 29


@dataclass(frozen=True)
class RtSettings:
    #: SCHED_FIFO priority (1–99); 0 = leave the normal scheduler.
    priority: int = 0
    #: CPU to pin the loop thread to; -1 = any.
    cpu: int = -1
    lock_memory: bool = False
    #: Hold `/dev/cpu_dma_latency` at this many µs while the process lives; -1 = leave it.
    cpu_latency_us: int = -1


@dataclass
class RtReport:
    applied: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, list[str]]:
        return {"applied": list(self.applied), "failed": list(self.failed)}


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name or "libc.so.6", use_errno=True)
    except OSError:
        return None


def _lock_memory(report: RtReport) -> None:
    libc = _libc()
    if libc is None or not hasattr(libc, "mlockall"):
        report.failed.append("mlockall: libc not available")
        return
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    # With MCL_FUTURE and a finite RLIMIT_MEMLOCK, every later allocation beyond the limit fails
    # with ENOMEM (a MemoryError in the middle of a run). Without CAP_IPC_LOCK (root has it) and
    # an unlimited limit, lock nothing and say so rather than arm that trap.
    if soft != resource.RLIM_INFINITY and os.geteuid() != 0:
        report.failed.append(
            f"mlockall: RLIMIT_MEMLOCK is {soft} bytes (needs unlimited or root); memory not locked"
        )
        return
    if libc.mlockall(MCL_CURRENT | MCL_FUTURE) != 0:
        err = ctypes.get_errno()
        report.failed.append(f"mlockall: {os.strerror(err)}")
    else:
        report.applied.append("mlockall(MCL_CURRENT|MCL_FUTURE)")


CPU_LATENCY_DEVICE = "/dev/cpu_dma_latency"
#: The open request: the kernel drops it when this descriptor closes (at process exit).
_latency_fd: int | None = None


def _hold_cpu_latency(us: int, report: RtReport) -> None:
    global _latency_fd
    try:
        if _latency_fd is None:
            _latency_fd = os.open(CPU_LATENCY_DEVICE, os.O_WRONLY | os.O_CLOEXEC)
        # The device takes a native 32-bit integer (µs); the last value written counts.
        os.write(_latency_fd, int(us).to_bytes(4, sys.byteorder, signed=True))
        report.applied.append(f"cpu latency {us} µs")
    except OSError as exc:
        report.failed.append(f"cpu latency {us} µs ({CPU_LATENCY_DEVICE}): {exc.strerror}")


def apply(settings: RtSettings) -> RtReport:
    """Apply `settings` to the calling thread; log ONE warning listing whatever failed."""
    report = RtReport()
    if settings.cpu >= 0:
        try:
            os.sched_setaffinity(0, {settings.cpu})
            report.applied.append(f"affinity cpu {settings.cpu}")
        except OSError as exc:
            report.failed.append(f"affinity cpu {settings.cpu}: {exc.strerror}")
    if settings.lock_memory:
        _lock_memory(report)
    if settings.priority > 0:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(settings.priority))
            report.applied.append(f"SCHED_FIFO priority {settings.priority}")
        except (OSError, AttributeError) as exc:
            report.failed.append(f"SCHED_FIFO {settings.priority}: {exc}")
    if settings.cpu_latency_us >= 0:
        _hold_cpu_latency(settings.cpu_latency_us, report)
    # Normal threads get 50 µs of timer slack: their sleeps may end that late on purpose.
    libc = _libc()
    if libc is not None and libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0) == 0:
        report.applied.append("timer slack 1 ns")
    if report.failed:
        log.warning(
            "real-time setup incomplete, running anyway with worse timing: %s",
            "; ".join(report.failed),
        )
    elif report.applied:
        log.info("real-time setup: %s", ", ".join(report.applied))
    return report


def keep_off_cpu(cpu: int) -> set[int] | None:
    """Confine the calling thread — and every thread it starts later — to the CPUs it may use
    other than `cpu` (the loop process's): the service process calls it before it starts any
    thread, so its command decoding, telemetry and recording stay off the loop's CPU, as the
    systemd unit's `CPUAffinity=0` does. Interrupting a SCHED_FIFO task is cheap, but a task
    inside a system call on its CPU delays its wake-up and evicts its caches:
    `bench/loop_under_attack.py` measures both ways. Returns the new set, or None when `cpu`
    is not in the current set or nothing else would be left."""
    try:
        allowed = os.sched_getaffinity(0)
    except OSError:
        return None
    rest = allowed - {cpu}
    if cpu not in allowed or not rest:
        return None
    try:
        os.sched_setaffinity(0, rest)
    except OSError as exc:
        log.warning("could not keep the service off the loop's CPU %d: %s", cpu, exc.strerror)
        return None
    return rest
