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

import numpy as np

from daq.ring import SharedSegment, shared_name

log = logging.getLogger("daq.service")

#: A check running longer than this is cancelled and its run refused (naming the bound).
CHECK_TIMEOUT_S = 600.0
#: How long a cancelled check may take to notice before its process is killed.
CANCEL_GRACE_S = 1.0
#: How often the watcher looks at the child (result, cancel, timeout, death).
_WATCH_S = 0.02
# Shared words: samples done, samples total, job id to cancel, newest job id submitted, job
# id the child is working on.
_DONE, _TOTAL, _CANCEL, _LATEST, _BEGUN = 0, 1, 2, 3, 4
_WORDS = 8


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


def _child(conn: Any, segment: str) -> None:
    """The worker process: check what arrives, one at a time, until told to stop (None)."""
    import os

    import numpy as np

    from daq.ring import SharedSegment

    shm = SharedSegment(name=segment)  # by name: no file descriptor crosses the spawn
    words = np.ndarray((_WORDS,), np.int64, shm.buf)

    # The lowest CPU priority: a check must never take a CPU the loop process wants (the
    # loop's own CPU is isolated on a rig PC; the check then uses the others' idle time).
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        os.nice(19)
    except (OSError, AttributeError):
        pass
    from controller.checks import CheckCancelled, check_experiment

    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        job_id, exp, limits, params, rate_hz = msg
        if words[_CANCEL] == job_id or words[_LATEST] > job_id:
            conn.send((job_id, "cancelled", None))  # cancelled, or superseded, while queued
            continue
        words[_BEGUN] = job_id

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
        self._shm = SharedSegment(name=shared_name("check"), create=True, size=8 * _WORDS)
        self._words = np.ndarray((_WORDS,), np.int64, self._shm.buf)
        self._words.fill(0)
        self._proc: Any = None
        self._conn: Any = None
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.current: CheckJob | None = None
        self.restarts = 0
        #: Jobs sent to the child and not yet answered, and when each was cancelled.
        self._jobs: dict[int, tuple[CheckJob, Callable[[CheckJob], None]]] = {}
        self._cancelled_at: dict[int, float] = {}

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
        """Start checking `exp`; `on_done(job)` is called from the collector thread when the
        check has ended (any state)."""
        with self._lock:
            if self.busy():
                raise RuntimeError("a check is already under way")
            job = CheckJob(next(self._ids), str(getattr(exp, "name", "")), samples)
            words = self._words
            job.progress_fn = lambda: (int(words[_DONE]), int(words[_TOTAL]) or samples)
            words[_DONE], words[_TOTAL], words[_LATEST] = 0, samples, job.id
            self.current = job
            self._jobs[job.id] = (job, on_done)
            self._ensure_process()
            self._conn.send((job.id, exp, limits, params, rate_hz))
        return job

    def cancel(self, why: str) -> CheckJob | None:
        """Abandon the check under way (if any); returns it. Never blocks: the collector
        thread waits for the child to notice, or kills it."""
        job = self.current
        if job is None or job.state != "checking":
            return None
        job.message = why
        self._words[_CANCEL] = job.id
        job.state = "cancelled"  # at once: a new check may be submitted (the child skips this)
        self._cancelled_at[job.id] = time.monotonic()
        return job

    def close(self) -> None:
        if self.current is not None:
            self.cancel("the service is stopping")
        with self._lock:
            proc, conn = self._proc, self._conn
            self._proc = self._conn = None
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
        self._shm.unlink_quietly()

    # ------------------------------------------------------------------ internals

    def _ensure_process(self) -> None:
        """(Under `_lock`.) A child process and its collector thread."""
        if self._proc is not None and self._proc.is_alive():
            return
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=_child, args=(child, self._shm.name), name="rig-check", daemon=True
        )
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        threading.Thread(
            target=self._collect, args=(proc, parent), name="rig-check-collect", daemon=True
        ).start()

    def _collect(self, proc: Any, conn: Any) -> None:
        """The only reader of one child's answers: finishes its jobs, enforces the timeout,
        kills a child that does not notice a cancel. Ends with that child."""
        while True:
            now = time.monotonic()
            for job, _ in list(self._jobs.values()):
                if job.state == "checking" and now - job.started > self.timeout_s:
                    self.cancel(
                        f"the limit check did not finish within {self.timeout_s:g} s "
                        f"(at {100 * job.progress():.0f} % of {job.samples} samples)"
                    )
            try:
                ready = conn.poll(_WATCH_S)
                answer = conn.recv() if ready else None
            except (OSError, EOFError):
                answer, ready = None, False
                proc.join(CANCEL_GRACE_S)
            if answer is not None:
                job_id, kind, value = answer
                self._finish(job_id, kind, value)
                continue
            if not proc.is_alive():
                self._drop(proc, conn, "error", "the check process died")
                return
            begun = int(self._words[_BEGUN])
            cancelled = self._cancelled_at.get(begun)
            if cancelled is not None and begun in self._jobs and now - cancelled > CANCEL_GRACE_S:
                # It is computing a cancelled check and did not notice within the grace (a
                # CPU-starved child): kill it; the next check starts a fresh one.
                proc.kill()
                proc.join(CANCEL_GRACE_S)
                self._drop(proc, conn, "cancelled", None)
                return

    def _drop(self, proc: Any, conn: Any, kind: str, value: Any) -> None:
        """The child is gone: finish every job it held, forget it."""
        with self._lock:
            if self._proc is proc:
                self._proc = self._conn = None
                self.restarts += 1
        conn.close()
        for job_id in list(self._jobs):
            self._finish(job_id, kind, value)

    def _finish(self, job_id: int, kind: str, value: Any) -> None:
        entry = self._jobs.pop(job_id, None)
        self._cancelled_at.pop(job_id, None)
        if entry is None:
            return
        job, on_done = entry
        job.ended = time.monotonic()
        if kind == "ok" and job.state == "checking":
            job.violations = list(value)
            job.state = "refused" if job.violations else "passed"
        elif kind in ("ok", "cancelled") or job.state == "cancelled":
            job.state = "cancelled"
        else:
            job.state = "failed"
            job.message = str(value)
            log.error("experiment limit check failed: %s", value)
        job.done.set()
        on_done(job)
