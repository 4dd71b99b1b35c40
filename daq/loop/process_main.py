"""The loop process: the 1 kHz loop and nothing else (issue 15).

`daq.service.loop_supervisor.LoopProcess` starts this with the `spawn` start method — a fresh
interpreter, not a fork: the service may already run threads (zmq I/O threads, the recorder),
and a fork taken while another thread holds a lock (the allocator's, logging's, the GIL's
internals) can deadlock the child. The spawn costs an interpreter start and the imports (~1.3 s
on the development machine), once per service start.

What the process runs: the backend, scaling, interlocks, the controller step, the row into the
shared ring (`daq.ring.SampleRing.attach`), the shared mailbox (`daq.loop.shm_mailbox`), the
status block and the event FIFO (`daq.loop.shared_link`). No sockets, no decoding, no recording;
its only logging is at start, at exit and on a loop error.

Real-time settings (SCHED_FIFO, CPU pinning, mlockall, timer slack) apply here, in the thread
that runs the cycle; the service process keeps the normal scheduler.

If the service disappears the loop nulls the valves itself, latches FAULT (PROCESS_LOST) and
exits. Two detectors: the service's heartbeat word going stale beyond
`[interlocks].service_heartbeat_ms` (it also catches a service that is alive but frozen), and
`prctl(PR_SET_PDEATHSIG, SIGUSR1)` with a `getppid()` check (a killed service is noticed at once).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from daq.backends.base import Backend, BackendError
from daq.loop import realtime as rt
from daq.loop.cycle import Loop, LoopError
from daq.loop.interlocks import Trip, TripInfo
from daq.loop.shared_link import RUNNER_FIELDS, EventWriter, LoopLink, S, StopReason, W
from daq.loop.shm_mailbox import CrossProcessLock, ShmMailboxServer
from daq.loop.states import LATCHED_STATES, State
from daq.profile.schema import Profile
from daq.ring import SampleRing

log = logging.getLogger("daq.loop.process")

PR_SET_PDEATHSIG = 1
#: Check the parent's pid every this many cycles (a system call; the heartbeat covers the rest).
PPID_EVERY = 64
#: Virtual time: sleep step while a lossless reader (the recorder) is half a ring behind.
BACKPRESSURE_SLEEP_S = 0.0005
#: Between READY and the service's go.
GO_POLL_S = 0.001


@dataclass
class LoopSpec:
    """Everything the loop process needs, pickled by `spawn`."""

    profile: Profile
    backend_factory: Callable[[Profile], Backend]
    hold: Any
    virtual_time: bool
    spin_us: float
    rt_settings: rt.RtSettings | None
    ring_name: str
    ring_capacity: int
    ring_width: int
    link_name: str
    bins_us: int
    lock: CrossProcessLock
    parent_pid: int
    heartbeat_timeout_s: float
    duration: float | None
    log_level: int = logging.WARNING
    #: Called at exit when the service died: `(link, ring, why)`; the service passes
    #: `daq.recording.salvage.salvage_from_loop` (this package imports no recording part).
    orphan_hook: Callable[[LoopLink, SampleRing, str], None] | None = None
    #: The calibration in force from the first cycle (`daq.loop.station.CalibrationSwap`).
    calibration: Any = None


class LinkWriter:
    """`Loop.after_cycle` in the loop process: mirrors the status into shared memory, answers
    the stop word, watches the service. Scalar stores and comparisons only."""

    def __init__(self, loop: Loop, link: LoopLink, spec: LoopSpec) -> None:
        self.loop = loop
        self.link = link
        self.words = link.words
        self.status = link.status
        self.parent_pid = spec.parent_pid
        self.timeout_ns = round(spec.heartbeat_timeout_s * 1e9)
        self.virtual = spec.virtual_time
        self.half_ring = loop.ring.capacity // 2
        self.reason = StopReason.NONE
        self._lost_why = ""  # set by the SIGUSR1 handler
        self.lost_why = ""  # why the service was judged lost (for the orphaned run's trailer)
        self._countdown = PPID_EVERY
        self._runner: Any = None
        self._runner_fields: list[tuple[str, int]] = []
        self._segment_name: Any = None
        self._follow_name = False

    def __call__(self) -> None:
        self.write_status()
        if self.reason == StopReason.SERVICE_LOST:
            self.loop.stop()  # the null cycle (FAULT, null commands) has run and has its row
            return
        words = self.words
        if words[W.STOP] and self.reason == StopReason.NONE:
            self.reason = StopReason.REQUESTED
            self.loop.stop()
        age = time.monotonic_ns() - int(words[W.SERVICE_HEARTBEAT_NS])
        if age > self.timeout_ns:
            self.service_lost(f"service heartbeat stale for {age * 1e-6:.0f} ms", age)
        self._countdown -= 1
        if self._countdown <= 0:
            self._countdown = PPID_EVERY
            if os.getppid() != self.parent_pid:
                self.service_lost("service process gone (parent pid changed)", age)
        if self._lost_why:
            self.service_lost(self._lost_why, age)
        if self.virtual and words[W.LOW_WATER] >= 0:
            self._wait_for_readers()

    def write_status(self) -> None:
        loop, st, tm = self.loop, self.status, self.loop.timing
        st[S.SEQ] = loop.seq
        st[S.T] = loop.t
        st[S.STATE] = loop.state
        st[S.FLAGS] = loop.last_flags
        st[S.CLAMPED] = loop.interlocks.clamped
        fault = loop.fault
        st[S.FAULT_CODE] = 0 if fault is None else fault.code
        st[S.CYCLES] = tm.cycles
        st[S.OVERRUNS] = tm.overruns
        st[S.CONSECUTIVE_OVERRUNS] = tm.consecutive_overruns
        st[S.MAX_CONSECUTIVE_OVERRUNS] = tm.max_consecutive_overruns
        st[S.SKIPPED] = tm.skipped
        st[S.WAKE_MAX_NS] = tm.wake_max_ns
        st[S.COMPUTE_MAX_NS] = tm.compute_max_ns
        st[S.BETWEEN_MAX_NS] = tm.between_max_ns
        st[S.POWER] = loop.station.power
        st[S.JOGGING] = loop.station.jogging
        st[S.SHUNT] = loop.station.shunt
        runner = loop.active
        if runner is not self._runner:
            self._new_runner(runner)
        if runner is not None:
            for name, index in self._runner_fields:
                st[index] = getattr(runner, name)
            if self._follow_name and runner.segment_name is not self._segment_name:  # type: ignore[attr-defined]
                self._segment_name = runner.segment_name  # type: ignore[attr-defined]
                loop.events.append(
                    {"kind": "_runner", "segment_name": self._segment_name, "seq": loop.seq,
                     "t": loop.t}
                )  # fmt: skip
        self.words[W.LOOP_HEARTBEAT] = loop.cycles

    def _new_runner(self, runner: Any) -> None:
        """A runner was switched in or out: a transition's cycle (may allocate)."""
        self._runner = runner
        st = self.status
        for _name, index in RUNNER_FIELDS:
            st[index] = float("nan")
        st[S.RUNNER_ACTIVE] = 0.0 if runner is None else 1.0
        self._runner_fields = [
            (name, index)
            for name, index in RUNNER_FIELDS
            if isinstance(getattr(runner, name, None), int | float)
        ]
        name = getattr(runner, "segment_name", None)
        self._follow_name = isinstance(name, str)
        self._segment_name = name if self._follow_name else None
        if runner is not None:
            self.loop.events.append(
                {"kind": "_runner", "runner": type(runner).__name__, "segment_name": name,
                 "seq": self.loop.seq, "t": self.loop.t}
            )  # fmt: skip

    def service_lost(self, why: str, age_ns: int) -> None:
        """The service is gone or frozen: valves null now, FAULT latched, then one more cycle
        — the null cycle, whose row (state FAULT, fault PROCESS_LOST, null commands) ends
        every recording of this run — and the loop ends (`__call__`)."""
        if self.reason == StopReason.SERVICE_LOST:
            return
        self._lost_why = ""
        self.reason = StopReason.SERVICE_LOST
        self.lost_why = why
        loop = self.loop
        loop.backend.write_null()
        # A transition, not the steady state: the one log line says why the rig stopped.
        log.error("valves nulled, loop stopping: %s (seq %d)", why, loop.seq)
        if loop.state not in LATCHED_STATES:
            info = TripInfo(Trip.PROCESS_LOST, why, age_ns * 1e-6, self.timeout_ns * 1e-6)
            loop._enter_latched(State.FAULT, info)
        self.write_status()

    def on_pdeathsig(self, _signum: int, _frame: object) -> None:
        # Also sent when the *thread* that started us exits: only a changed parent is a death.
        if os.getppid() != self.parent_pid:
            self._lost_why = "service process gone (parent death signal)"

    def on_sigterm(self, _signum: int, _frame: object) -> None:
        if self.reason == StopReason.NONE:
            self.reason = StopReason.SIGNAL
        self.loop.stop()

    def wait_for_go(self) -> None:
        """Before the first cycle: until the service says go (or stops, or dies). Only the
        service's death counts here, not a late heartbeat: while it starts (imports, binding
        sockets, opening the run file) its heartbeat thread may wait for the interpreter lock,
        and the valves are null anyway until the loop runs."""
        words = self.words
        while not words[W.GO] and not words[W.STOP] and self.reason == StopReason.NONE:
            if self._lost_why or os.getppid() != self.parent_pid:
                self.service_lost(
                    self._lost_why or "service process gone before the first cycle", 0
                )
                return
            time.sleep(GO_POLL_S)
        # The heartbeat is watched from the first cycle on, counted from now.
        words[W.SERVICE_HEARTBEAT_NS] = max(int(words[W.SERVICE_HEARTBEAT_NS]), time.monotonic_ns())

    def _wait_for_readers(self) -> None:
        """Virtual time only: the loop outruns any reader, so it waits while the recorder is
        half a ring behind rather than lap it (real time never waits: readers lose rows)."""
        ring, words = self.loop.ring, self.words
        while ring.published - int(words[W.LOW_WATER]) > self.half_ring:
            if words[W.STOP] or words[W.LOW_WATER] < 0 or self.reason != StopReason.NONE:
                return
            age = time.monotonic_ns() - int(words[W.SERVICE_HEARTBEAT_NS])
            if age > self.timeout_ns or self._lost_why:
                self.service_lost(self._lost_why or "service heartbeat stale", age)
                return
            time.sleep(BACKPRESSURE_SLEEP_S)


