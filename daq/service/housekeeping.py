"""Pieces of the service that are not the loop: the housekeeping thread and optional imports.

Housekeeping does, off the real-time thread, everything the loop must not: it forwards the
loop's events (state changes, trips) to the recorder and telemetry, logs them, logs overruns at
most once a second, and runs the young-generation garbage collection that the loop has switched
off for itself (see daq/loop/cycle.py on gc).
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from types import ModuleType
from typing import Any, Protocol

from daq.loop import Loop
from daq.service.loop_supervisor import LoopProcess

log = logging.getLogger("daq.service")

EVENT_PERIOD_S = 0.02
LOG_PERIOD_S = 1.0


class EventSink(Protocol):
    def event(self, kind: str, **payload: Any) -> None: ...


def optional(module: str, what: str | None) -> ModuleType | None:
    """Import a part that another branch provides; None (and one log line naming `what`) if
    the module itself is absent. A module that exists but fails to import is a bug: it raises."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module == missing or module.startswith(missing + ".")):
            if what is not None:
                log.warning("%s not available (no %s): running without it", what, module)
            return None
        raise


class Housekeeping:
    def __init__(self, loop: Loop | LoopProcess, sinks: list[EventSink]) -> None:
        self.loop = loop
        self.sinks = sinks
        self.events_forwarded = 0
        self.gc_max_ms = 0.0
        self._last_overruns = 0
        self._last_skipped = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Held while forwarding: the command thread forwards too (before `record_stop`), and
        #: two forwarders would hand the sinks one drain's events out of order.
        self._forwarding = threading.Lock()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rig-housekeeping", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.forward_events()
        self.log_overruns()

    def stats(self) -> dict[str, Any]:
        return {"events_forwarded": self.events_forwarded, "gc_max_ms": self.gc_max_ms}

    def _run(self) -> None:
        next_log = time.monotonic() + LOG_PERIOD_S
        while not self._stop.wait(EVENT_PERIOD_S):
            self.forward_events()
            now = time.monotonic()
            if now >= next_log:
                next_log = now + LOG_PERIOD_S
                self.log_overruns()
                t0 = time.perf_counter()
                self.loop.collect_garbage()
                self.gc_max_ms = max(self.gc_max_ms, (time.perf_counter() - t0) * 1e3)

    def forward_events(self) -> None:
        with self._forwarding:
            self._forward_events()

    def _forward_events(self) -> None:
        for ev in self.loop.drain_events():
            kind = ev["kind"]
            payload = {k: v for k, v in ev.items() if k != "kind"}
            if kind == "fault":
                log.error("FAULT at seq %s: %s", ev.get("seq"), ev.get("message"))
            elif kind == "state":
                log.info(
                    "state %s → %s (seq %s)", ev.get("previous"), ev.get("state"), ev.get("seq")
                )
            else:
                log.info("%s (seq %s)", kind, ev.get("seq"))
            for sink in self.sinks:
                try:
                    sink.event(kind, **payload)
                except Exception:  # a sink failing must not stop the others or this thread
                    log.exception("event sink %s failed", type(sink).__name__)
            self.events_forwarded += 1

    def log_overruns(self) -> None:
        timing = self.loop.timing
        overruns, skipped = timing.overruns, timing.skipped
        if overruns != self._last_overruns:
            log.warning(
                "%d overrun(s), %d cycle(s) skipped in the last second (max run %d; total %d)",
                overruns - self._last_overruns,
                skipped - self._last_skipped,
                timing.max_consecutive_overruns,
                overruns,
            )
            self._last_overruns, self._last_skipped = overruns, skipped
