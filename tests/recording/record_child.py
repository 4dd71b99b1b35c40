"""Child process for the SIGKILL test: drives a ring like the loop and records until killed.

Usage: python record_child.py DIRECTORY ROWS_BEFORE_READY
Prints "ready <rows written>" once at least ROWS_BEFORE_READY rows are on disk, then keeps
publishing and recording until it is killed.

       python record_child.py DIRECTORY kill-at-start DELAY_S
Kills itself with SIGKILL DELAY_S after it begins `Recorder.start()` (from a timer thread, so
the kill lands wherever start() or the writer thread happens to be), or, with a negative DELAY_S,
the moment `start()` returns.

       python record_child.py DIRECTORY publish-then-idle ROWS
Records ROWS rows, prints "taken ROWS FLUSH_ROWS" once the writer has appended all but fewer
than FLUSH_ROWS of them, then idles until it is killed.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from daq.recording import Recorder
from daq.ring import SampleRing
from tests.recording.helpers import layout_2dof, meta, publish_rows


def kill_at_start(directory: Path, delay_s: float) -> None:
    layout = layout_2dof()
    ring = SampleRing(1 << 10, layout.width)
    rec = Recorder(ring, layout, directory, meta(), chunk_rows=64, fsync_interval_s=0.05)
    if delay_s >= 0:
        threading.Timer(delay_s, os.kill, (os.getpid(), signal.SIGKILL)).start()
    rec.start("killed")
    if delay_s < 0:
        os.kill(os.getpid(), signal.SIGKILL)
    while True:
        publish_rows(ring, 50)
        time.sleep(0.001)


def publish_then_idle(directory: Path, rows: int) -> None:
    """Record `rows` rows (500-row chunks, no fsync for an hour: only the flush policy puts rows
    on file); print "taken <rows> <flush_rows>" once the writer says it has appended all but
    fewer than flush_rows of them ("stuck …" if it does not within 30 s), then idle."""
    layout = layout_2dof()
    ring = SampleRing(1 << 12, layout.width)
    rec = Recorder(ring, layout, directory, meta(), chunk_rows=500, fsync_interval_s=3600.0)
    rec.start("killed")
    publish_rows(ring, rows, burst=100)
    deadline = time.monotonic() + 30.0
    while rec.stats.rows_written <= rows - rec.flush_rows:  # the writer has not appended them
        if time.monotonic() > deadline:
            print(f"stuck {rec.stats.rows_written} of {rows} appended", flush=True)
            break
        time.sleep(0.001)
    else:
        print(f"taken {rows} {rec.flush_rows}", flush=True)
    while True:
        time.sleep(1.0)


def main() -> int:
    if sys.argv[2] == "kill-at-start":
        kill_at_start(Path(sys.argv[1]), float(sys.argv[3]))
    if sys.argv[2] == "publish-then-idle":
        publish_then_idle(Path(sys.argv[1]), int(sys.argv[3]))
    directory, threshold = Path(sys.argv[1]), int(sys.argv[2])
    layout = layout_2dof()
    ring = SampleRing(1 << 15, layout.width)
    rec = Recorder(ring, layout, directory, meta(), chunk_rows=64, fsync_interval_s=0.05)
    rec.start("killed")
    rec.event("state", new="RUNNING")
    told = False
    while True:
        publish_rows(ring, 50)
        time.sleep(0.001)
        if not told and rec.stats.rows_written >= threshold:
            print(f"ready {rec.stats.rows_written}", flush=True)
            told = True


if __name__ == "__main__":
    sys.exit(main())