def _set_parent_death_signal(sig: int) -> None:
    name = ctypes.util.find_library("c")
    if name is None:
        return
    libc = ctypes.CDLL(name, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def main(spec: LoopSpec) -> None:
    """Entry point of the loop process (`multiprocessing` target). Exit code: 0 ended in
    order, 1 loop error, 2 could not start."""
    logging.basicConfig(
        level=spec.log_level, format=f"rig-loop[{os.getpid()}] %(levelname)s %(name)s: %(message)s"
    )
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the service coordinates the stop
    link = LoopLink.attach(spec.link_name, spec.bins_us)
    words = link.words
    words[W.LOOP_PID] = os.getpid()
    events = EventWriter(link)
    ring = SampleRing.attach(spec.ring_name, spec.ring_capacity, spec.ring_width)
    backend: Backend | None = None
    try:
        backend = spec.backend_factory(spec.profile)
        if spec.virtual_time and backend.paced_by_hardware:
            raise BackendError("--virtual-time needs a simulated backend, not hardware")
        backend.open()
        backend.start()
        loop = Loop(
            spec.profile,
            backend,
            hold=spec.hold,
            virtual_time=spec.virtual_time,
            spin_us=spec.spin_us,
            ring=ring,
        )
        if spec.calibration is not None:
            loop.preset_calibration(spec.calibration)
        loop.warm_up()
        # Shown at every start: the compiled kernels were loaded (or compiled, the first time
        # after an install or an upgrade) before the loop can arm (docs/loop.md).
        print(
            f"rig-loop: cycle path {'compiled' if loop.compiled else 'python'}"
            + (f", kernels ready in {loop.compile_s:.2f} s" if loop.compiled else ""),
            file=sys.stderr,
            flush=True,
        )
    except Exception as exc:  # BackendError, OSError, ValueError: reported, not raised
        events.append({"kind": "_error", "stage": "start", "message": str(exc) or repr(exc)})
        if backend is not None:
            backend.close()
        words[W.FINISHED] = 3
        sys.exit(2)
    loop.mailbox = server = ShmMailboxServer(link, spec.lock)
    loop.events = events
    # The timing histograms live in the segment: the service computes percentiles from them.
    loop.timing.wake_hist = link.wake_hist
    loop.timing.compute_hist = link.compute_hist
    loop.timing.between_hist = link.between_hist
    writer = LinkWriter(loop, link, spec)
    loop.after_cycle = writer
    server.before_reply = writer.write_status
    signal.signal(signal.SIGTERM, writer.on_sigterm)
    signal.signal(signal.SIGUSR1, writer.on_pdeathsig)
    _set_parent_death_signal(signal.SIGUSR1)
    if os.getppid() != spec.parent_pid:  # died before the signal was armed
        writer.service_lost("service process gone before the loop started", 0)
    settings = spec.rt_settings
    if settings is not None:
        loop.rt_setup = lambda: events.append(
            {"kind": "_rt", "report": rt.apply(settings).to_dict()}
        )
    writer.write_status()
    words[W.READY] = 1
    writer.wait_for_go()
    code = 0
    link.status[S.STARTED_NS] = time.monotonic_ns()
    try:
        loop.run(spec.duration)
        if writer.reason == StopReason.NONE:
            writer.reason = StopReason.DURATION
    except LoopError as exc:
        writer.reason = StopReason.LOOP_ERROR
        events.append({"kind": "_error", "stage": "loop", "message": str(exc)})
        code = 1
    finally:
        backend.close()  # null first (every backend's close nulls), then release
        writer.write_status()
        link.status[S.STARTED_NS] = loop.started_ns
        link.status[S.STOPPED_NS] = loop.stopped_ns
        words[W.STOP_REASON] = writer.reason
        words[W.FINISHED] = 2 if code else 1
    if spec.orphan_hook is not None and os.getppid() != spec.parent_pid:
        # The service died (not merely froze: then it records the null cycle itself when it
        # wakes): close the run file it was writing, from the ring (daq/recording/salvage.py).
        spec.orphan_hook(link, ring, f"service process lost: {writer.lost_why or 'died'}")
    sys.exit(code)
