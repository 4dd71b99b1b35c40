"""Disk budget of the recording directory: a quota on its size and a floor on free space.

A full disk must never stop the loop: the recorder asks this guard before every write and
stops recording (loudly) when the answer is no. Walking the directory and `statvfs` cost a few
system calls, so they are measured at most once per `interval_s`; in between, the bytes the
recorder wrote since the last measurement are added, so the budget is never overshot by more
than one write.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path


def directory_size(directory: Path) -> int:
    """Total size in bytes of the regular files under `directory` (recursively)."""
    total = 0
    stack = [directory]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
                except FileNotFoundError:  # removed while we walked: it no longer counts
                    continue
    return total


class DiskGuard:
    def __init__(
        self,
        directory: Path,
        quota_bytes: int = 0,
        min_free_bytes: int = 0,
        *,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if quota_bytes < 0 or min_free_bytes < 0:
            raise ValueError("quota_bytes and min_free_bytes must be >= 0 (0 = no limit)")
        self.directory = directory
        self.quota_bytes = quota_bytes
        self.min_free_bytes = min_free_bytes
        self.interval_s = interval_s
        self._clock = clock
        self._measured_at = -float("inf")
        self._used = 0
        self._free = 0
        self._since = 0  # bytes written since the last measurement

    @property
    def enabled(self) -> bool:
        return bool(self.quota_bytes or self.min_free_bytes)

    def _measure(self) -> None:
        if self.quota_bytes:
            self._used = directory_size(self.directory)
        if self.min_free_bytes:
            self._free = shutil.disk_usage(self.directory).free
        self._since = 0
        self._measured_at = self._clock()

    def check(self, pending: int) -> str | None:
        """None if `pending` more bytes may be written, else the reason they may not."""
        if not self.enabled:
            return None
        if self._clock() - self._measured_at >= self.interval_s:
            self._measure()
        if self.quota_bytes:
            used = self._used + self._since + pending
            if used > self.quota_bytes:
                return (
                    f"recording quota exceeded: {self.directory} would hold {used} bytes, "
                    f"quota is {self.quota_bytes}"
                )
        if self.min_free_bytes:
            free = self._free - self._since - pending
            if free < self.min_free_bytes:
                return (
                    f"disk nearly full: {free} bytes would be left free under {self.directory}, "
                    f"minimum is {self.min_free_bytes}"
                )
        return None

    def wrote(self, n: int) -> None:
        self._since += n
