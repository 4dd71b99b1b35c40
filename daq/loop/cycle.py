"""The 1 kHz loop: wait ► read ► scale ► interlocks ► controller ► write ► publish the row.

One thread runs `Loop.run()`. Per cycle it allocates nothing: the backend reads straight into
the claimed ring row's raw slice (a view made once per ring slot), scaling writes into the row's
eng slice, the runner fills preallocated per-joint arrays, and the header fields are scalar
stores. Anything rare — a command, a state change, a trip — may allocate; it happens in a cycle
or two per run, not in the steady state (tests/loop/test_alloc.py checks with tracemalloc).

Pacing, in order of preference:
- hardware-paced backend: `backend.wait_next_cycle()` blocks on the device clock and says how
  many sample clocks were missed;
- real time: absolute deadlines `start + k·period` on `time.monotonic_ns()`, never
  `sleep(period)`, so that the loop's rate does not drift with its own compute time;
- virtual time: no waiting at all; `backend.advance(period)` moves the simulated plant after the
  outputs are written, and `t = seq·period`.
A cycle that ends after the next deadline is an overrun; the deadlines already past are skipped
(counted, and `t` jumps) instead of being run back to back, which would feed the controller a
burst of stale-timed samples.

Garbage collection: after set-up the loop calls `gc.collect(); gc.freeze(); gc.disable()`.
`freeze` moves every object made during set-up (profile, buffers, views) out of the collector's
reach, so the young-generation collections that the service's housekeeping thread runs outside
the loop (`Loop.collect_garbage`) only scan what other threads made since — tens of µs that
cannot land in the middle of a cycle by surprise, as an automatic collection triggered by an
allocation threshold could. The steady-state loop allocates nothing that needs collecting.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from daq.backends.base import Backend, BackendStatus
from daq.loop.commands import EventSink, Runner
from daq.loop.feedback_map import FIELDS, FeedbackMap
from daq.loop.interlocks import STALL, Interlocks, Trip, TripInfo
from daq.loop.kernel import CHECK_FLAGS, k_rest, k_scale
from daq.loop.mailbox import Mailbox, Request
from daq.loop.states import LATCHED_STATES, LIVE_STATES, State
from daq.loop.station import LoopStation, StationCommands
from daq.loop.timing import LoopTiming
from daq.profile.schema import Profile
from daq.ring import SampleRing
from daq.sample_layout import SampleLayout
from daq.scaling import ChannelScaler

log = logging.getLogger(__name__)

#: Ring capacity: 16 s of rows at 1 kHz, the recorder's slack for a slow disk.
DEFAULT_RING_CAPACITY = 1 << 14

#: Environment variable choosing the cycle's path: "compiled" (default) or "python" (the
#: reference the compiled path must equal; docs/loop.md, "The compiled cycle").
LOOP_PATH_ENV = "HYDRIG_LOOP_PATH"


def compiled_by_default() -> bool:
    """The cycle path `HYDRIG_LOOP_PATH` asks for (compiled unless it says "python")."""
    value = os.environ.get(LOOP_PATH_ENV, "compiled").strip().lower()
    if value not in ("compiled", "python"):
        raise ValueError(f"{LOOP_PATH_ENV}={value!r}: must be 'compiled' or 'python'")
    return value == "compiled"


def status_dict(
    state: State,
    fault: TripInfo | None,
    seq: int,
    t: float,
    virtual_time: bool,
    wall_s: float,
    clamped: int,
    flags: int,
    runner: dict[str, Any] | None,
    timing: LoopTiming,
) -> dict[str, Any]:
    """What `status` reports of the loop (the loop thread's and the loop process's alike)."""
    return {
        "state": state.name,
        "fault": fault.to_dict() if fault is not None else None,
        "seq": seq,
        "t": t,
        "virtual_time": virtual_time,
        "wall_s": wall_s,
        "clamped_cycles": clamped,
        "flags": flags,
        "runner": runner,
        "timing": timing.snapshot(),
    }


class LoopError(RuntimeError):
    """The loop stopped because of an exception inside a cycle."""


class Loop(StationCommands):
    def __init__(
        self,
        profile: Profile,
        backend: Backend,
        *,
        hold: Runner | None = None,
        virtual_time: bool = False,
        ring_capacity: int = DEFAULT_RING_CAPACITY,
        spin_us: float = 0.0,
        ring: SampleRing | None = None,
        compiled: bool | None = None,
    ) -> None:
        """`ring`: where the rows go (a shared-memory ring in the loop process, issue 15);
        None makes a private one of `ring_capacity` rows. `compiled`: the cycle's numeric path
        as compiled code (None: `HYDRIG_LOOP_PATH`, compiled by default) or the Python
        reference."""
        self.profile = profile
        self.backend = backend
        self.virtual_time = virtual_time
        self.period = profile.period
        self.period_ns = round(self.period * 1e9)
        self.spin_ns = round(spin_us * 1000)
        self.layout = SampleLayout.from_profile(profile)
        if ring is None:
            ring = SampleRing(ring_capacity, self.layout.width)
        elif ring.width != self.layout.width:
            raise ValueError(f"ring rows have {ring.width} columns, the layout {self.layout.width}")
        self.ring = ring
        ring_capacity = ring.capacity
        inputs = profile.inputs
        if backend.n_inputs != len(inputs) or backend.n_outputs != len(profile.outputs):
            raise ValueError(
                f"backend has {backend.n_inputs} inputs/{backend.n_outputs} outputs, the profile "
                f"{len(inputs)}/{len(profile.outputs)}"
            )
        self.scaler = ChannelScaler(inputs)
        self.fbmap = FeedbackMap(profile)
        self.fb = self.fbmap.new_feedback()
        # The compiled cycle's feedback matrix (one row per field); `CompiledCycle` moves it
        # into its blob and binds the feedback's fields to its rows. The Python cycle fills
        # the feedback's own arrays.
        self.fbm = np.full((len(FIELDS), len(profile.joints)), np.nan)
        self.interlocks = Interlocks(profile)
        self.station = LoopStation(profile, self.interlocks)
        self.eng_now = self._eng_placeholder = np.zeros(len(inputs))
        self.timing = LoopTiming(self.period)
        #: Commands in: a `Mailbox` (loop thread in the service) or, in the loop process, a
        #: `daq.loop.shm_mailbox.ShmMailboxServer`; either way `take()` never blocks.
        self.mailbox: Any = Mailbox()
        #: State changes and trips for the recorder/telemetry, drained by the service (in the
        #: loop process: a `daq.loop.shared_link.EventWriter` with the same `append`).
        self.events: EventSink = deque(maxlen=1024)
        #: Called at the end of every cycle once the row is published (the loop process mirrors
        #: its status into shared memory and watches the service's heartbeat there).
        self.after_cycle: Callable[[], None] | None = None
        lay = self.layout
        raw_s, eng_s, cmd_s, ref_s = (lay.span(r) for r in ("raw", "eng", "cmd", "ref"))
        # Per-slot views, made once, so the cycle never creates an array.
        data = self.ring.data
        self._raw = [data[i, raw_s] for i in range(ring_capacity)]
        self._eng = [data[i, eng_s] for i in range(ring_capacity)]
        self._cmd = [data[i, cmd_s] for i in range(ring_capacity)]
        self._ref_rows = [data[i, ref_s] for i in range(ring_capacity)]
        nj = len(profile.joints)
        self.null = self.fbmap.null_volts.copy()
        self.volts = self.null.copy()  # per output channel, what is written
        self.prev_volts = self.null.copy()
        self.joint_volts = np.zeros(nj)
        self.ref = np.full(nj, np.nan)
        self.ref_prev = np.full(nj, np.nan)
        self.ref_velocity = np.zeros(nj)
        self._ref_fresh = True  # first step after enable: no reference velocity yet
        self.hold = hold
        self.active: Runner | None = None
        self.state = State.IDLE
        self.fault: TripInfo | None = None
        self.seq = 0
        self.t = 0.0
        self.last_flags = 0
        self.cycles = 0  # heartbeat for the watchdog
        self.error: BaseException | None = None
        self._pending_trip: Trip = Trip.NONE
        self._pending_where = ""
        self._pending_value = self._pending_limit = 0.0
        ilk = profile.interlocks
        # One long stall (a cycle ending `stall_ms` after its deadline) trips while the valves
        # are live; `overrun_limit = 0` switches the whole overrun interlock off.
        self.stall_ns = round(ilk.stall_ms * 1e6) if ilk.overrun_limit and ilk.stall_ms else 0
        self._stop = threading.Event()
        self.finished = threading.Event()
        self._thread: threading.Thread | None = None
        self.rt_setup: Any = None  # called in the loop thread before the first cycle
        self.started_ns = self.stopped_ns = 0  # monotonic wall clock around run()
        self.compiled = compiled_by_default() if compiled is None else bool(compiled)
        #: Seconds `warm_up` took to compile (or load from the cache) the kernels.
        self.compile_s = 0.0
        self._fast: Any = None  # the active runner's compiled twin, if it has one
        self._hold_twin: tuple[Any, Any] = (None, None)
        if self.compiled:
            from controller.compiled.runner import idle_phase
            from daq.loop.kernel import CompiledCycle

            self.kc = CompiledCycle(self)
            self._no_phase = idle_phase(len(profile.joints))
            self._cycle = self._cycle_compiled  # type: ignore[method-assign]
            # Compile (or load from the disk cache) before anything can arm: no cycle pays it.
            from daq.loop.kernel import compile_all

            self.compile_s = compile_all()
            log.info("compiled cycle: kernels ready in %.2f s", self.compile_s)

    # ------------------------------------------------------------------ public, any thread

    def start(self, duration: float | None = None) -> threading.Thread:
        self._thread = threading.Thread(
            target=self._thread_main, args=(duration,), name="rig-loop", daemon=True
        )
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def request(self, kind: str, payload: Any = None, timeout: float = 1.0) -> Request:
        """Hand a command to the loop; it acts on it at the start of its next cycle."""
        return self.mailbox.call(kind, payload, timeout)

    def status(self) -> dict[str, Any]:
        wall = (self.stopped_ns or time.monotonic_ns()) - self.started_ns if self.started_ns else 0
        out = status_dict(
            self.state,
            self.fault,
            self.seq,
            self.t,
            self.virtual_time,
            wall * 1e-9,
            self.interlocks.clamped,
            self.last_flags,
            self._runner_progress(),
            self.timing,
        )
        out["station"] = self.station.to_dict()
        return out

    def preset_calibration(self, swap: Any) -> None:
        """Before `start()`: the calibration in force from the first cycle on."""
        self.scaler.set_correction(swap.offset, swap.inv_gain)
        self.station.calibration = swap.ident

    def drain_events(self) -> list[dict[str, Any]]:
        """The events made since the last call, oldest first (the service's housekeeping)."""
        events = self.events
        assert isinstance(events, deque)
        out = []
        while events:
            out.append(events.popleft())
        return out

    def _runner_progress(self) -> dict[str, Any] | None:
        runner = self.active
        if runner is None:
            return None
        out: dict[str, Any] = {"kind": type(runner).__name__}
        for name in ("segment_index", "segment_name", "elapsed", "total_duration",
                     "time_in_segment", "segment_duration", "segment_repeats"):  # fmt: skip
            value = getattr(runner, name, None)
            if isinstance(value, int | float | str):
                out[name] = value
        return out

    def warm_up(self) -> None:
        """One read and one null write outside the loop, before timing matters: the first call
        into a backend may compile (numba) or open lazily, which must not count as overruns."""
        scratch = np.zeros(self.backend.n_inputs)
        self.backend.read(0.0, scratch)
        self.backend.write_null()
        self.backend.warm_up()
        if self.hold is not None:
            # The hold's compiled twin, built here rather than in the cycle that takes the
            # first arm (~0.4 ms: two skipped cycles at 4 kHz). A hold that cannot be built
            # is refused by that arm, naming why; here it is only logged.
            try:
                self._compile_runner(self.hold)
            except Exception as exc:
                log.warning("the hold's compiled twin could not be built: %r", exc)

    def _compile_runner(self, runner: Any) -> Any:
        """The compiled twin of a runner being switched in (None: it runs on the Python path)."""
        if not self.compiled:
            return None
        from controller.compiled.runner import compile_runner

        if runner is self._hold_twin[0]:
            return self._hold_twin[1]
        fast = compile_runner(runner)
        if runner is self.hold:
            self._hold_twin = (runner, fast)
        return fast

    @staticmethod
    def collect_garbage() -> None:
        """Young-generation collection, for the housekeeping thread (never the loop)."""
        gc.collect(1)

    # ------------------------------------------------------------------ the loop thread

    def _thread_main(self, duration: float | None) -> None:
        try:
            self.run(duration)
        except BaseException as exc:  # recorded for the service's exit code
            self.error = exc

    def run(self, duration: float | None = None) -> None:
        """Run cycles until `stop()` or `duration` seconds of loop time; outputs null at exit."""
        if self.rt_setup is not None:
            self.rt_setup()
        end_k = None if duration is None else max(0, round(duration / self.period))
        gc.collect()
        gc.freeze()
        gc_was_enabled = gc.isenabled()
        gc.disable()
        self.started_ns = time.monotonic_ns()
        try:
            if self.backend.paced_by_hardware and not self.virtual_time:
                self._run_hardware(end_k)
            elif self.virtual_time:
                self._run_virtual(end_k)
            else:
                self._run_realtime(end_k)
        except BaseException as exc:
            self.backend.write_null()
            self._enter_latched(State.FAULT, TripInfo(Trip.LOOP_ERROR, repr(exc), 0.0, 0.0))
            log.exception("loop stopped by an exception in cycle %d", self.seq)
            raise LoopError(f"cycle {self.seq}: {exc!r}") from exc
        finally:
            self.backend.write_null()
            self.stopped_ns = time.monotonic_ns()
            if gc_was_enabled:
                gc.enable()
            self.finished.set()

    def _run_virtual(self, end_k: int | None) -> None:
        period, timing, advance = self.period, self.timing, self.backend.advance
        k = 0
        while not self._stop.is_set() and (end_k is None or k < end_k):
            timing.record(0, self._cycle(self.seq * period, 0))
            advance(period)
            k += 1

    def _run_realtime(self, end_k: int | None) -> None:
        period_ns, timing, spin_ns = self.period_ns, self.timing, self.spin_ns
        clock, sleep, between = time.monotonic_ns, time.sleep, self.backend.between_cycles
        start = clock() + period_ns
        k = 0
        while not self._stop.is_set() and (end_k is None or k < end_k):
            deadline = start + k * period_ns
            now = clock()
            # Sleep to the deadline (minus the spin margin) and spin the rest. Python's
            # time.sleep is clock_nanosleep on CLOCK_MONOTONIC; with SCHED_FIFO and 1 ns timer
            # slack it wakes within the kernel's latency (10–30 µs here). Spinning the last
            # `spin_us` hides that and the interpreter's wake-up cost for ~15 % of a CPU; the
            # service spins 150 µs (daq/service/rig_service.py DEFAULT_SPIN_US;
            # bench/loop_timing.py).
            if deadline - now > spin_ns:
                sleep((deadline - now - spin_ns) * 1e-9)
            now = clock()
            while now < deadline:
                now = clock()
            timing.record(now - deadline, self._cycle((deadline - start) * 1e-9, now - deadline))
            k += 1
            # The rig's share of the period (the simulated plant's step) after the outputs
            # are written: it counts towards an overrun, not towards the cycle's compute.
            b0 = clock()
            between(k * period_ns * 1e-9)
            end = clock()
            timing.record_between(end - b0)
            late = end - (start + k * period_ns)
            if late > 0:
                missed = late // period_ns + 1
                k += missed
                self._overrun(missed, late + period_ns)
            else:
                timing.record_on_time()

    def _run_hardware(self, end_k: int | None) -> None:
        period_ns, timing, clock = self.period_ns, self.timing, time.monotonic_ns
        wait, between = self.backend.wait_next_cycle, self.backend.between_cycles
        k = -1
        first = 0
        while not self._stop.is_set() and (end_k is None or k + 1 < end_k):
            missed = wait()
            now = clock()
            k += 1 + missed
            if first == 0:
                first = now - k * period_ns
            if missed > 0:
                self._overrun(missed, missed * period_ns)
            else:
                timing.record_on_time()
            # Wake latency against the device clock as seen on the monotonic clock (drift
            # between the two is negligible over the statistics window).
            wake = max(0, now - (first + k * period_ns))
            timing.record(wake, self._cycle(k * self.period, wake))
            b0 = clock()
            between((k + 1) * self.period)
            timing.record_between(clock() - b0)

    def _overrun(self, missed: int, late_ns: int) -> None:
        """`late_ns`: how long after its own deadline the late cycle ended."""
        run = self.timing.record_overrun(missed)
        limit = self.profile.interlocks.overrun_limit
        if self.state in LATCHED_STATES or self._pending_trip:
            return
        if self.stall_ns and late_ns > self.stall_ns and self.state in LIVE_STATES:
            self._pending_trip = Trip.OVERRUN
            self._pending_where = STALL
            self._pending_value, self._pending_limit = late_ns * 1e-6, self.stall_ns * 1e-6
        elif limit and run >= limit:
            self._pending_trip = Trip.OVERRUN
            self._pending_where = ""
            self._pending_value, self._pending_limit = float(run), float(limit)

    # ------------------------------------------------------------------ one cycle

    def _cycle(self, t: float, wake_ns: int) -> int:
        """One cycle at loop time `t`; returns its compute time (read → outputs written), ns."""
        ring, backend, il = self.ring, self.backend, self.interlocks
        c0 = time.monotonic_ns()
        slot = ring.claim_slot()  # the row it held is gone from here on (daq/ring.py)
        raw, eng = self._raw[slot], self._eng[slot]
        self.t = t
        il.begin_cycle()
        if backend.read(t, raw) != BackendStatus.OK and self.profile.interlocks.backend_error:
            il.trip(Trip.BACKEND_READ, "read returned ERROR")
        self.scaler.scale(raw, eng)
        self.fbmap.fill(eng, self.fb, t)
        self.eng_now = eng
        if self._pending_trip:
            il.trip(
                self._pending_trip, self._pending_where, self._pending_value, self._pending_limit
            )
            self._pending_trip = Trip.NONE
        req = self.mailbox.take()
        if req is not None:
            self._handle(req)
        il.check_inputs(eng, backend.channel_fault)
        self._station_cycle(eng)
        if self.state in LIVE_STATES:
            il.check_position(self.fb.q)
            if il.first is None:
                self._step_runner()
        return self._finish_cycle(t, wake_ns, slot, c0)

    def _cycle_compiled(self, t: float, wake_ns: int) -> int:
        """`_cycle` with its numeric path in two compiled calls (daq/loop/kernel.py: `k_scale`
        before the commands, `k_rest` after them); the rare paths are the same Python."""
        ring, backend, il, kc = self.ring, self.backend, self.interlocks, self.kc
        c0 = time.monotonic_ns()
        slot = ring.claim_slot()
        row = ring.rows[slot]
        self.t = t
        il.flags = 0
        il.first = None
        if backend.read(t, self._raw[slot]) != BackendStatus.OK:
            if self.profile.interlocks.backend_error:
                il.trip(Trip.BACKEND_READ, "read returned ERROR")
        k_scale(row, kc.F, kc.I)
        self.fb.t = t
        self.eng_now = self._eng[slot]
        if self._pending_trip:
            il.trip(
                self._pending_trip, self._pending_where, self._pending_value, self._pending_limit
            )
            self._pending_trip = Trip.NONE
        req = self.mailbox.take()
        if req is not None:
            self._handle(req)
        live = self.state in LIVE_STATES
        st, fast = self.station, self._fast
        if st.jogging or st.draining or (live and fast is None):
            # A runner without a compiled twin (a jog, a drain): this cycle's checks in Python.
            il.check_inputs(self.eng_now, backend.channel_fault)
            self._station_cycle(self.eng_now)
            if live:
                il.check_position(self.fb.q)
                if il.first is None:
                    self._step_runner()
        else:
            step = live and il.first is None
            running = True
            if step:
                try:
                    running = fast.prepare(self.fb)  # phase changes (rare)
                except Exception as exc:  # as `_step_runner`: valves null, the loop goes on
                    il.trip(Trip.CONTROLLER_ERROR, f"step: {exc!r}")
                    step = False
            phase = fast.phase if step else self._no_phase
            tr = fast.tr if step else 0.0
            try:
                flags = k_rest(row, kc.F, kc.I, backend.channel_fault, live, step, tr, phase.tkind,
                               phase.coef, phase.law.lb, self._ref_fresh)  # fmt: skip
            except Exception as exc:  # a compiled law's ZeroDivisionError, as in Python
                il.trip(Trip.CONTROLLER_ERROR, f"step: {exc!r}")
                flags = 0
                step = False
            if flags:
                kc.record(flags, st.supply_name)
            if step and not flags & CHECK_FLAGS:
                fast.advance()
                self._ref_fresh = False
                if not running and self.state == State.RUNNING and il.first is None:
                    self._experiment_done()
        return self._finish_cycle(t, wake_ns, slot, c0)

    def _finish_cycle(self, t: float, wake_ns: int, slot: int, c0: int) -> int:
        """Both paths' end of a cycle: a pending trip latches, the valves are written (null
        unless live), the row's header, command and reference go into the ring's slot, and the
        slot is published. Returns the cycle's compute time (ns)."""
        ring, backend, il, volts = self.ring, self.backend, self.interlocks, self.volts
        if il.first is not None and self.state not in LATCHED_STATES:
            self._enter_latched(State.FAULT, il.first)
        # Once a stop is asked for, the valves get null: a cycle that was stuck in a driver call
        # past the service's shutdown (which has nulled the valves and closed the backend) must
        # not command them again when the call returns.
        if self.state not in LIVE_STATES or self._stop.is_set():
            np.copyto(volts, self.null)
        if backend.write(t, volts) != BackendStatus.OK:
            backend.write_null()
            np.copyto(volts, self.null)
            if self.profile.interlocks.backend_error and self.state not in LATCHED_STATES:
                il.trip(Trip.BACKEND_WRITE, "write returned ERROR")
                self._enter_latched(State.FAULT, il.first)  # type: ignore[arg-type]
        np.copyto(self.prev_volts, volts)
        compute = time.monotonic_ns() - c0
        row = ring.rows[slot]
        row[0] = self.seq
        row[1] = t
        row[2] = self.state
        fault = self.fault
        row[3] = 0 if fault is None else fault.code
        row[4] = il.flags
        row[5] = wake_ns * 1e-9
        row[6] = compute * 1e-9
        np.copyto(self._cmd[slot], volts)
        np.copyto(self._ref_rows[slot], self.ref)
        self.last_flags = il.flags
        ring.publish()
        self.seq += 1
        self.cycles += 1
        if self.after_cycle is not None:
            self.after_cycle()
        return compute

    def _step_runner(self) -> None:
        runner = self.active
        if runner is None:  # cannot happen by construction; never drive valves without a law
            self.interlocks.trip(Trip.CONTROLLER_ERROR, "no active runner in a live state")
            return
        try:  # free when nothing is raised (CPython 3.11 zero-cost exceptions)
            running = runner.step(self.fb, self.ref, self.joint_volts)
        except Exception as exc:
            # A broken control law must not take the safety layer down with it: the valves go
            # to null in this cycle and the loop keeps reading, recording and answering.
            self.interlocks.trip(Trip.CONTROLLER_ERROR, f"step: {exc!r}")
            return
        self.fbmap.to_channels(self.joint_volts, self.volts)
        if self._ref_fresh:
            self.ref_velocity.fill(0.0)
            self._ref_fresh = False
        else:
            np.subtract(self.ref, self.ref_prev, out=self.ref_velocity)
            np.multiply(self.ref_velocity, 1.0 / self.period, out=self.ref_velocity)
        np.copyto(self.ref_prev, self.ref)
        self.interlocks.check_following(self.fb.q, self.ref, self.ref_velocity)
        self.interlocks.limit_outputs(self.volts, self.prev_volts)
        if not running and self.state == State.RUNNING and self.interlocks.first is None:
            self._experiment_done()

    def _experiment_done(self) -> None:
        """The experiment's last step ran: back to ARMED, the hold holding the experiment's
        last reference — where the rig was told to be — rather than the angle measured in that
        cycle, which on a ringing arm is a peak of the ringing (MTS's "hold at the last
        command"). A hold without that option holds the measured angle."""
        self._event("experiment_done")
        self._set_state(State.ARMED)
        hold_at = getattr(self.hold, "hold_next_at", None)
        if hold_at is not None and np.all(np.isfinite(self.ref)):
            hold_at(self.ref)
        self._hold_or_fault()
