"""`njit` from numba when it is installed, else the identity: the physics is written in the
scalar style both accept, so it runs (slower) without a compiler."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

try:
    from numba import njit as _njit

    def njit(fn: F) -> F:
        compiled: F = _njit(cache=True, fastmath=False, nogil=True)(fn)  # type: ignore[assignment]
        return compiled

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only where numba is absent

    def njit(fn: F) -> F:
        return fn

    HAVE_NUMBA = False
