"""Waiting on a condition, not a time: the suite must pass on a loaded machine."""

from __future__ import annotations

import time
from collections.abc import Callable

#: Deadline for a condition that holds within milliseconds on an idle machine.
GENEROUS_S = 30.0


def wait_until(predicate: Callable[[], object], timeout: float = GENEROUS_S) -> bool:
    """Poll `predicate` until it is true (→ True) or `timeout` s have passed (→ False)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True
