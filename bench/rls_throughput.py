"""RLS throughput against padasip's FilterRLS (same data, same estimates), and the whole online
pipeline (conditioning + regressors + RLS) on simulated 2-DOF telemetry rows.

    /work/venv/bin/python bench/rls_throughput.py       # JSON on the last line
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import padasip as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from estimator.online import OnlineIdentifier  # noqa: E402
from estimator.rls import Rls, RlsConfig  # noqa: E402
from tests.estimator.simdata import excite  # noqa: E402


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
    r.reset()
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


def pipeline(seconds: float = 30.0, batch: int = 20) -> dict[str, float]:
    profile, layout, rows, _ = excite(ROOT / "hw_profiles" / "sim-2dof.toml", seconds)
    warm = OnlineIdentifier(profile, layout.names)
    warm.update_rows(rows[:500])
    ident = OnlineIdentifier(profile, layout.names)
    t0 = time.perf_counter()
    for k in range(0, len(rows), batch):
        ident.update_rows(rows[k : k + batch])
    dt = time.perf_counter() - t0
    est = ident.estimate()
    err = np.abs(est.theta - est.truth) / np.abs(est.truth)
    return {
        "pipeline_samples_per_s": len(rows) / dt,
        "pipeline_batch_rows": batch,
        "pipeline_rig_seconds": seconds,
        "pipeline_max_rel_error_pct": float(100 * err.max()),
        "pipeline_errors_pct": {n: float(100 * e) for n, e in zip(est.names, err, strict=True)},
    }


def main() -> int:
    out = rls_vs_padasip()
    out.update(pipeline())
    out["ok"] = bool(
        out["ratio"] >= 10 and out["same_estimates"] and out["pipeline_samples_per_s"] >= 20_000
    )
    print(json.dumps(out))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
