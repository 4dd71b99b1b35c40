"""The service's handle on the loop process (issue 15): start it, talk to it, watch it die.

`LoopProcess` offers what the service used of the in-thread `daq.loop.Loop` — `ring`, `layout`,
`request()`, `status()`, `state`, `seq`, `fault`, `timing`, `cycles`, `finished`, `error`,
`drain_events()`, `start/stop/join` — so the command handler, housekeeping, recorder and
telemetry publisher work unchanged on either. Everything crosses in shared memory
(`daq.loop.shared_link`, `daq.ring`, `daq.loop.shm_mailbox`); see docs/architecture.md.

One supervisor thread (`rig-loop-supervisor`) does two jobs every `SUPERVISE_PERIOD_S`:
- writes the service's heartbeat (and, in virtual time, the recorder's position, so the loop
  waits for it rather than lap it);
- waits on the process's sentinel (a pipe the kernel closes when the process ends, the portable
  equivalent of `os.pidfd_open`): when the loop process ends without having finished in order
  (SIGKILL, a crash in C code, the OOM killer), the valves are nulled through a fresh backend
  handle (`Backend.null_outputs_after_crash`), a FAULT (PROCESS_LOST) is recorded as an event,
  logged, put in `status`, and told to systemd (STATUS=).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait as wait_for
from pathlib import Path
from typing import Any

import numpy as np

from daq.backends.base import Backend, BackendError
from daq.loop import DEFAULT_RING_CAPACITY, LoopError
from daq.loop import realtime as rt
from daq.loop.cycle import Loop, compiled_by_default, status_dict
from daq.loop.interlocks import Trip, TripInfo
from daq.loop.kernel import compile_all
from daq.loop.mailbox import MailboxError, MailboxTimeout, Request
from daq.loop.process_main import LoopSpec, main
from daq.loop.shared_link import RUNNER_FIELDS, EventReader, LoopLink, S, StopReason, W
from daq.loop.shm_mailbox import ShmMailboxClient
from daq.loop.states import State
from daq.loop.station import station_dict
from daq.loop.timing import DEFAULT_BINS_US, LoopTiming
from daq.profile.schema import Profile
from daq.ring import SampleRing
from daq.sample_layout import SampleLayout
from daq.station.power import initial
from daq.station.shunt import names as shunt_names

log = logging.getLogger("daq.service")

SUPERVISE_PERIOD_S = 0.05
#: The heartbeat helper process (daq/heartbeat.py): its period, and how long the loop's cycle
#: counter may stand still (real time) before it reports the loop stalled.
HELPER_PERIOD_S = 0.05
LOOP_STALL_NOTICE_S = 0.5
#: Virtual time: the loop process waits for the recorder through the low-water word, so it is
#: refreshed more often (the loop may publish half a ring between two refreshes).
SUPERVISE_PERIOD_VIRTUAL_S = 0.01
#: How long `start()` waits for the loop process to open its backend and warm up.
START_TIMEOUT_S = 60.0
#: Keys of the loop's `_runner` event that are not the runner's progress (status' `runner`).
_NOT_PROGRESS = ("kind", "seq", "t")


class LoopProcessError(RuntimeError):
    """The loop process could not start (its backend would not open, …)."""


class LoopProcess:
    def __init__(
        self,
        profile: Profile,
        backend_factory: Callable[[Profile], Backend],
        *,
        hold: Any = None,
        virtual_time: bool = False,
        ring_capacity: int = DEFAULT_RING_CAPACITY,
        spin_us: float = 0.0,
        rt_settings: rt.RtSettings | None = None,
        heartbeat_helper: bool = True,
    ) -> None:
        """`heartbeat_helper`: the service's heartbeat also comes from a helper process that
        needs no interpreter lock of this one (daq/heartbeat.py); False leaves it to the
        supervisor thread alone (`rig-daq --python-heartbeat-only`, for comparison)."""
        self.profile = profile
        self.heartbeat_helper = heartbeat_helper
        self._helper: subprocess.Popen[bytes] | None = None
        self.backend_factory = backend_factory
        self.hold = hold
        self.virtual_time = virtual_time
        self.spin_us = spin_us
        self.rt_settings = rt_settings
        self.period = profile.period
        self.layout = SampleLayout.from_profile(profile)
        self.ring = SampleRing.create_shared(ring_capacity, self.layout.width)
        self.link = LoopLink.create(DEFAULT_BINS_US)
        self.heartbeat_timeout_s = profile.interlocks.service_heartbeat_ms * 1e-3
        self._ctx = multiprocessing.get_context("spawn")
        self._lock = self._ctx.Lock()
        self._process: Any = None
        self._pid: int | None = None
        self._exit_code: int | None = None
        self.mailbox = ShmMailboxClient(self.link, self._lock, alive=self.is_alive)
        self._events = EventReader(self.link)
        self._events_lock = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self._fault: TripInfo | None = None
        self._runner: dict[str, Any] | None = None
        self._lost_state: State | None = None  # FAULT once the process died without finishing
        self.rt_report: dict[str, list[str]] | None = None
        self.finished = threading.Event()
        self._ready = threading.Event()
        self.error: BaseException | None = None
        #: Recorder's next row (virtual time: the loop waits rather than lap it); None = none.
        self.low_water: Callable[[], int | None] | None = None
        #: Called after a crash has been handled (the service tells systemd).
        self.on_crash: Callable[[str], None] | None = None
        #: Given to the loop process: closes the run file if this process dies
        #: (`daq.recording.salvage.salvage_from_loop`; set by the service before `prepare`).
        self.orphan_hook: Callable[[LoopLink, SampleRing, str], None] | None = None
        self.crash_report: dict[str, Any] | None = None
        self._timing = LoopTiming(self.period)
        self._timing.wake_hist = self.link.wake_hist
        self._timing.compute_hist = self.link.compute_hist
        self._timing.between_hist = self.link.between_hist
        self._stop_supervisor = threading.Event()
        self._supervisor: threading.Thread | None = None
        #: The calibration in force from the first cycle (`preset_calibration`).
        self.calibration: Any = None
        self._beat()

    def preset_calibration(self, swap: Any) -> None:
        """Before `prepare()`: the loop process applies it before its first cycle."""
        self.calibration = swap

    # ------------------------------------------------------------------ life cycle

    @property
    def pid(self) -> int | None:
        return self._pid

    def warm_up(self) -> None:
        """The loop process warms its own backend up before it reports ready."""

    def prepare(self, duration: float | None = None) -> None:
        """Spawn the loop process and wait until its backend is open and warm (or it fails).
        It then waits for `start()` before its first cycle, so that the service can bind its
        sockets and start recording knowing the loop is there, and still record from the
        first cycle."""
        if self._process is not None:
            return
        if compiled_by_default():
            # A cold kernel cache compiles here, in the service, where no start deadline runs;
            # the loop process then loads the kernels from the disk cache (docs/loop.md).
            log.info("compiled cycle: kernels ready in %.2f s (service)", compile_all())
        spec = LoopSpec(
            profile=self.profile,
            backend_factory=self.backend_factory,
            hold=self.hold,
            virtual_time=self.virtual_time,
            spin_us=self.spin_us,
            rt_settings=self.rt_settings,
            ring_name=self.ring.shm.name,  # type: ignore[union-attr]
            ring_capacity=self.ring.capacity,
            ring_width=self.ring.width,
            link_name=self.link.name,
            bins_us=self.link.bins_us,
            lock=self._lock,
            parent_pid=os.getpid(),
            heartbeat_timeout_s=self.heartbeat_timeout_s,
            duration=duration,
            calibration=self.calibration,
            log_level=logging.getLogger().getEffectiveLevel(),
            orphan_hook=self.orphan_hook,
        )
        self._beat()
        if self.heartbeat_helper:
            self._start_helper()
        self._process = self._ctx.Process(target=main, args=(spec,), name="rig-loop", daemon=False)
        self._process.start()
        self._pid = self._process.pid
        self._supervisor = threading.Thread(
            target=self._supervise, name="rig-loop-supervisor", daemon=True
        )
        self._supervisor.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        words = self.link.words
        while not words[W.READY]:
            if words[W.FINISHED] or not self._process.is_alive() or time.monotonic() > deadline:
                self._process.join(5.0)
                self._drain()
                raise LoopProcessError(self._start_error())
            time.sleep(0.005)

    def _start_helper(self) -> None:
        """The heartbeat helper (daq/heartbeat.py): a script on the standard library only
        (-I -S: no site, no daq imports), so it starts in milliseconds."""
        script = Path(__file__).resolve().parents[1] / "heartbeat.py"
        words = ",".join(
            str(int(w))
            for w in (W.SERVICE_HEARTBEAT_NS, W.LOOP_HEARTBEAT, W.LOOP_PID, W.GO, W.FINISHED,
                      W.LOOP_STALLED_NS, W.STOP)
        )  # fmt: skip
        stall = 0.0 if self.virtual_time else LOOP_STALL_NOTICE_S
        self._helper = subprocess.Popen(
            [sys.executable, "-I", "-S", str(script), self.link.name, str(os.getpid()),
             str(HELPER_PERIOD_S), str(stall), words],
            stdin=subprocess.DEVNULL,
            close_fds=True,
        )  # fmt: skip

    def _stop_helper(self) -> None:
        helper, self._helper = self._helper, None
        if helper is not None and helper.poll() is None:
            helper.terminate()
            try:
                helper.wait(5.0)
            except subprocess.TimeoutExpired:
                helper.kill()
                helper.wait(5.0)

    def start(self, duration: float | None = None) -> None:
        """Let the loop run (spawning it first if `prepare` was not called)."""
        self.prepare(duration)
        self.link.words[W.GO] = 1
        self._ready.set()

    def _start_error(self) -> str:
        if isinstance(self.error, LoopProcessError):
            return str(self.error)
        code = self._process.exitcode if self._process is not None else None
        return f"the loop process did not start (exit code {code})"

    def stop(self) -> None:
        self.link.words[W.STOP] = 1

    def join(self, timeout: float | None = None) -> bool:
        if self._process is None:
            return True
        if not self.finished.wait(timeout):
            return False
        return True

    def kill(self) -> None:
        """Last resort at shutdown (the process would not stop): SIGKILL; the supervisor then
        nulls the valves through a fresh handle."""
        if self._process is not None and self._process.is_alive():
            os.kill(self._process.pid, signal.SIGKILL)

    def is_alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def close(self) -> None:
        """Stop supervising and remove the shared segments' names (after the readers stopped)."""
        self._stop_supervisor.set()
        self._stop_helper()
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(5.0)
        if self._process is not None:
            self._process.join(5.0)
            if self._process.exitcode is not None:
                self._exit_code = self._process.exitcode
                self._process.close()  # its sentinel pipe; a later GC would warn (ResourceWarning)
                self._process = None
        self.ring.unlink()
        self.link.unlink()

    # ------------------------------------------------------------------ supervisor thread

    def _beat(self) -> None:
        words = self.link.words
        words[W.SERVICE_HEARTBEAT_NS] = time.monotonic_ns()
        if self.virtual_time:
            position = self.low_water() if self.low_water is not None else None
            words[W.LOW_WATER] = -1 if position is None else position

    def _supervise(self) -> None:
        sentinel = self._process.sentinel
        period = SUPERVISE_PERIOD_VIRTUAL_S if self.virtual_time else SUPERVISE_PERIOD_S
        stalled_logged = 0
        while not self._stop_supervisor.is_set():
            self._beat()
            stalled = int(self.link.words[W.LOOP_STALLED_NS])
            if stalled != stalled_logged:  # the helper saw the loop stop cycling (or resume)
                stalled_logged = stalled
                if stalled:
                    log.error(
                        "the loop process stopped cycling (noticed by the heartbeat helper "
                        "%.0f ms ago)", (time.monotonic_ns() - stalled) * 1e-6
                    )  # fmt: skip
            if wait_for([sentinel], timeout=period):
                self._beat()
                self._on_exit()
                return

    def _on_exit(self) -> None:
        self._process.join()
        self._drain()
        words = self.link.words
        finished, code = int(words[W.FINISHED]), self._process.exitcode
        if finished in (1, 2) and code in (0, 1):
            if finished == 2 and self.error is None:
                self.error = LoopError("the loop process ended by a loop error")
            reason = StopReason(int(words[W.STOP_REASON]))
            if reason == StopReason.SERVICE_LOST:
                # This process is alive but was not heard from in time (starved, stopped): the
                # loop has nulled the valves and ended; rig-daq exits 1 and systemd restarts it.
                fault = self.fault
                why = fault.where if fault is not None else "service heartbeat lost"
                log.error("the loop process stopped itself (valves null): %s", why)
                self.error = LoopError(f"the loop process stopped itself: {why}")
        elif finished != 3:
            self._crashed(code)
        self.finished.set()
        self._ready.set()  # wakes a request waiting for the start: it sees `finished`

    def _crashed(self, code: int | None) -> None:
        how = f"killed by {signal.Signals(-code).name}" if code and code < 0 else f"exit {code}"
        what = f"loop process {self._pid} died ({how})"
        log.error("%s: nulling the valves through a fresh backend handle", what)
        previous = self.state
        with self._events_lock:  # `status` says FAULT at once, not after the nulling (~1 s)
            self._fault = TripInfo(Trip.PROCESS_LOST, what, 0.0, 0.0, self.seq, self.t)
            self._lost_state = State.FAULT
        try:
            done = self.backend_factory(self.profile).null_outputs_after_crash()
        except (BackendError, OSError, RuntimeError) as exc:
            done = f"FAILED: {exc}"
            log.critical("could not null the valves after the loop process died: %s", exc)
        log.error("valves after the loop process died: %s", done)
        seq, t = self.write_null_row(not done.startswith("FAILED"))
        info = TripInfo(Trip.PROCESS_LOST, what, 0.0, 0.0, seq, t)
        with self._events_lock:
            self._fault = info
            self._lost_state = State.FAULT
            self._pending.append(
                {
                    "kind": "fault",
                    "seq": seq,
                    "t": t,
                    **info.to_dict(),
                    "message": info.message,
                    "valves": done,
                }
            )
            if previous != State.FAULT:
                self._pending.append(
                    {
                        "kind": "state",
                        "seq": seq,
                        "t": t,
                        "state": "FAULT",
                        "previous": previous.name,
                    }
                )
        self.crash_report = {"message": what, "valves": done}
        self.error = LoopError(what)
        if self.on_crash is not None:
            self.on_crash(f"FAULT: {what}; valves: {done}")

    def write_null_row(self, nulled: bool) -> tuple[int, float]:
        """After the loop process died: publish the null cycle's row in its place, so that the
        recording and telemetry end with it — state FAULT, fault PROCESS_LOST, the null
        commands just written (NaN if nulling failed), NaN for everything not measured
        (inputs, reference, timing). The ring's writer is dead, so this process may write; a
        row the loop claimed and never published is overwritten. Returns (seq, t) of the row."""
        ring = self.ring
        ring.adopt()
        published = ring.published
        if published > 0:
            last = ring.data[(published - 1) & ring.mask]
            seq, t = int(last[0]) + 1, float(last[1]) + self.period
        else:
            seq, t = 0, 0.0
        started = float(self.link.status[S.STARTED_NS])
        if not self.virtual_time and started == started and started > 0:  # not NaN
            t = max(t, (time.monotonic_ns() - started) * 1e-9 - self.period)
        row = ring.claim()
        row.fill(np.nan)
        lay = self.layout
        row[0], row[1], row[2], row[3], row[4] = seq, t, State.FAULT, Trip.PROCESS_LOST, 0
        null = [c.null_volts for c in self.profile.outputs]
        row[lay.span("cmd")] = null if nulled else np.nan
        ring.publish()
        return seq, t

    # ------------------------------------------------------------------ events

    def _drain(self) -> None:
        """Move events from the shared FIFO to the service side (any thread)."""
        with self._events_lock:
            for ev in self._events.drain():
                kind = ev.get("kind")
                if kind == "_runner":
                    runner = dict(self._runner or {})
                    runner.update({k: v for k, v in ev.items() if k not in _NOT_PROGRESS})
                    self._runner = runner
                    # An experiment's segment boundaries go into the recording: what the
                    # batch needs to give a segment's rows to some equations only
                    # (`identify = "fluid"`, estimator.segment_rows).
                    name = ev.get("segment_name")
                    if runner.get("runner") == "ExperimentRunner" and isinstance(name, str):
                        self._pending.append(
                            {"kind": "segment", "seq": ev["seq"], "t": ev["t"], "name": name}
                        )
                    continue
                if kind == "_rt":
                    self.rt_report = ev["report"]
                    continue
                if kind == "_error":
                    message = ev.get("message", "")
                    if ev.get("stage") == "start":
                        self.error = LoopProcessError(message)
                    else:
                        self.error = LoopError(message)
                    continue
                if kind == "fault":
                    self._fault = _trip_from_event(ev)
                elif kind == "state" and ev.get("previous") in ("FAULT", "ESTOP"):
                    if ev.get("state") not in ("FAULT", "ESTOP"):
                        self._fault = None  # reset
                self._pending.append(ev)

    def drain_events(self) -> list[dict[str, Any]]:
        self._drain()
        with self._events_lock:
            out, self._pending = self._pending, []
        return out

    # ------------------------------------------------------------------ what the loop reports

    def request(self, kind: str, payload: Any = None, timeout: float = 1.0) -> Request:
        """Through the shared mailbox. While the loop process is still starting (the command
        socket is bound before it), wait for it within `timeout`, as the in-thread mailbox
        holds a request until the loop's first cycle."""
        deadline = time.monotonic() + timeout
        if not self._ready.wait(timeout) and not self.finished.is_set():
            raise MailboxTimeout(f"the loop process has not started yet ({kind})")
        if self.finished.is_set():
            raise MailboxError(f"the loop process is not running ({kind})")
        return self.mailbox.call(kind, payload, max(deadline - time.monotonic(), 0.001))

    @property
    def state(self) -> State:
        if self._lost_state is not None:
            return self._lost_state
        return State(int(self.link.status[S.STATE]))

    @property
    def seq(self) -> int:
        return int(self.link.status[S.SEQ])

    @property
    def t(self) -> float:
        return float(self.link.status[S.T])

    @property
    def cycles(self) -> int:
        return int(self.link.words[W.LOOP_HEARTBEAT])

    @property
    def fault(self) -> TripInfo | None:
        st = self.link.status
        code = st[S.FAULT_CODE]
        if code and (self._fault is None or self._fault.code != code):
            self._drain()  # the fault event is in the FIFO already (stores in that order)
        if self._lost_state is None and not st[S.FAULT_CODE]:
            return None
        return self._fault

    @property
    def timing(self) -> LoopTiming:
        """The loop's timing statistics as of now (counters copied from the status block,
        histograms shared)."""
        st, tm = self.link.status, self._timing
        tm.cycles = int(st[S.CYCLES])
        tm.overruns = int(st[S.OVERRUNS])
        tm.consecutive_overruns = int(st[S.CONSECUTIVE_OVERRUNS])
        tm.max_consecutive_overruns = int(st[S.MAX_CONSECUTIVE_OVERRUNS])
        tm.skipped = int(st[S.SKIPPED])
        tm.wake_max_ns = int(st[S.WAKE_MAX_NS])
        tm.compute_max_ns = int(st[S.COMPUTE_MAX_NS])
        tm.between_max_ns = int(st[S.BETWEEN_MAX_NS])
        return tm

    def status(self) -> dict[str, Any]:
        st = self.link.status
        fault = self.fault
        started, stopped = st[S.STARTED_NS], st[S.STOPPED_NS]
        if started == started and started > 0:  # not NaN: the loop has begun
            end = stopped if stopped == stopped and stopped > 0 else time.monotonic_ns()
            wall = (end - started) * 1e-9
        else:
            wall = 0.0
        out = status_dict(
            self.state,
            fault,
            self.seq,
            self.t,
            self.virtual_time,
            wall,
            int(st[S.CLAMPED]),
            int(st[S.FLAGS]),
            self._runner_progress(),
            self.timing,
        )
        out["station"] = station_dict(
            _int_or(st[S.POWER], initial(self.profile)),
            st[S.JOGGING] == 1.0,
            shunt_names(self.profile, _int_or(st[S.SHUNT], 0)),
        )
        out["loop_process"] = self.process_status()
        return out

    def process_status(self) -> dict[str, Any]:
        words = self.link.words
        return {
            "pid": self.pid,
            "alive": self.is_alive(),
            "exit_code": self._exit_code if self._process is None else self._process.exitcode,
            "heartbeat_timeout_s": self.heartbeat_timeout_s,
            "events_dropped": int(words[W.EVENTS_DROPPED]),
            "stop_reason": StopReason(int(words[W.STOP_REASON])).name.lower(),
            "crash": self.crash_report,
            "heartbeat_helper": self.helper_status(),
        }

    def helper_status(self) -> dict[str, Any] | None:
        """The heartbeat helper: pid, alive, and when it saw the loop stop cycling or die
        (`loop_stalled_s_ago`, None while the loop cycles)."""
        helper = self._helper
        if helper is None:
            return None
        stalled = int(self.link.words[W.LOOP_STALLED_NS])
        return {
            "pid": helper.pid,
            "alive": helper.poll() is None,
            "loop_stalled_s_ago": (time.monotonic_ns() - stalled) * 1e-9 if stalled else None,
            "loop_stalled_at_ns": stalled or None,
        }

    def _runner_progress(self) -> dict[str, Any] | None:
        st = self.link.status
        if not st[S.RUNNER_ACTIVE] or self._lost_state is not None:
            return None
        self._drain()
        info = self._runner or {}
        out: dict[str, Any] = {"kind": info.get("runner", "?")}
        for name, index in RUNNER_FIELDS:
            value = float(st[index])
            if value == value:  # not NaN: the runner has it
                out[name] = int(value) if name in ("segment_index", "segment_repeats") else value
            if name == "segment_index" and isinstance(info.get("segment_name"), str):
                out["segment_name"] = info["segment_name"]
        return out

    #: Young-generation collection of the service process, for housekeeping (as the in-thread
    #: loop offers it; the loop process collects nothing after its start).
    collect_garbage = staticmethod(Loop.collect_garbage)


def _trip_from_event(ev: dict[str, Any]) -> TripInfo:
    def number(v: Any) -> float:
        return float("nan") if v is None else float(v)

    return TripInfo(
        Trip(int(ev["code"])),
        str(ev.get("where", "")),
        number(ev.get("value")),
        number(ev.get("limit")),
        int(ev.get("seq", -1)),
        number(ev.get("t")),
    )


def _int_or(x: float, default: int) -> int:
    """A status word as an int; `default` while it is still NaN (the loop has not written)."""
    return int(x) if x == x else default
