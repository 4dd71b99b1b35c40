"""Wall time of `rigctl identify` end to end on a simulated rig: the service up, the
experiment in virtual time, the batch (with the closed-loop choice), validation, the report
and the tracking check — what a user waits for.

    .venv/bin/python bench/identify_wall.py [--profile P] [--repeats N]
                                            [--blas-threads K ...] [-- EXTRA rigctl ARGS]

Each run is `rigctl identify --profile P --virtual-time` in a fresh directory. With several
`--blas-threads` values the runs alternate between them (`HYDRIG_BLAS_THREADS`, estimator.blas),
so their ratio is measured in the same session. Figures on a shared machine are loaded: the
load average is printed with them; compare ratios, or run it alone.

JSON on the last line: per thread count the wall and CPU seconds (the children's user + system)
of each run and their medians, the closed-loop choice's seconds from the batch's note, the load
average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "hw_profiles" / "sim-2dof-realistic.toml"
RIGCTL = Path(sys.executable).with_name("rigctl")
CHOICE = re.compile(r"(\d+) simulations in (\d+) s")


def one_run(profile: str, threads: int | None, extra: list[str]) -> dict[str, Any]:
    env = dict(os.environ)
    if threads is not None:
        env["HYDRIG_BLAS_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory(prefix="identify_wall_") as tmp:
        cmd = [str(RIGCTL), "identify", "--profile", profile, "--virtual-time", *extra]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        done = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"rigctl identify failed (exit {done.returncode}): {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    m = CHOICE.search(done.stdout)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "choice_s": None if m is None else int(m.group(2))}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=str(PROFILE))
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument(
        "--blas-threads", type=int, action="append",
        help="BLAS threads (repeatable; default: the estimator's own, one)",
    )  # fmt: skip
    ap.add_argument("extra", nargs="*", help="further rigctl identify arguments (after --)")
    args = ap.parse_args()
    counts: list[int | None] = list(args.blas_threads or [None])
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {str(c or "default"): [] for c in counts}
    for k in range(args.repeats):
        for c in counts:
            r = one_run(args.profile, c, args.extra)
            runs[str(c or "default")].append(r)
            print(f"round {k + 1}, BLAS threads {c or 'default'}: {r['wall_s']:.1f} s wall, "
                  f"{r['cpu_s']:.1f} s CPU, choice {r['choice_s']} s, load "
                  f"{os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)  # fmt: skip
    out: dict[str, Any] = {"profile": args.profile, "extra": args.extra}
    for key, rs in runs.items():
        out[key] = {
            "runs": rs,
            "wall_median_s": round(statistics.median(r["wall_s"] for r in rs), 2),
            "cpu_median_s": round(statistics.median(r["cpu_s"] for r in rs), 2),
        }
    out["loadavg_before"] = [round(v, 2) for v in load_before]
    out["loadavg_after"] = [round(v, 2) for v in os.getloadavg()]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
