"""Wall and CPU time of the batch identification on a recorded realistic run, fast path against
the reference path, in the same session, with the two results compared.

    .venv/bin/python bench/batch_speed.py [--run RUN.rigrun] [--profile P] [--repeats N]
                                          [--blas-threads K]

The batch is what `rigctl identify` runs on its recording (estimator.report.analysis
.batch_identify: the profile's models, the Coulomb band and valve switch searches, the
output-error refinement, the sensor-uncertainty refits). Without `--run` the bench records one
first: `rigctl identify --profile P --virtual-time --validation none --no-report --no-verify`
(which runs a batch of its own, not timed here).

Paths, each timed in its own fresh process, alternately (`--repeats` rounds):
  fast       the code as it is;
  reference  the same batch with what makes it fast switched off: the Lin fluid regressor's
             NumPy definition (`models_lin.lin_fluid_regressor_reference`) instead of the
             compiled one, every structure candidate scored by a full fit (`fit_blocks`)
             instead of its residual alone, the static part added and the decimation scaled
             over the whole Φ, and each sensor refit conditioning every signal again (the
             conditioned signals are still shared by a search's candidates, as before).
`--blas-threads K` runs both with K BLAS threads (the batch runs one unless told otherwise:
estimator.blas; OpenBLAS's threads wait for each other on a busy machine). Both must give the
same estimates: every θ and σ, flag, note and warning (`equal`; the largest relative θ and σ
difference beside it). Figures on a shared machine are loaded: the load average is printed
with them.

JSON on the last line: per path the wall and CPU seconds of each round and their medians, the
ratio reference/fast (wall and CPU), the comparison, the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "hw_profiles" / "sim-2dof-realistic.toml"


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def use_reference_path() -> None:
    """Switch this process to the reference path (module doc)."""
    import estimator.model_fit as mf
    import estimator.models_lin as ml
    import estimator.observation as ob

    ml.lin_fluid_regressor = ml.lin_fluid_regressor_reference
    plain_conditioned = ob.conditioned

    def plus_filtered(base: np.ndarray, a: np.ndarray, linear: Any) -> np.ndarray:
        return base + ob.nonzero_columns(linear, a)

    def scaled_nonzero(linear: Any, a: np.ndarray, scale: np.ndarray) -> np.ndarray:
        return ob.nonzero_columns(linear, a * scale)

    def conditioned(raw: np.ndarray, sos: np.ndarray, fs: float, nj: int, memo: Any = None) -> Any:
        return plain_conditioned(raw, sos, fs, nj)

    def full_fit(mdl: Any, raw: np.ndarray, blks: Any, **kw: Any) -> Any:
        got = mf.fit_blocks(mdl, raw, blks, jackknife_groups=0, refine=False, **kw)
        return None if got is None else (got[0].residual_var, got[0].equation_sigma)

    ob._plus_filtered = plus_filtered
    ob._scaled_nonzero = scaled_nonzero
    ob.conditioned = conditioned
    mf.candidate_residuals = full_fit


def worker(run: str, profile: str, path: str, out: str) -> None:
    """One timed batch in this process; its result pickled to `out`."""
    if path == "reference":
        use_reference_path()
    from estimator.report.analysis import batch_identify
    from estimator.report.runs import load_run

    rd = load_run(run, profile)
    wall, cpu = time.perf_counter(), time.process_time()
    res = batch_identify(rd)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    with open(out, "wb") as fh:
        pickle.dump(
            {
                "wall_s": wall,
                "cpu_s": cpu,
                "names": res.names,
                "theta": res.theta,
                "sigma_pct": res.sigma_pct,
                "theta_wls": res.theta_wls,
                "identifiable": res.identifiable,
                "methods": res.methods,
                "warnings": res.warnings,
                "notes": res.notes,
            },
            fh,
        )


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    both = np.isfinite(a) & np.isfinite(b)
    if not np.array_equal(np.isfinite(a), np.isfinite(b)):
        return float("inf")
    d = np.abs(a[both] - b[both]) / np.maximum(np.abs(b[both]), 1e-300)
    return float(d.max(initial=0.0))


def compare(fast: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    same_words = all(fast[k] == ref[k] for k in ("names", "methods", "warnings", "notes"))
    flags = bool(np.array_equal(fast["identifiable"], ref["identifiable"]))
    d_theta = max(_rel(fast["theta"], ref["theta"]), _rel(fast["theta_wls"], ref["theta_wls"]))
    d_sigma = _rel(fast["sigma_pct"], ref["sigma_pct"])
    return {
        "equal": bool(same_words and flags and d_theta <= 1e-10 and d_sigma <= 1e-10),
        "bit_equal": bool(same_words and flags and d_theta == 0.0 and d_sigma == 0.0),
        "words_and_flags_equal": bool(same_words and flags),
        "max_rel_theta": d_theta,
        "max_rel_sigma": d_sigma,
    }


def record(profile: Path, where: Path) -> Path:
    cmd = [
        sys.executable, "-m", "rigctl.main", "identify", "--profile", str(profile),
        "--virtual-time", "--validation", "none", "--no-report", "--no-verify",
        "--out", str(where),
    ]  # fmt: skip
    _say(f"recording: {' '.join(cmd)}")
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return where / "identification.rigrun"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", help="a recorded identification run (default: record one)")
    ap.add_argument("--profile", default=str(PROFILE))
    ap.add_argument("--repeats", type=int, default=1, help="rounds of (reference, fast)")
    ap.add_argument("--only", choices=("fast", "reference"), help="time one path only")
    ap.add_argument(
        "--blas-threads", type=int, help="BLAS threads of the timed runs (default: the batch's: 1)"
    )
    ap.add_argument("--worker", nargs=3, metavar=("RUN", "PATH", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], args.profile, args.worker[1], args.worker[2])
        return
    with tempfile.TemporaryDirectory(prefix="batch_speed_") as tmp:
        run = Path(args.run) if args.run else record(Path(args.profile), Path(tmp) / "rec")
        load_before = os.getloadavg()
        paths = [args.only] if args.only else ["reference", "fast"]
        got: dict[str, list[dict[str, Any]]] = {p: [] for p in paths}
        for k in range(args.repeats):
            for path in paths:
                out = Path(tmp) / f"{path}-{k}.pkl"
                cmd = [sys.executable, __file__, "--profile", args.profile,
                       "--worker", str(run), path, str(out)]  # fmt: skip
                env = dict(os.environ)
                if args.blas_threads:
                    env["OPENBLAS_NUM_THREADS"] = str(args.blas_threads)
                    env["HYDRIG_BLAS_THREADS"] = str(args.blas_threads)  # estimator.blas
                subprocess.run(cmd, check=True, cwd=ROOT, env=env)
                with open(out, "rb") as fh:
                    got[path].append(pickle.load(fh))
                r = got[path][-1]
                _say(f"round {k + 1} {path}: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU, "
                     f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
        load_after = os.getloadavg()
    result: dict[str, Any] = {
        "run": str(run),
        "profile": args.profile,
        "blas_threads": args.blas_threads or os.environ.get("OPENBLAS_NUM_THREADS"),
    }
    for path, rs in got.items():
        result[path] = {
            "wall_s": [round(r["wall_s"], 2) for r in rs],
            "cpu_s": [round(r["cpu_s"], 2) for r in rs],
            "wall_median_s": round(float(np.median([r["wall_s"] for r in rs])), 2),
            "cpu_median_s": round(float(np.median([r["cpu_s"] for r in rs])), 2),
        }
    if len(got) == 2:
        f, r = result["fast"], result["reference"]
        result["ratio_wall"] = round(r["wall_median_s"] / f["wall_median_s"], 2)
        result["ratio_cpu"] = round(r["cpu_median_s"] / f["cpu_median_s"], 2)
        result["comparison"] = compare(got["fast"][0], got["reference"][0])
    result["loadavg_before"] = [round(v, 2) for v in load_before]
    result["loadavg_after"] = [round(v, 2) for v in load_after]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
