"""`kernel` — numba's `njit` for the loop's compiled cycle, cached on disk.

The compiled cycle (docs/loop.md, "The compiled cycle") must not compile in a live cycle: the loop
calls every kernel once before it arms (`daq.loop.kernel.warm_up`), and the machine code is
cached on disk so that a service start only loads it. numba writes its cache next to the source
(`__pycache__`); on an installation where that is read-only it uses `NUMBA_CACHE_DIR` when set,
else this module points it at a per-user directory, and when nothing is writable it compiles
without a cache (a slower start, said once in the log, never a failure).

`fastmath` stays off: the compiled path must give the Python reference's numbers (to 1e-12 on a
whole run; the same IEEE operations in the same order give them bit for bit).
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numba

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe"):
            pass
        return True
    except OSError:
        return False


def _choose_cache() -> bool:
    """True if numba can cache; sets numba's cache directory when the source tree is read-only."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        if _writable(Path(os.environ["NUMBA_CACHE_DIR"])):
            return True
        log.warning("NUMBA_CACHE_DIR=%s is not writable", os.environ["NUMBA_CACHE_DIR"])
    elif _writable(Path(__file__).resolve().parent / "__pycache__"):
        return True
    for candidate in (
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hydrig-numba",
        Path(tempfile.gettempdir()) / f"hydrig-numba-{os.getuid()}",
    ):
        if _writable(candidate):
            numba.config.CACHE_DIR = str(candidate)  # type: ignore[attr-defined]
            log.warning(
                "compiled loop: the source tree is read-only; numba caches in %s", candidate
            )
            return True
    log.warning("compiled loop: no writable cache directory; every start compiles (~10-30 s)")
    return False


CACHE = _choose_cache()


def kernel(fn: F) -> F:
    """`njit(cache=CACHE, fastmath=False, nogil=True)`."""
    compiled: F = numba.njit(cache=CACHE, fastmath=False, nogil=True)(fn)  # type: ignore[assignment]
    return compiled
