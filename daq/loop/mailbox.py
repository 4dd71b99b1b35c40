"""Single-slot mailbox carrying commands from the command thread to the real-time loop.

The loop calls `take()` once per cycle: a length check of a `deque`, and a `popleft()` (atomic
in CPython, never blocks) only when the slot is not empty; no lock is acquired to look. When it
finishes a request it calls `Request.finish()`, which sets a `threading.Event`; that takes the
event's internal lock for a few instructions and the waiting thread never holds it across its
wait, so the loop cannot be made to wait on it in practice.

Callers serialise on a lock of their own (only command threads touch it), so the slot holds at
most one request. A caller that times out tries to take its request back with the same atomic
`popleft()`: if it gets it, the loop never saw it and nothing happened; if the loop already took
it, the caller waits for the (imminent) result instead of reporting a timeout for a command that
did act — a stop that was executed must never be reported as not executed.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Request:
    kind: str
    payload: Any = None
    ok: bool = False
    reason: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)

    def finish(self, ok: bool, reason: str = "", **data: Any) -> None:
        self.ok = ok
        self.reason = reason
        self.data.update(data)
        self.done.set()


class MailboxError(RuntimeError):
    """A request could not be handed to the loop (`daq.service.control_api` answers `internal`)."""


class MailboxTimeout(MailboxError, TimeoutError):
    """The loop did not pick the request up in time (it is stalled or not running)."""


class Mailbox:
    def __init__(self) -> None:
        self._slot: deque[Request] = deque(maxlen=1)
        self._callers = threading.Lock()

    def take(self) -> Request | None:
        """Loop side: the pending request, or None. Never blocks; an empty slot costs one
        length check (no exception raised per cycle)."""
        if not self._slot:
            return None
        try:
            return self._slot.popleft()
        except IndexError:  # the caller withdrew it between the check and the pop
            return None

    def call(self, kind: str, payload: Any = None, timeout: float = 1.0) -> Request:
        """Command side: post a request and wait for the loop to finish it."""
        req = Request(kind, payload)
        if not self._callers.acquire(timeout=timeout):
            raise MailboxTimeout(f"another command is still waiting for the loop ({kind})")
        try:
            self._slot.append(req)
            if req.done.wait(timeout):
                return req
            try:
                self._slot.popleft()  # not yet taken: withdraw it, nothing happened
            except IndexError:
                # The loop holds it: it finishes within the cycle; wait for the true outcome.
                if req.done.wait(max(timeout, 1.0)):
                    return req
            raise MailboxTimeout(f"the loop did not answer '{kind}' within {timeout:.3g} s")
        finally:
            self._callers.release()
