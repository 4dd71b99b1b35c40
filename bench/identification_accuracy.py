"""Identification accuracy of the end-to-end demo against the simulator's truth (issues 6, 9).

    /work/venv/bin/python bench/identification_accuracy.py [--seeds N] [--profile P]

Each repeat runs the README's main command as a user would, in its own process:
`rigctl identify --profile <P with [backend.sim] seed = k> --virtual-time --json --out <tmp>`
(rig-daq and rig-estimator as processes, the standard experiment, the online estimate, batch
IDIM-WLS of the recording, a validation run and the report). It reports, per seed and worst
over seeds: the 16 parameters' truth, online and batch estimates with %σ and relative error;
how many lie within ±3σ of the truth; the validation FIT ratios (from the report's FIT table)
with the online, batch and true parameters; the experiment's rig time (the RUNNING block of the
identification recording: no idle before it); targets and pass flags; wall time.
JSON on the last line; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from estimator.report.runs import load_run  # noqa: E402

TARGETS = {
    "online_max_error_pct": 3.0,
    "batch_max_error_pct": 1.5,
    "min_within_3sigma": 14,
    "max_experiment_rig_s": 120.0,
    "min_fit_displacement_pct": 90.0,
    "min_fit_pressure_pct": 80.0,
}
DISPLACEMENT = ("s",)
PRESSURE = ("p_cap", "p_rod")


def seeded_profile(profile: Path, seed: int, where: Path) -> Path:
    """A copy of `profile` with `[backend.sim] seed = seed` (the rest byte for byte)."""
    text = profile.read_text()
    section = re.search(r"^\[backend\.sim\]\s*$", text, flags=re.M)
    if section is None:
        raise SystemExit(f"{profile}: no [backend.sim] section to seed")
    body_end = re.search(r"^\[", text[section.end() :], flags=re.M)
    stop = section.end() + (body_end.start() if body_end else len(text) - section.end())
    body = text[section.end() : stop]
    if re.search(r"^seed\s*=", body, flags=re.M):
        body = re.sub(r"^seed\s*=.*$", f"seed = {seed}", body, count=1, flags=re.M)
    else:
        body = f"\nseed = {seed}" + body
    out = where / f"{profile.stem}-seed{seed}.toml"
    out.write_text(text[: section.end()] + body + text[stop:])
    with open(out, "rb") as f:
        assert tomllib.load(f)["backend"]["sim"]["seed"] == seed
    return out


def nominal_length(experiment: Path) -> float:
    """Sum of the experiment's segment durations × repeats (s)."""
    with open(experiment, "rb") as f:
        exp = tomllib.load(f)
    return float(sum(s["duration_s"] * s.get("repeats", 1) for s in exp["segments"]))


