"""Online estimator throughput (issue 13): the RLS alone against padasip's FilterRLS (same data,
same estimates), and the whole online pipeline (row classification, conditioning, regressors,
RLS) on simulated telemetry rows fed in 20-row messages, as `rig-estimator` receives them.

    .venv/bin/python bench/rls_throughput.py [--profiles P1,P2] [--seconds S] [--batch N]
                                             [--chunk-s C] [--repeats K]

Per profile, two modes on the same rows in the same run:
  message   every message processed on arrival (`chunk_s = 0`: the behaviour before chunking);
  chunked   rows buffered up to `--chunk-s` of rig time (the service's default, 0.1 s).
Timings are rows of rig data per wall second (best of `--repeats`), and ratios to padasip's
FilterRLS measured in the same run (a machine-speed reference: on a shared, loaded machine the
absolute figures move, the ratios much less). Target: chunked ≥ 20 000 rows/s for every profile
(1 kHz with 20× headroom), RLS ≥ 10× padasip with the same estimates. JSON on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import padasip as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from estimator.online import OnlineIdentifier  # noqa: E402
from estimator.rls import Rls, RlsConfig  # noqa: E402
from estimator.simdata import excite  # noqa: E402

PROFILES = ("sim-2dof", "sim-2dof-realistic")
TARGET_ROWS_PER_S = 20_000.0


def rls_vs_padasip(n: int = 16, N: int = 20_000) -> dict[str, float]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, n))
    d = x @ rng.normal(size=n) + 0.01 * rng.normal(size=N)
    f = pa.filters.FilterRLS(n, mu=0.999, eps=0.01, w="zeros")
    t0 = time.perf_counter()
    f.run(d, x)
    t_pa = time.perf_counter() - t0
    r = Rls(n, 1, RlsConfig(forgetting=0.999, p0=100.0, trace_max=1e300))
    r.update(x[:10, None, :], d[:10, None])  # compile outside the timing
    best = float("inf")
    for _ in range(3):
        r.reset()
        t0 = time.perf_counter()
        r.update(x[:, None, :], d[:, None])
        best = min(best, time.perf_counter() - t0)
    diff = float(np.max(np.abs(r.theta - f.w)) / np.max(np.abs(f.w)))
    return {
        "rls_samples_per_s": N / best,
        "padasip_samples_per_s": N / t_pa,
        "ratio": t_pa / best,
        "max_rel_estimate_difference": diff,
        "same_estimates": diff < 1e-8,
    }


def _feed(profile, names, rows, batch: int, chunk_s: float) -> tuple[float, OnlineIdentifier]:
    ident = OnlineIdentifier(profile, names, chunk_s=chunk_s)
    t0 = time.perf_counter()
    for k in range(0, len(rows), batch):
        ident.update_rows(rows[k : k + batch])
    ident.flush()
    return time.perf_counter() - t0, ident


def pipeline(name: str, seconds: float, batch: int, chunk_s: float, repeats: int) -> dict[str, Any]:
    profile, layout, rows, _ = excite(ROOT / "hw_profiles" / f"{name}.toml", seconds)
    _feed(profile, layout.names, rows[:2000], batch, chunk_s)  # compile outside the timing
    out: dict[str, Any] = {"rig_seconds": seconds, "batch_rows": batch, "chunk_s": chunk_s}
    thetas = {}
    for mode, c in (("message", 0.0), ("chunked", chunk_s)):
        best = float("inf")
        for _ in range(repeats):
            dt, ident = _feed(profile, layout.names, rows, batch, c)
            best = min(best, dt)
        est = ident.estimate()
        thetas[mode] = est.theta
        out[f"{mode}_rows_per_s"] = len(rows) / best
        if est.truth is not None:
            err = np.abs(est.theta - est.truth) / np.abs(est.truth)
            out[f"{mode}_max_rel_error_pct"] = float(100 * err.max())
    scale = np.maximum(np.abs(thetas["message"]), 1e-300)
    out["chunked_vs_message_max_rel_theta_difference"] = float(
        np.max(np.abs(thetas["chunked"] - thetas["message"]) / scale)
    )
    out["chunked_over_message"] = out["chunked_rows_per_s"] / out["message_rows_per_s"]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--profiles", default=",".join(PROFILES), help="hw_profiles names, comma-separated"
    )
    ap.add_argument("--seconds", type=float, default=20.0, help="rig seconds of telemetry (20)")
    ap.add_argument("--batch", type=int, default=20, help="rows per telemetry message (20)")
    ap.add_argument("--chunk-s", type=float, default=0.1, help="chunk of rig time (0.1 s)")
    ap.add_argument("--repeats", type=int, default=3, help="best of K timings (3)")
    args = ap.parse_args(argv)
    if args.seconds <= 0 or args.batch < 1 or args.chunk_s < 0 or args.repeats < 1:
        ap.error("need --seconds > 0, --batch ≥ 1, --chunk-s ≥ 0, --repeats ≥ 1")
    out: dict[str, Any] = {"loadavg_1min": os.getloadavg()[0], "cpus": os.cpu_count()}
    ref = rls_vs_padasip()
    out.update(ref)
    ok = bool(ref["ratio"] >= 10 and ref["same_estimates"])
    pipes = {}
    for name in args.profiles.split(","):
        p = pipeline(name, args.seconds, args.batch, args.chunk_s, args.repeats)
        for mode in ("message", "chunked"):
            p[f"{mode}_over_padasip"] = p[f"{mode}_rows_per_s"] / ref["padasip_samples_per_s"]
        ok &= p["chunked_rows_per_s"] >= TARGET_ROWS_PER_S
        pipes[name] = p
        print(f"{name}: {json.dumps(p)}", file=sys.stderr)
    out["pipeline"] = pipes
    out["target_rows_per_s"] = TARGET_ROWS_PER_S
    out["ok"] = ok
    print(json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
