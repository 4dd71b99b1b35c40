"""Cost of the pre-run limit check (`controller.checks`) against the experiment's length.

Issue 16 item 3: the check used to sample every segment at 500 Hz at once, so a 20 000 s hold
took 5.2 s and +700 MB. For a hold, a periodic sine, a chirp and an incommensurate two-tone
sine (the last two have no period to exploit: every sample is checked) this measures the time
and the peak traced memory at a short and a long duration, and quotes long/short ratios from
the same run: memory is O(1) in the length (ratio near 1); time is O(1) where a hold or one
period stands for the whole segment. Prints JSON on its last line.

    python bench/limit_check.py [--long 20000]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.checks import check_experiment
from controller.experiment import Experiment
from daq.profile import load_profile
from daq.service.control_api import joint_limits

CASES: dict[str, dict[str, Any]] = {
    "hold": {"kind": "hold"},
    "sine_periodic": {"kind": "sine", "amplitude_deg": [5.0, 5.0], "frequency_hz": [0.1, 0.3]},
    "chirp": {"kind": "chirp", "amplitude_deg": [2.0, 2.0], "f0_hz": 0.1, "f1_hz": 1.0},
    "two_tone_incommensurate": {
        "kind": "sine",
        "amplitude_deg": [5.0, 5.0],
        "frequency_hz": [0.1, 0.1 * math.sqrt(2.0)],
    },
}


def measure(traj: dict[str, Any], duration: float, limits: list[Any]) -> tuple[float, int]:
    exp = Experiment.from_dict(
        {
            "name": "b",
            "home_deg": [40.0, 30.0],
            "segments": [
                {
                    "name": "s",
                    "duration_s": duration,
                    "trajectory": traj,
                    "controller": {"kind": "pid"},
                }
            ],
        }
    )
    times = []
    for _ in range(3):  # best of three: the first call also pays imports and caches
        t0 = time.perf_counter()
        check_experiment(exp, limits)
        times.append(time.perf_counter() - t0)
    tracemalloc.start()  # separately: tracing slows numpy-heavy code
    check_experiment(exp, limits)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return min(times), peak


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--short", type=float, default=20.0, help="reference duration, s")
    ap.add_argument("--long", type=float, default=20_000.0, help="long duration, s")
    ap.add_argument(
        "--profile", default=str(Path(__file__).parents[1] / "hw_profiles/sim-2dof.toml")
    )
    args = ap.parse_args()
    limits = joint_limits(load_profile(args.profile))
    out: dict[str, Any] = {"short_s": args.short, "long_s": args.long}
    for name, traj in CASES.items():
        # Nothing to exploit in these two: every sample is checked (time ∝ duration).
        long_ = (
            min(args.long, 2000.0) if name in ("chirp", "two_tone_incommensurate") else args.long
        )
        t_s, m_s = measure(traj, args.short, limits)
        t_l, m_l = measure(traj, long_, limits)
        out[name] = {
            "long_s": long_,
            "time_short_s": round(t_s, 4),
            "time_long_s": round(t_l, 4),
            "time_ratio_long_over_short": round(t_l / t_s, 2),
            "duration_ratio": long_ / args.short,
            "peak_bytes_short": m_s,
            "peak_bytes_long": m_l,
            "memory_ratio_long_over_short": round(m_l / m_s, 2),
        }
        print(f"{name}: {out[name]}", file=sys.stderr)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
