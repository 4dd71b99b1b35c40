"""Recorder throughput: rows/s the writer thread sustains vs a plain `np.save` of the same rows.

A producer publishes rows into the `SampleRing` in blocks as fast as the writer drains them (the
layout of the reference 2-DOF profile), the recorder writes them to a run file; the reference is
`np.save` of the same rows to the same directory, measured in the same run. Figures on the JSON
last line: rows/s for each, the ratios (also against `np.save` + `fsync`, which is what the
recorder's durability costs), and the headroom over the 1 kHz loop (rows/s / 1000).

    PYTHONPATH=. python bench/recording.py [--rows N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from daq.profile import load_profile
from daq.recording import Recorder, read_run
from daq.ring import SampleRing
from daq.sample_layout import SampleLayout

ROOT = Path(__file__).resolve().parents[1]


def _record(rows: np.ndarray, layout: SampleLayout, directory: Path) -> tuple[float, Path, int]:
    ring = SampleRing(1 << 16, layout.width)
    rec = Recorder(ring, layout, directory, {"rig": "bench", "period": 0.001})
    block = 1024  # divides the ring size
    t0 = time.perf_counter()
    path = rec.start("bench")
    for i in range(0, len(rows), block):
        # Stay within half a ring of the writer: the bench measures the writer, not losses.
        while ring.published - rec.stats.rows_written > ring.capacity // 2:
            time.sleep(0.0005)
        n = min(block, len(rows) - i)
        ring.publish_block(rows[i : i + n])
    stats = rec.stop()
    elapsed = time.perf_counter() - t0
    return elapsed, path, stats.lost


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a tempdir)")
    args = ap.parse_args(argv)
    layout = SampleLayout.from_profile(load_profile(ROOT / "hw_profiles" / "sim-2dof.toml"))
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((args.rows, layout.width))
    rows[:, 0] = np.arange(args.rows)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        elapsed, path, lost = _record(rows, layout, directory)
        size = path.stat().st_size
        run = read_run(path)
        exact = bool(np.array_equal(run.data, rows)) and run.complete
        del run
        t0 = time.perf_counter()
        np.save(directory / "ref.npy", rows)
        ref = time.perf_counter() - t0
        # The recorder fsyncs every second (durability after power loss); np.save alone only
        # reaches the page cache, so the same save followed by an fsync is the fair reference.
        t0 = time.perf_counter()
        with (directory / "ref2.npy").open("wb") as f:
            np.save(f, rows)
            f.flush()
            os.fsync(f.fileno())
        ref_sync = time.perf_counter() - t0
        t0 = time.perf_counter()
        read_run(path)
        read_s = time.perf_counter() - t0
    rec_rate = args.rows / elapsed
    ref_rate = args.rows / ref
    result = {
        "rows": args.rows,
        "width": layout.width,
        "file_bytes": size,
        "overhead_bytes_per_row": (size - rows.nbytes) / args.rows,
        "recorder_rows_per_s": round(rec_rate),
        "np_save_rows_per_s": round(ref_rate),
        "np_save_fsync_rows_per_s": round(args.rows / ref_sync),
        "recorder_vs_np_save": round(rec_rate / ref_rate, 3),
        "recorder_vs_np_save_fsync": round(rec_rate * ref_sync / args.rows, 3),
        "headroom_vs_1khz_loop": round(rec_rate / 1000.0, 1),
        "reader_rows_per_s": round(args.rows / read_s),
        "lost": lost,
        "read_back_exact": exact,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
