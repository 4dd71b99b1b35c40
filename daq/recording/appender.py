"""Append whole records to a run file, within the disk budget, and undo a half-written one.

The run file is append-only: a record is either completely on disk or, after a failed write
(full disk, I/O error), cut off again with `cut_back()`, so the file always ends on a record
boundary that the recorder can still close with an event and a trailer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from daq.recording.quota import DiskGuard

#: The one system call that appends to the file (a seam for fault-injection tests).
_writev = os.writev


class BudgetExceeded(Exception):
    """The disk guard refused a write (quota reached or disk nearly full)."""


class Appender:
    def __init__(self, fd: int, guard: DiskGuard) -> None:
        self.fd = fd
        self.guard = guard
        #: File offset just after the last completely written record.
        self.good = 0

    def append(self, parts: list[Any], *, guarded: bool = True) -> None:
        """Write the buffers in `parts` as one record; `BudgetExceeded` or `OSError` if not."""
        size = sum(memoryview(p).nbytes for p in parts)
        if guarded:
            reason = self.guard.check(size)
            if reason is not None:
                raise BudgetExceeded(reason)
        pending = [memoryview(p).cast("B") for p in parts]
        while pending:  # writev may write less than asked (signal, nearly full disk)
            n = _writev(self.fd, pending)
            while n and pending:
                if n >= len(pending[0]):
                    n -= len(pending[0])
                    pending.pop(0)
                else:
                    pending[0] = pending[0][n:]
                    n = 0
        self.good += size
        self.guard.wrote(size)

    def cut_back(self) -> None:
        """Drop whatever follows the last complete record (a record half-written on failure)."""
        os.ftruncate(self.fd, self.good)
        os.lseek(self.fd, self.good, os.SEEK_SET)

    def sync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def sync_directory(directory: Path) -> None:
    """fsync a directory so that a file just created in it survives a power cut."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