def run_identify(profile: Path, out: Path) -> tuple[dict[str, Any], float]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "daq.rigctl.main", "identify", "--profile", str(profile)]
    cmd += ["--virtual-time", "--json", "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"rigctl identify failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    params = result["parameters"]
    out: dict[str, Any] = {"parameters": params}
    for est in ("online", "batch"):
        errs = [abs(p[f"{est}_error_pct"]) for p in params]
        worst = max(range(len(errs)), key=errs.__getitem__)
        out[f"{est}_max_error_pct"] = errs[worst]
        out[f"{est}_worst_parameter"] = params[worst]["name"]
        out[f"{est}_within_3sigma"] = sum(bool(p[f"{est}_within_3sigma"]) for p in params)
    fit: dict[str, dict[str, float | None]] = {}
    for row in result.get("fit", []):
        if row["kind"].startswith("FIT"):
            fit[row["output"]] = {k: _finite(row.get(k)) for k in ("online", "batch", "truth")}
    out["fit_pct"] = fit
    for est in ("online", "batch", "truth"):
        for label, prefixes in (("displacement", DISPLACEMENT), ("pressure", PRESSURE)):
            vals = [
                x
                for k, v in fit.items()
                if k.rstrip("0123456789") in prefixes and (x := v[est]) is not None
            ]
            out[f"fit_min_{label}_{est}_pct"] = min(vals) if vals else None
    run = load_run(result["identification_run"])
    out["experiment_rig_s"] = run.duration
    out["recording_complete"] = bool(run.run.complete)
    out["report"] = result.get("report")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=1, help="repeats with simulator seeds 1..N")
    ap.add_argument("--profile", default=str(ROOT / "hw_profiles" / "sim-2dof.toml"))
    ap.add_argument("--keep", help="keep every run's output under this directory")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error("--seeds must be ≥ 1")
    profile = Path(args.profile).resolve()
    t_all = time.perf_counter()
    runs = []
    with tempfile.TemporaryDirectory(prefix="ident-acc-") as tmp:
        base = Path(args.keep) if args.keep else Path(tmp)
        for seed in range(1, args.seeds + 1):
            out = base / f"seed{seed}"
            out.mkdir(parents=True, exist_ok=True)
            prof = seeded_profile(profile, seed, out)
            result, wall = run_identify(prof, out / "identify")
            s = {"seed": seed, "wall_s": wall, **summarise(result)}
            runs.append(s)
            print(
                f"seed {seed}: online max {s['online_max_error_pct']:.2f} % "
                f"({s['online_worst_parameter']}), batch max {s['batch_max_error_pct']:.2f} % "
                f"({s['batch_worst_parameter']}), ±3σ {s['online_within_3sigma']}/"
                f"{s['batch_within_3sigma']}, {s['experiment_rig_s']:.1f} s rig, {wall:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    def worst(key: str, fn: Any = max) -> Any:
        vals = [r[key] for r in runs if r[key] is not None]
        return fn(vals) if vals else None

    w = {
        "online_max_error_pct": worst("online_max_error_pct"),
        "batch_max_error_pct": worst("batch_max_error_pct"),
        "online_min_within_3sigma": worst("online_within_3sigma", min),
        "batch_min_within_3sigma": worst("batch_within_3sigma", min),
        "experiment_rig_s": worst("experiment_rig_s"),
    }
    for est in ("online", "batch", "truth"):
        for label in ("displacement", "pressure"):
            w[f"fit_min_{label}_{est}_pct"] = worst(f"fit_min_{label}_{est}_pct", min)
    t = TARGETS
    passed = {
        "online_error": w["online_max_error_pct"] <= t["online_max_error_pct"],
        "batch_error": w["batch_max_error_pct"] <= t["batch_max_error_pct"],
        "online_within_3sigma": w["online_min_within_3sigma"] >= t["min_within_3sigma"],
        "batch_within_3sigma": w["batch_min_within_3sigma"] >= t["min_within_3sigma"],
        "experiment_length": w["experiment_rig_s"] <= t["max_experiment_rig_s"],
        "fit_displacement": all(
            (w[f"fit_min_displacement_{e}_pct"] or -math.inf) >= t["min_fit_displacement_pct"]
            for e in ("online", "batch")
        ),
        "fit_pressure": all(
            (w[f"fit_min_pressure_{e}_pct"] or -math.inf) >= t["min_fit_pressure_pct"]
            for e in ("online", "batch")
        ),
        "recordings_complete": all(r["recording_complete"] for r in runs),
    }
    passed["all"] = all(passed.values())
    experiment = ROOT / "experiments" / "standard-2dof.toml"
    summary = {
        "bench": "identification_accuracy",
        "profile": str(profile),
        "experiment": str(experiment.relative_to(ROOT)),
        "experiment_nominal_s": nominal_length(experiment),
        "seeds": [r["seed"] for r in runs],
        "targets": TARGETS,
        "worst": w,
        "pass": passed,
        "runs": runs,
        "wall_s": time.perf_counter() - t_all,
    }
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
