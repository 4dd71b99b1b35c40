"""Long experiment limit checks, off the command path: one worker process, bounded, cancellable.

`controller.checks.check_experiment` samples a segment whose frequencies share no period for
its whole length: a day-long multisine with plant parameters (the valve-capacity check) takes
tens of seconds. On the command thread that held every other request — the e-stop included —
for as long. Here the check runs in a process of its own:

- **isolated**: a separate interpreter, so a check never competes with the service's threads
  for the interpreter lock (the safety lane answers within milliseconds meanwhile);
- **with progress**: the child writes (samples done, samples total) into shared memory after
  every chunk; `status` shows it;
- **cancellable**: `cancel()` sets a shared word the child reads after every chunk (it then
  abandons the check within one chunk, ~10 ms); a child that does not answer within
  `CANCEL_GRACE_S` is killed and a fresh one started for the next check;
- **bounded**: a check still running after `CHECK_TIMEOUT_S` is cancelled and the run refused
  naming that bound; its memory is the check's own O(chunk) (controller/checks.py, "Cost").

One check at a time: the service refuses a second `run` while one is under way. The process is
started at the first check that needs it (a `spawn`, ~1–2 s: the imports of numpy and the
controller) and reused.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("daq.service")

#: A check running longer than this is cancelled and its run refused (naming the bound).
CHECK_TIMEOUT_S = 600.0
#: How long a cancelled check may take to notice before its process is killed.
CANCEL_GRACE_S = 1.0
#: How often the watcher looks at the child (result, cancel, timeout, death).
_WATCH_S = 0.02
# Shared words: [samples done, samples total, job id to cancel].
_DONE, _TOTAL, _CANCEL = 0, 1, 2


@dataclass
class CheckJob:
    """One check. `state`: checking → passed | refused | cancelled | failed (then `started`
    or `start_refused` once the service acted on a pass)."""

    id: int
    experiment: str
    samples: int
    started: float = field(default_factory=time.monotonic)
    state: str = "checking"
    message: str = ""
    violations: list[Any] = field(default_factory=list)
    ended: float | None = None
    done: threading.Event = field(default_factory=threading.Event)
    progress_fn: Callable[[], tuple[int, int]] | None = None

    def progress(self) -> float:
        if self.state != "checking":
            return 1.0 if self.state in ("passed", "refused", "started", "start_refused") else 0.0
        if self.progress_fn is None:
            return 0.0
        done, total = self.progress_fn()
        return min(1.0, done / total) if total > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        end = self.ended if self.ended is not None else time.monotonic()
        return {
            "id": self.id,
            "experiment": self.experiment,
            "state": self.state,
            "progress": round(self.progress(), 4),
            "samples": self.samples,
            "elapsed_s": round(end - self.started, 3),
            "message": self.message,
        }


def _child(conn: Any, words: Any) -> None:
    """The worker process: check what arrives, one at a time, until told to stop (None)."""
    from controller.checks import CheckCancelled, check_experiment

    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        job_id, exp, limits, params, rate_hz = msg

        def progress(done: int, total: int, job_id: int = job_id) -> None:
            words[_DONE], words[_TOTAL] = done, total
            if words[_CANCEL] == job_id:
                raise CheckCancelled

        words[_DONE] = 0
        result: tuple[str, Any]
        try:
            result = ("ok", check_experiment(exp, limits, params, rate_hz, progress=progress))
        except CheckCancelled:
            result = ("cancelled", None)
        except Exception as exc:  # a bug or a bad experiment the parser let through
            result = ("error", f"{type(exc).__name__}: {exc}")
        conn.send((job_id, *result))


class CheckWorker:
    """The service side: `submit()` a check, `cancel()` it, `current` for `status`."""

    def __init__(self, timeout_s: float = CHECK_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._ctx = multiprocessing.get_context("spawn")
        self._words = self._ctx.Array("q", 3, lock=False)
        self._proc: Any = None
        self._conn: Any = None
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.current: CheckJob | None = None
        self.restarts = 0

    def busy(self) -> bool:
        job = self.current
        return job is not None and job.state == "checking"

    def submit(
        self,
        exp: Any,
        limits: Any,
        params: Any,
        samples: int,
        on_done: Callable[[CheckJob], None],
        rate_hz: float = 500.0,
    ) -> CheckJob:
        """Start checking `exp`; `on_done(job)` is called from the watcher thread when the
        check has ended (any state)."""
        with self._lock:
            if self.busy():
                raise RuntimeError("a check is already under way")
            self._ensure_process()
            job = CheckJob(next(self._ids), str(getattr(exp, "name", "")), samples)
            words = self._words
            job.progress_fn = lambda: (int(words[_DONE]), int(words[_TOTAL]) or samples)
            words[_DONE], words[_TOTAL] = 0, samples
            self.current = job
            self._conn.send((job.id, exp, limits, params, rate_hz))
        threading.Thread(
            target=self._watch, args=(job, on_done), name="rig-check-watch", daemon=True
        ).start()
        return job

    def cancel(self, why: str) -> CheckJob | None:
        """Abandon the check under way (if any); returns it. Never blocks: the watcher thread
        waits for the child to notice, or kills it."""
        job = self.current
        if job is None or job.state != "checking":
            return None
        job.message = why
        self._words[_CANCEL] = job.id
        return job

    def close(self) -> None:
        with self._lock:
            proc, conn = self._proc, self._conn
            self._proc = self._conn = None
        if self.current is not None:
            self.cancel("the service is stopping")
        if conn is not None:
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
        if proc is not None:
            proc.join(CANCEL_GRACE_S)
            if proc.is_alive():
                proc.kill()
                proc.join(CANCEL_GRACE_S)
            if conn is not None:
                conn.close()

    # ------------------------------------------------------------------ internals

    def _ensure_process(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            return
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=_child, args=(child, self._words), name="rig-check", daemon=True
        )
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent

    def _kill(self) -> None:
        with self._lock:
            proc, conn = self._proc, self._conn
            self._proc = self._conn = None
            self.restarts += 1
        if proc is not None:
            proc.kill()
            proc.join(CANCEL_GRACE_S)
        if conn is not None:
            conn.close()

    def _watch(self, job: CheckJob, on_done: Callable[[CheckJob], None]) -> None:
        conn, proc = self._conn, self._proc
        cancel_seen: float | None = None
        outcome: tuple[str, Any] = ("error", "the check ended without an answer")
        value: Any
        while True:
            now = time.monotonic()
            if now - job.started > self.timeout_s and self._words[_CANCEL] != job.id:
                self.cancel(
                    f"the limit check did not finish within {self.timeout_s:g} s "
                    f"(at {100 * job.progress():.0f} % of {job.samples} samples)"
                )
            if self._words[_CANCEL] == job.id and cancel_seen is None:
                cancel_seen = now
            try:
                ready = conn.poll(_WATCH_S)
            except (OSError, EOFError):
                ready = False
                proc = None
            if ready:
                try:
                    job_id, kind, value = conn.recv()
                except (OSError, EOFError):
                    proc = None
                else:
                    if job_id == job.id:
                        outcome = (kind, value)
                        break
                    continue  # an answer to an older, cancelled job
            if proc is None or not proc.is_alive():
                outcome = ("error", "the check process died")
                self._kill()
                break
            if cancel_seen is not None and now - cancel_seen > CANCEL_GRACE_S:
                self._kill()  # it did not notice in time: a fresh process for the next check
                outcome = ("cancelled", None)
                break
        kind, value = outcome
        job.ended = time.monotonic()
        if kind == "ok" and self._words[_CANCEL] != job.id:
            job.violations = list(value)
            job.state = "refused" if job.violations else "passed"
        elif kind in ("ok", "cancelled"):
            job.state = "cancelled"
        else:
            job.state = "failed"
            job.message = str(value)
            log.error("experiment limit check failed: %s", value)
        job.done.set()
        on_done(job)
