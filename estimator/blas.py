"""How many threads the linear algebra (OpenBLAS, through numpy and scipy) may use in an
estimator's process: one, unless `HYDRIG_BLAS_THREADS` says otherwise.

Why: the batch's cost is least squares and SVDs of tall matrices (~10⁵ rows by tens of
columns), which OpenBLAS splits over every core by default. On the rig PC those cores are
shared: with the 1 kHz loop, the recorder and two other real-time services beside it, an
OpenBLAS worker that spins waiting for a preempted sibling makes each call several times
slower, and takes a core the service's threads want (docs/estimator.md gives the measured
cost; `bench/batch_speed.py --blas-threads K` times the batch with K threads). A different
count changes only the last bits of a solution. The limit is `threadpoolctl`'s, applied at
run time (numpy is already imported by then)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from threadpoolctl import threadpool_limits

#: Environment variable that overrides the limit (a whole number ≥ 1).
ENV = "HYDRIG_BLAS_THREADS"


def blas_threads() -> int:
    """The limit: `$HYDRIG_BLAS_THREADS`, else 1."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return 1
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"{ENV}={raw!r}: must be a whole number of threads ≥ 1") from None
    if n < 1:
        raise ValueError(f"{ENV}={raw!r}: must be a whole number of threads ≥ 1")
    return n


def limit_blas_threads() -> None:
    """Limit this process's BLAS to `blas_threads()` for the rest of its life (service and
    command entry points)."""
    threadpool_limits(limits=blas_threads(), user_api="blas")


@contextmanager
def blas_limited() -> Iterator[None]:
    """The limit within a block, the previous one restored after (library calls such as the
    batch identification, whoever calls them)."""
    with threadpool_limits(limits=blas_threads(), user_api="blas"):
        yield
