"""The loop's rare paths: commands from the mailbox, state changes, runner switches, latching.

Split from `daq.loop` (the per-cycle path) because none of this runs in the steady state: each
method here runs in the cycle that handles a command or a trip, may allocate (an event dict, a
`TripInfo`) and is never on the path of an ordinary cycle. All of it runs on the loop thread.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from controller.feedback import Feedback
from daq.loop.interlocks import CLAMP_FLAG, Interlocks, Trip, TripInfo, describe_flags
from daq.loop.mailbox import Request
from daq.loop.states import Action, State, TransitionError, next_state
from daq.loop.timing import LoopTiming

#: Requests the station handles (`daq.loop.station.StationCommands._handle_station`).
STATION_COMMANDS = frozenset({"power", "jog", "calibration", "drain", "shunt"})


class EventSink(Protocol):
    """Where `_event` puts events: a bounded deque, or the shared-memory FIFO of the loop
    process (`daq.loop.shared_link.EventWriter`)."""

    def append(self, event: dict[str, Any], /) -> None: ...


class Runner(Protocol):
    """What the loop drives (`controller.runner.HoldRunner`/`ExperimentRunner` implement it)."""

    def enable(self, fb: Feedback) -> None: ...

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool: ...

    def disable(self) -> None: ...


class LoopCommands:
    """Mixin of `daq.loop.Loop`: the attributes below are created by `Loop.__init__`."""

    fb: Feedback
    ref: np.ndarray
    volts: np.ndarray
    null: np.ndarray
    hold: Runner | None
    active: Runner | None
    state: State
    fault: TripInfo | None
    seq: int
    t: float
    last_flags: int
    events: EventSink
    interlocks: Interlocks
    timing: LoopTiming
    _ref_fresh: bool
    _fast: Any = None

    def _event(self, kind: str, **fields: Any) -> None:
        self.events.append({"kind": kind, "seq": self.seq, "t": self.t, **fields})

    def _set_state(self, new: State) -> None:
        if new != self.state:
            old, self.state = self.state, new
            self._event("state", state=new.name, previous=old.name)

    def _switch_runner(self, runner: Runner | None) -> str | None:
        """Disable the active runner, enable `runner`; the error text if either raised (then
        no runner is active and the caller decides: refuse the command or fault)."""
        error = None
        if self.active is not None:
            try:
                (self._fast if self._fast is not None else self.active).disable()
            except Exception as exc:
                error = f"disable: {exc!r}"
        self.active = self._fast = None
        self.ref.fill(np.nan)
        self._ref_fresh = True
        if runner is not None and error is None:
            try:
                # The compiled path drives the runner's compiled twin (None: no twin, Python).
                fast = self._compile_runner(runner)
                (fast if fast is not None else runner).enable(self.fb)
                self.active, self._fast = runner, fast
            except Exception as exc:
                error = f"enable: {exc!r}"
        return error

    def _compile_runner(self, runner: Runner) -> Any:
        """The runner's compiled twin for the compiled cycle (`daq.loop.cycle.Loop`), or None."""
        return None

    def _hold_or_fault(self) -> None:
        """Switch to the hold runner; if even that fails, fault (valves null this cycle)."""
        error = self._switch_runner(self.hold)
        if error is not None:
            self.interlocks.trip(Trip.CONTROLLER_ERROR, error)

    def _enter_latched(self, state: State, info: TripInfo) -> None:
        """FAULT/ESTOP: valves to null in this very cycle (the caller writes `self.volts`)."""
        self._switch_runner(None)
        np.copyto(self.volts, self.null)
        if self.fault is None or state == State.ESTOP:
            self.fault = TripInfo(info.code, info.where, info.value, info.limit, self.seq, self.t)
            self._event("fault", **self.fault.to_dict())
        self._set_state(state)

    def _drop_power(self) -> None:
        """E-stop also drops the station's hydraulic power (`daq.loop.station`)."""

    def _handle_station(self, req: Request) -> None:
        req.finish(False, f"unknown loop command '{req.kind}'", code="internal")

    def _handle(self, req: Request) -> None:
        if req.kind in STATION_COMMANDS:
            self._handle_station(req)
            return
        try:
            action = Action[req.kind.upper()] if req.kind != "set_gains" else None
        except KeyError:
            req.finish(False, f"unknown loop command '{req.kind}'", code="internal")
            return
        try:
            if action is None:
                self._set_gains(req)
                return
            target = next_state(self.state, action)
        except TransitionError as exc:
            req.finish(False, exc.reason, code="invalid_state")
            return
        if action == Action.ESTOP:
            self._enter_latched(State.ESTOP, TripInfo(Trip.ESTOP, str(req.payload or ""), 0, 0))
            self._drop_power()
        elif action == Action.RESET:
            active = self.last_flags & ~CLAMP_FLAG
            if active:
                req.finish(
                    False,
                    f"reset refused: the cause is still present ({describe_flags(active)})",
                    code="rejected",
                )
                return
            self.fault = None
            self.timing.record_on_time()
            self._set_state(target)
        elif action == Action.ARM:
            reason = self._arm_refusal()
            if reason:
                req.finish(False, reason, code="rejected")
                return
            error = self._switch_runner(self.hold)
            if error is not None:
                req.finish(False, f"arm refused: the controller failed to {error}", code="rejected")
                return
            self._set_state(target)
        elif action == Action.RUN:
            error = self._switch_runner(req.payload if req.payload is not None else self.hold)
            if error is not None:
                self._hold_or_fault()  # stays ARMED, holding (or faults if hold fails too)
                req.finish(False, f"run refused: the runner failed to {error}", code="rejected")
                return
            self._set_state(target)
        elif action == Action.STOP:
            self._set_state(target)
            self._hold_or_fault()
        elif action == Action.DISARM:
            self._switch_runner(None)
            self._set_state(target)
        req.finish(True, "", state=self.state.name, seq=self.seq)

    def _arm_refusal(self) -> str | None:
        if self.hold is None:
            return "arm refused: no controller (hold runner) available"
        active = self.last_flags & ~CLAMP_FLAG
        if active:
            return f"arm refused: interlock active in the last cycle ({describe_flags(active)})"
        il = self.interlocks
        q = self.fb.q
        for j, name in enumerate(il.joint_names):
            if not il.soft_min[j] <= q[j] <= il.soft_max[j]:
                return (
                    f"arm refused: joint {name} at {math.degrees(q[j]):.2f}° is outside its soft "
                    f"limits [{math.degrees(il.soft_min[j]):.2f}°, "
                    f"{math.degrees(il.soft_max[j]):.2f}°]; bring it back with "
                    f"`jog {name} TARGET_DEG` at low pressure"
                )
        return self._station_refusal()

    def _station_refusal(self) -> str | None:
        """The station's reason to refuse `arm` (power, supply), or None (`daq.loop.station`)."""
        return None

    def _set_gains(self, req: Request) -> None:
        if self.state == State.RUNNING:
            req.finish(False, "set_gains refused in RUNNING: stop first", code="invalid_state")
            return
        old, self.hold = self.hold, req.payload
        if self.state == State.ARMED:
            # Bumpless: the new hold re-captures the measured position.
            error = self._switch_runner(self.hold)
            if error is not None:
                self.hold = old
                self._hold_or_fault()
                req.finish(
                    False, f"set_gains refused: the controller failed to {error}", code="rejected"
                )
                return
        req.finish(True, "", state=self.state.name, seq=self.seq)
