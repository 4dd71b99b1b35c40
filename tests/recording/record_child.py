"""Child process for the SIGKILL test: drives a ring like the loop and records until killed.

Usage: python record_child.py DIRECTORY ROWS_BEFORE_READY
Prints "ready <rows written>" once at least ROWS_BEFORE_READY rows are on disk, then keeps
publishing and recording until it is killed.

       python record_child.py DIRECTORY kill-at-start DELAY_S
Kills itself with SIGKILL DELAY_S after it begins `Recorder.start()` (from a timer thread, so
the kill lands wherever start() or the writer thread happens to be), or, with a negative DELAY_S,
the moment `start()` returns.
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


def main() -> int:
    if sys.argv[2] == "kill-at-start":
        kill_at_start(Path(sys.argv[1]), float(sys.argv[3]))
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
