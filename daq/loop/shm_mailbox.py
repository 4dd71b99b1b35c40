"""The mailbox across the process split: the same semantics as `daq.loop.mailbox`, in shared
memory (`daq.loop.shared_link`: words POSTED/CANCELLED/TAKEN/DONE, a request and a reply area).

Service side (`ShmMailboxClient.call`): one caller at a time (a thread lock), the request is
pickled into the request area — the command server has already validated it and built any
object it carries (an experiment runner, a hold runner with new gains) — then POSTED is bumped.
It polls DONE until its deadline. On a timeout it takes the cross-process lock and withdraws the
request (CANCELLED = n) unless the loop has taken it (TAKEN = n), in which case it waits for
the true outcome: a stop that was executed is never reported as not executed.

Loop side (`ShmMailboxServer.take`): once per cycle, one comparison of POSTED with the last
number it saw — nothing else in the steady state. When a request is pending it tries the lock
*without blocking* (the service holds it only for the few stores of a withdrawal; if it is held
the loop looks again next cycle), marks TAKEN, releases, and unpickles the request. Unpickling
is the command's cost, paid in that one cycle (bench/loop_timing.py reports it as
`mailbox_unpickle_us` for an experiment runner). `finish()` pickles the reply and bumps DONE.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from daq.loop.mailbox import MailboxError, MailboxTimeout, Request
from daq.loop.shared_link import REPLY_BYTES, REQUEST_BYTES, LoopLink, W

#: How often a waiting caller looks at DONE (the service's thread, not the loop's).
POLL_S = 0.0002
#: Longest wait for the cross-process lock (held by the loop for a few stores).
LOCK_TIMEOUT_S = 2.0


class CrossProcessLock(Protocol):
    def acquire(self, block: bool = True, timeout: float | None = None) -> bool: ...

    def release(self) -> None: ...


class MailboxOverflow(MailboxError):
    """The request does not fit the shared request area."""


class ShmRequest(Request):
    """A request as the loop sees it; `finish` answers through shared memory."""

    def __init__(
        self, kind: str, payload: Any, seq: int, answer: Callable[[ShmRequest], None]
    ) -> None:
        super().__init__(kind, payload)
        self.seq = seq
        self._answer = answer

    def finish(self, ok: bool, reason: str = "", **data: Any) -> None:
        super().finish(ok, reason, **data)
        self._answer(self)


class ShmMailboxServer:
    """Loop side."""

    def __init__(self, link: LoopLink, lock: CrossProcessLock) -> None:
        self._link = link
        self._words = link.words
        self._lock = lock
        self._seen = int(link.words[W.POSTED])
        #: Called just before a reply is posted (the loop process refreshes its status block,
        #: so a caller that reads the state after the reply sees the new one).
        self.before_reply: Callable[[], None] | None = None

    def take(self) -> Request | None:
        if self._words[W.POSTED] == self._seen:
            return None
        if not self._lock.acquire(False):
            return None  # the service is withdrawing a request: look again next cycle
        try:
            words = self._words
            posted = int(words[W.POSTED])
            self._seen = posted
            if words[W.CANCELLED] == posted:
                return None
            words[W.TAKEN] = posted
        finally:
            self._lock.release()
        n = int(words[W.REQUEST_LEN])
        try:
            kind, payload = pickle.loads(self._link.request[:n].tobytes())
        except Exception as exc:  # a request that does not unpickle is refused, not a crash
            ShmRequest("?", None, posted, self._answer).finish(
                False, f"the loop could not decode the request: {exc!r}", code="internal"
            )
            return None
        return ShmRequest(kind, payload, posted, self._answer)

    def _answer(self, req: ShmRequest) -> None:
        if self.before_reply is not None:
            self.before_reply()
        data = pickle.dumps((req.ok, req.reason, req.data), protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) > REPLY_BYTES:
            data = pickle.dumps((req.ok, req.reason[:1000], {}), protocol=pickle.HIGHEST_PROTOCOL)
        self._link.reply[: len(data)] = np.frombuffer(data, np.uint8)
        self._words[W.REPLY_LEN] = len(data)
        self._words[W.DONE] = req.seq


class ShmMailboxClient:
    """Service side."""

    def __init__(self, link: LoopLink, lock: CrossProcessLock, alive: Callable[[], bool]) -> None:
        import threading

        self._link = link
        self._words = link.words
        self._lock = lock
        self._alive = alive
        self._callers = threading.Lock()

    def call(self, kind: str, payload: Any = None, timeout: float = 1.0) -> Request:
        data = pickle.dumps((kind, payload), protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) > REQUEST_BYTES:
            raise MailboxOverflow(
                f"'{kind}': the request is {len(data)} bytes, the mailbox holds {REQUEST_BYTES}"
            )
        if not self._callers.acquire(timeout=timeout):
            raise MailboxTimeout(f"another command is still waiting for the loop ({kind})")
        try:
            return self._call(kind, data, timeout)
        finally:
            self._callers.release()

    def _call(self, kind: str, data: bytes, timeout: float) -> Request:
        words = self._words
        n = int(words[W.POSTED]) + 1
        self._link.request[: len(data)] = np.frombuffer(data, np.uint8)
        words[W.REQUEST_LEN] = len(data)
        words[W.POSTED] = n
        if self._wait_done(n, timeout):
            return self._reply(kind)
        with _held(self._lock):
            if words[W.TAKEN] != n:
                words[W.CANCELLED] = n  # not taken: withdrawn, nothing happened
                raise MailboxTimeout(f"the loop did not answer '{kind}' within {timeout:.3g} s")
        # The loop holds it: it finishes within the cycle; wait for the true outcome.
        if self._wait_done(n, max(timeout, 1.0)):
            return self._reply(kind)
        raise MailboxTimeout(f"the loop took '{kind}' but did not answer within {timeout:.3g} s")

    def _wait_done(self, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        words = self._words
        while words[W.DONE] != n:
            if time.monotonic() > deadline or not self._alive():
                return bool(words[W.DONE] == n)
            time.sleep(POLL_S)
        return True

    def _reply(self, kind: str) -> Request:
        n = int(self._words[W.REPLY_LEN])
        ok, reason, data = pickle.loads(self._link.reply[:n].tobytes())
        req = Request(kind)
        req.finish(ok, reason, **data)
        return req


class _held:
    def __init__(self, lock: CrossProcessLock) -> None:
        self.lock = lock

    def __enter__(self) -> None:
        # The loop holds the lock for a few stores; a loop process killed in between would hold
        # it forever (a POSIX semaphore is not released by the kernel): never wait unbounded.
        if not self.lock.acquire(True, LOCK_TIMEOUT_S):
            raise MailboxTimeout("the mailbox lock is held by a loop process that never let go")

    def __exit__(self, *exc: object) -> None:
        self.lock.release()
