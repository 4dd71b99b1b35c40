"""How far a parameter error moves the closed-loop validation's FIT (the report's "FIT % closed
loop" rows, `estimator.validation_closed_loop`), on the nominal simulator.

    .venv/bin/python bench/closed_loop_fit_sensitivity.py [--result R.json] [--draws N]
                     [--scale S] [--params 1/b,M1] [--steps 0.002,0.01,0.03]

Runs the README's main command once (`rigctl identify --profile hw_profiles/sim-2dof.toml
--virtual-time --json`), or reads a result it printed (`--result`), and replays its validation
run in closed loop with the simulator's own plant (the report's truth row) and with that plant
changed:

  one at a time   each of `--params` scaled by 1 ± each of `--steps`;
  draws           every parameter scaled by 1 + S·σᵢ·N(0, 1), σᵢ the batch's own relative σ
                  (independent draws: the estimate's correlations left out);

and prints each output's FIT loss against the truth row (points), the draws' percentiles, and
the identified estimates' own losses from the result. This is the evidence behind the bound of
the end-to-end test (tests/e2e/test_identify_end_to_end.py): how far from the truth's FIT an
estimate that keeps its ±3σ promise may land. JSON on the last line; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.identification_accuracy import run_identify  # noqa: E402
from daq.profile.plant import sim_plant  # noqa: E402
from estimator.report.analysis import run_closed_loop_validation  # noqa: E402
from estimator.report.runs import load_run  # noqa: E402

PROFILE = ROOT / "hw_profiles" / "sim-2dof.toml"
PRESSURES = ("p_cap1", "p_rod1", "p_cap2", "p_rod2")


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--result", help="a `rigctl identify --json` result (else one is run)")
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--scale", type=float, default=1.0, help="draws' σ multiple")
    ap.add_argument("--params", default="1/b,M1")
    ap.add_argument("--steps", default="0.002,0.01,0.03")
    ap.add_argument("--seed", type=int, default=0, help="the draws' generator")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.result:
        result = json.loads(Path(args.result).read_text().strip().splitlines()[-1])
    else:
        _say("running rigctl identify (nominal profile, virtual time)")
        result, _ = run_identify(PROFILE, Path(tempfile.mkdtemp(prefix="clfit-")) / "out")
    rd = load_run(Path(result["validation_run"]), PROFILE, what="validation run")
    params, effects = sim_plant(rd.profile)
    names = params.mech_names() + params.fluid_names()
    n_mech = len(params.mech_names())
    theta = np.concatenate([params.theta_mech(), params.theta_fluid()])
    notes: list[str] = []

    def fit(th: np.ndarray) -> dict[str, float]:
        p = params.with_identified(theta_mech=th[:n_mech], theta_fluid=th[n_mech:])
        cl = run_closed_loop_validation(rd, (p, effects), "perturbed", notes)
        if cl is None:
            raise SystemExit(f"closed-loop validation failed: {notes}")
        return cl.fit

    truth = fit(theta)
    outputs = sorted(truth)

    def loss(th: np.ndarray) -> dict[str, float]:
        f = fit(th)
        return {k: round(truth[k] - f[k], 3) for k in outputs}

    single: dict[str, dict[str, dict[str, float]]] = {}
    for name in args.params.split(","):
        i = names.index(name)
        single[name] = {}
        for step in (float(s) for s in args.steps.split(",")):
            for sign in (1.0, -1.0):
                th = theta.copy()
                th[i] *= 1.0 + sign * step
                key = f"{sign * step:+g}"
                single[name][key] = loss(th)
                _say(f"{name} {key}: p_cap1 loss {single[name][key]['p_cap1']} points")
    sigma = np.array(
        [next(p["batch_sigma_pct"] for p in result["parameters"] if p["name"] == n) for n in names]
    )
    rng = np.random.default_rng(args.seed)
    draws = []
    for k in range(args.draws):
        th = theta * (1.0 + args.scale * sigma / 100.0 * rng.standard_normal(theta.size))
        draws.append(loss(th))
        _say(f"draw {k + 1}/{args.draws}: p_cap1 loss {draws[-1]['p_cap1']} points")
    pct = (
        {
            k: dict(
                zip(
                    ("p50", "p90", "p99", "max"),
                    np.percentile([d[k] for d in draws], [50, 90, 99, 100]).round(2).tolist(),
                    strict=True,
                )
            )
            for k in PRESSURES
        }
        if draws
        else {}
    )
    own = {
        r["output"]: {e: round(r["truth"] - r[e], 3) for e in ("online", "batch")}
        for r in result["fit"]
        if r["kind"] == "FIT % closed loop"
    }
    out: dict[str, Any] = {
        "validation_run": result["validation_run"],
        "truth_fit_closed_loop_pct": {k: round(v, 3) for k, v in truth.items()},
        "one_at_a_time_loss_points": single,
        "draws": args.draws,
        "draw_scale_sigma": args.scale,
        "draws_loss_points": pct,
        "estimates_loss_points": own,
        "batch_sigma_pct": dict(zip(names, sigma.round(4).tolist(), strict=True)),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
