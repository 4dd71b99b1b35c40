"""`kernel` — numba's `njit` for the loop's compiled cycle, cached on disk.

The compiled cycle (docs/loop.md, "The compiled cycle") must not compile in a live cycle: the loop
compiles every kernel before it can arm (`daq.loop.kernel.compile_all`), and the machine code is
cached on disk so that a service start only loads it.

numba checks a cached function against its own source file only, not against the functions it
calls in other files: the loop's `k_rest` inlines the laws of `controller/compiled/laws.py`, and
a new law term there would leave the cached `k_rest` stale. So the cache lives in a directory
named by a hash of every kernel source (this package, `controller/compensation.py` whose
functions it compiles, and the modules that `register_source`);
any change to any of them starts a fresh cache (the old ones stay, a few MB each, until
`__pycache__` is cleaned). The directory is `__pycache__/kernels-<hash>`
next to this file, or under `NUMBA_CACHE_DIR` when set, else a per-user directory when the
source tree is read-only; when nothing is writable the kernels compile at every start (a slower
start, said once in the log, never a failure).

`fastmath` stays off: the compiled path must give the Python reference's numbers (the same IEEE
operations in the same order give them bit for bit).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numba

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

_HERE = Path(__file__).resolve().parent
#: This package, and the pure per-cycle maths it compiles from their one source.
_SOURCES: list[Path] = [*sorted(_HERE.glob("*.py")), _HERE.parent / "compensation.py"]
_PREFIX = "kernels-"


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe"):
            pass
        return True
    except OSError:
        return False


def _digest() -> str:
    h = hashlib.sha256()
    for p in _SOURCES:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _bases() -> list[Path]:
    env = os.environ.get("NUMBA_CACHE_DIR")
    if env:
        return [Path(env)]
    return [
        _HERE / "__pycache__",
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hydrig-numba",
        Path(tempfile.gettempdir()) / f"hydrig-numba-{os.getuid()}",
    ]


def _choose_cache() -> str:
    """The cache directory for the present sources ("" if none is writable)."""
    digest = _digest()
    for i, base in enumerate(_bases()):
        target = base / f"{_PREFIX}{digest}"
        if _writable(target):
            if i > 0 and not os.environ.get("NUMBA_CACHE_DIR"):
                log.warning("compiled loop: read-only source tree; kernels cached in %s", base)
            return str(target)
    log.warning("compiled loop: no writable cache directory; every start compiles (~20-60 s)")
    return ""


CACHE_DIR = _choose_cache()
if CACHE_DIR:
    numba.config.CACHE_DIR = CACHE_DIR  # type: ignore[attr-defined]


def register_source(path: str) -> None:
    """A module outside this package whose kernels call these: its source joins the hash (call
    it at import, before any kernel runs)."""
    global CACHE_DIR
    p = Path(path).resolve()
    if p not in _SOURCES:
        _SOURCES.append(p)
        CACHE_DIR = _choose_cache()
        if CACHE_DIR:
            numba.config.CACHE_DIR = CACHE_DIR  # type: ignore[attr-defined]


def kernel(fn: F) -> F:
    """`njit(cache=..., fastmath=False, nogil=True)`."""
    compiled: F = numba.njit(cache=bool(CACHE_DIR), fastmath=False, nogil=True)(fn)  # type: ignore[assignment]
    return compiled
