"""Which of the realistic plant's effects bias which parameters: an error budget (issue 14).

    .venv/bin/python bench/identification_error_budget.py [--seeds 1] [--variants a,b]

`hw_profiles/sim-2dof-realistic.toml` switches on every effect of docs/simulator.md at once;
its headline figures (bench/identification_accuracy.py --cases realistic) say *that* the model
family the profile chooses is biased there, not *why*. This bench runs the same end-to-end
identification (`rigctl identify --virtual-time`, the profile's model family, the standard
experiment) on copies of that profile with effects switched off:

  in_family         only what the family models: Lin's asymmetric Coulomb + direction-dependent
                    viscous friction, piston leakage, the true (hose) dead volumes, the valve
                    null bias; no stiction, no air, oil at its reference temperature, no
                    underlap or null leakage, no external leakage, sensors as declared;
  +stiction         in_family + stiction/Stribeck (the profile's breakaway forces);
  +air              in_family + 1 % entrained air;
  +cold_oil         in_family + the thermal model (cold start at 22 °C, warming);
  +lap              in_family + valve underlap, null leakage and null shift with temperature;
  +external_leak    in_family + rod-seal leakage to drain;
  +sensor_errors    in_family + every channel's offset, gain error and drift;
  realistic         the profile as shipped.

Per variant (worst over seeds): the batch estimate's largest error over the parameters with a
simulator truth, the same over the parameters printed as measured (not flagged), the worst
parameter, truth within ±3σ, flagged count, the online estimate's largest error. The truth is
the bench's usual one (bench/identification_accuracy.py `realistic`): the simulator's plant at
its reference oil temperature. JSON on the last line; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from identification_accuracy import (  # noqa: E402
    REALISTIC,
    _say,
    realistic,
    run_identify,
    seeded_profile,
)


def drop_keys(*keys: str) -> Callable[[str], str]:
    """Remove every `key = …` line (the schema's default is "effect off")."""
    alternatives = "|".join(map(re.escape, keys))
    pattern = re.compile(rf"^(?:{alternatives})\s*=.*\n", flags=re.M)
    return lambda text: pattern.sub("", text)


def drop_table(header: str) -> Callable[[str], str]:
    """Remove the `[header]` table and its keys, up to the next table header."""
    pattern = re.compile(rf"^\[{re.escape(header)}\]\s*\n(?:(?!\[).*\n)*", flags=re.M)
    return lambda text: pattern.sub("", text)


EFFECTS: dict[str, Callable[[str], str]] = {
    "stiction": drop_keys("stiction_pos_n", "stiction_neg_n", "stribeck_velocity_m_s"),
    "air": drop_keys("air_content", "polytropic_index"),
    "cold_oil": drop_table("backend.sim.plant.thermal"),
    "lap": drop_keys("lap_v", "null_leakage_l_min", "null_shift_v_per_k"),
    "external_leak": drop_keys("external_m3_s_per_pa"),
    "sensor_errors": drop_keys("sim_error"),
}
TABLE_KEYS = (
    "batch_max_error_pct",
    "batch_worst",
    "batch_max_error_measured_pct",
    "batch_worst_measured",
    "within_3sigma",
    "with_truth",
    "flagged",
    "online_max_error_pct",
)
VARIANTS = ("in_family", *(f"+{e}" for e in EFFECTS), "realistic")


def variant_text(text: str, variant: str) -> str:
    """The profile's text with every effect off but the variant's own."""
    if variant == "realistic":
        return text
    keep = variant[1:] if variant.startswith("+") else None
    for name, remove in EFFECTS.items():
        if name != keep:
            text = remove(text)
    return text


def variant_profile(seeded: Path, variant: str, where: Path) -> Path:
    from daq.profile import load_profile

    out = where / f"{seeded.stem}-{variant.lstrip('+')}.toml"
    out.write_text(variant_text(seeded.read_text(), variant))
    load_profile(out)  # a variant the schema refuses is a bug of this bench, not a figure
    return out


def headline(run: dict[str, Any]) -> dict[str, Any]:
    rows = [r for r in run["models"]["profile"]["parameters"] if "truth" in r]
    worst = max(rows, key=lambda r: abs(r["batch_error_pct"]))
    measured = [r for r in rows if r["identifiable"]]
    worst_measured = max(measured, key=lambda r: abs(r["batch_error_pct"]), default=None)
    h = run["headline"]
    return {
        "batch_max_error_pct": abs(worst["batch_error_pct"]),
        "batch_worst": worst["name"],
        "batch_max_error_measured_pct": (
            None if worst_measured is None else abs(worst_measured["batch_error_pct"])
        ),
        "batch_worst_measured": None if worst_measured is None else worst_measured["name"],
        "within_3sigma": h["batch_within_3sigma"],
        "with_truth": h["with_truth"],
        "flagged": h["flagged"],
        "online_max_error_pct": h["online_max_error_pct"],
        # name: [error %, σ % (None: flagged), truth within ±3σ]
        "parameters": {
            r["name"]: [
                round(r["batch_error_pct"], 2),
                None
                if not r["identifiable"] or r["batch_sigma_pct"] is None
                else round(r["batch_sigma_pct"], 2),
                r["batch_within_3sigma"],
            ]
            for r in rows
        },
    }


def run_variant(variant: str, seeds: Sequence[int], base: Path) -> dict[str, Any]:
    per_seed = []
    for seed in seeds:
        where = base / variant.lstrip("+") / f"seed{seed}"
        where.mkdir(parents=True, exist_ok=True)
        prof = variant_profile(seeded_profile(REALISTIC, seed, where), variant, where)
        result, wall = run_identify(prof, where / "identify")
        h = {"seed": seed, "wall_s": round(wall, 1), **headline(realistic(result, prof))}
        per_seed.append(h)
        _say(
            f"{variant} seed {seed}: batch max {h['batch_max_error_pct']:.2f} % "
            f"({h['batch_worst']}), measured max {h['batch_max_error_measured_pct']} "
            f"({h['batch_worst_measured']}), ±3σ {h['within_3sigma']}/{h['with_truth']}, "
            f"flagged {h['flagged']}, online max {h['online_max_error_pct']}, {wall:.0f} s"
        )
    worst = max(per_seed, key=lambda h: h["batch_max_error_pct"])
    return {"variant": variant, "worst_seed": worst, "seeds": per_seed}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=1, help="simulator seeds 1..N")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=", ".join(VARIANTS))
    ap.add_argument("--keep", type=Path, help="keep every run's profile and output here")
    args = ap.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}")
    seeds = list(range(1, args.seeds + 1))
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        out = [run_variant(v, seeds, args.keep) for v in variants]
    else:
        with tempfile.TemporaryDirectory(prefix="error-budget-") as tmp:
            out = [run_variant(v, seeds, Path(tmp)) for v in variants]
    table = {o["variant"]: {k: o["worst_seed"][k] for k in TABLE_KEYS} for o in out}
    for variant, row in table.items():
        print(f"{variant:16s} {json.dumps(row)}", flush=True)
    print(json.dumps({"seeds": seeds, "variants": out, "table": table}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
