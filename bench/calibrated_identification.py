"""Calibration removes the sensors' share of the identification error (realistic plant).

    .venv/bin/python bench/calibrated_identification.py [--seeds 5] [--keep DIR]
    .venv/bin/python bench/calibrated_identification.py --from DIR    # compare kept runs only

Three runs of `bench/identification_accuracy.py` per seed, each `rigctl identify` as a user
types it on hw_profiles/sim-2dof-realistic.toml:

- `uncal`: the rig as it is (its transducers' `sim_error`, the declared accuracy classes in
  every σ);
- `cal`: after the calibration procedures on the rig's station (`--calibrate`: pressure zero
  and span, position), the calibration in force in the identification's service;
- `exact`: the same plant, seed and noise with every `sim_error` removed (the `realistic-exact`
  case): what a perfect calibration would give.

Per parameter and seed: the calibrated estimate against the exact-sensor one, within ±3 of
their combined σ (both σ include the sensors' calibration uncertainty), and the uncalibrated
one beside it. Coverage: how often the truth lies within ±3σ with σ from noise alone and with σ
including calibration, uncalibrated and calibrated (the latter must cover at least as often).
JSON on the last line; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {
    "uncal": ["--cases", "realistic"],
    "cal": ["--cases", "realistic", "--calibrate"],
    "exact": ["--cases", "realistic-exact"],
}


def _seed_results(base: Path, variant: str) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for path in sorted((base / variant).glob("*/seed*/seed-result.json")):
        r = json.loads(path.read_text())
        out[int(r["seed"])] = r
    return out


def _params(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rows = r["models"]["profile"]["parameters"]
    return {p["name"]: p for p in rows if "truth" in p}


def _sigma(p: dict[str, Any]) -> float:
    """The 1σ (including calibration) of an estimate; inf when flagged or unknown."""
    sp = p.get("batch_sigma_pct")
    if not p.get("identifiable") or sp is None or not math.isfinite(sp):
        return math.inf
    return abs(p["batch"]) * sp / 100.0


def compare(base: Path) -> dict[str, Any]:
    res = {v: _seed_results(base, v) for v in VARIANTS}
    seeds = sorted(set(res["cal"]) & set(res["exact"]))
    per_seed = []
    agree = {"cal": 0, "uncal": 0}
    measured = 0
    for seed in seeds:
        cal, exact = res["cal"][seed], res["exact"][seed]
        unc = res["uncal"].get(seed)
        if "error" in cal or "error" in exact:
            per_seed.append({"seed": seed, "error": cal.get("error") or exact.get("error")})
            continue
        pc, pe = _params(cal), _params(exact)
        pu = _params(unc) if unc and "error" not in unc else {}
        rows = []
        for name, e in pe.items():
            c = pc.get(name)
            if c is None:
                continue
            s_comb = math.hypot(_sigma(c), _sigma(e))
            row: dict[str, Any] = {
                "name": name,
                "truth": e["truth"],
                "exact": e["batch"],
                "cal": c["batch"],
                "combined_sigma": s_comb,
                "cal_vs_exact_in_sigma": (c["batch"] - e["batch"]) / s_comb,
            }
            if math.isfinite(s_comb):
                measured += 1
                agree["cal"] += abs(c["batch"] - e["batch"]) <= 3.0 * s_comb
            u = pu.get(name)
            if u is not None:
                s_u = math.hypot(_sigma(u), _sigma(e))
                row["uncal"] = u["batch"]
                row["uncal_vs_exact_in_sigma"] = (u["batch"] - e["batch"]) / s_u
                if math.isfinite(s_comb):
                    agree["uncal"] += abs(u["batch"] - e["batch"]) <= 3.0 * s_u
            rows.append(row)
        per_seed.append({"seed": seed, "parameters": rows})
    coverage = {}
    for v in ("uncal", "cal", "exact"):
        runs = [r for r in res[v].values() if "headline" in r]
        n = sum(r["headline"]["with_truth"] for r in runs)
        coverage[v] = {
            "seeds": sorted(r["seed"] for r in runs),
            "parameter_runs": n,
            "within_3sigma_with_calibration": sum(
                r["headline"]["batch_within_3sigma"] for r in runs
            ),
            "within_3sigma_noise_only": sum(
                r["headline"]["batch_within_3sigma_noise_only"] for r in runs
            ),
            "batch_max_error_pct": max(
                (r["headline"]["batch_max_error_pct"] for r in runs), default=None
            ),
        }
    passed = {
        "cal_equals_exact_within_3_combined_sigma": measured > 0 and agree["cal"] == measured,
        "coverage_with_calibration_at_least_noise_only": all(
            c["within_3sigma_with_calibration"] >= c["within_3sigma_noise_only"]
            for k, c in coverage.items()
            if k in ("uncal", "cal") and c["parameter_runs"]
        ),
    }
    return {
        "seeds_compared": seeds,
        "measured_parameter_runs": measured,
        "cal_within_3_combined_sigma_of_exact": agree["cal"],
        "uncal_within_3_combined_sigma_of_exact": agree["uncal"],
        "coverage": coverage,
        "per_seed": per_seed,
        "pass": passed,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--keep", default=None, help="keep the runs under this directory")
    ap.add_argument("--from", dest="base", default=None, help="compare runs kept here only")
    args = ap.parse_args(argv)
    if args.base:
        base = Path(args.base)
    else:
        base = Path(args.keep or ROOT / "runs" / "calibrated-identification")
        for variant, extra in VARIANTS.items():
            print(f"{variant} …", file=sys.stderr, flush=True)
            subprocess.run(
                [sys.executable, str(ROOT / "bench" / "identification_accuracy.py"), *extra,
                 "--seeds", str(args.seeds), "--keep", str(base / variant)],
                check=False, stdout=subprocess.DEVNULL,
            )  # fmt: skip
    print(json.dumps({"bench": "calibrated_identification", **compare(base)}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
