"""`rigctl predict --profile P --experiment E`: the σ every identified parameter will have,
before anything moves (estimator.predict).

From the sensors' declared noise and accuracy and the experiment's planned reference: the
Fisher information of the models' regressors along the motion, the noise drawn through the
filters the batch uses (for a chain the motion is its own model simulated tracking the plan,
`--motion plan` for the plan itself). For a chain profile (`[chain]`, e.g.
hw_profiles/sim-excavator.toml) the base parameters of the complete (or `--model reduced`)
model with their definitions and the identifiability class of every physical parameter; for a
1-/2-DOF service profile the batch's reference models, planned with `--params` (an earlier
identification) or the profile's initial guesses — never a simulated rig's true plant. No
service is needed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from rigctl.common import EXIT_OK, UsageError, add_json_option, limit_estimator_threads


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "predict",
        help="predicted σ of every identified parameter for an experiment, before it runs",
    )
    p.add_argument("--profile", required=True, type=Path, help="hardware profile (TOML)")
    p.add_argument("--experiment", required=True, type=Path, help="experiment file (TOML)")
    p.add_argument(
        "--params",
        default=None,
        help="service profiles: plan with this parameter file (an earlier identification) "
        "instead of the profile's initial guesses",
    )
    add_predict_options(p)
    add_json_option(p)
    p.set_defaults(func=run)


def add_predict_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--sensors",
        default="thesis",
        help="chain profiles: the [sensors.<grade>] to predict with (default thesis)",
    )
    p.add_argument(
        "--model",
        choices=("complete", "reduced"),
        default="complete",
        help="chain profiles: with the jacks' cylinders and pistons (complete) or without",
    )
    p.add_argument(
        "--motion",
        choices=("simulated", "plan"),
        default="simulated",
        help="chain profiles: propagate the noise along the profile's chain simulated tracking "
        "the plan and read by the sensors (default), or along the plan itself",
    )
    p.add_argument(
        "--draws",
        type=int,
        default=None,
        help="noise draws (σ's own sampling error ≈ 1/√(2·draws); default 50 chain, 30 others)",
    )


def predict(args: argparse.Namespace, profile: Path, experiment: Path) -> Any:
    """The `estimator.predict.Prediction` for the arguments; UsageError on bad input."""
    from controller.experiment import Experiment, ExperimentError
    from estimator.predict import is_chain_profile, predict_chain, predict_service_rig
    from rigctl.cmd_run import load_experiment

    limit_estimator_threads()

    if args.draws is not None and not 2 <= args.draws <= 10000:
        raise UsageError(f"--draws must be in [2, 10000], got {args.draws}")
    if not profile.exists():
        raise UsageError(f"--profile {profile}: no such file")
    data = load_experiment(experiment)
    try:
        exp = Experiment.from_dict(data)
    except (ExperimentError, ValueError, TypeError, KeyError) as e:
        raise UsageError(f"{experiment}: {e}") from None
    try:
        if is_chain_profile(profile):
            return predict_chain(
                profile, exp, grade=args.sensors, minor=args.model == "complete",
                draws=args.draws or 50, motion=getattr(args, "motion", "simulated"),
            )  # fmt: skip
        return predict_service_rig(
            profile, exp, draws=args.draws or 30, params_path=getattr(args, "params", None)
        )
    except ValueError as e:
        raise UsageError(str(e)) from None


def _fmt(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else str(x)


def print_prediction(pred: Any, out: Any = sys.stdout) -> None:
    print(
        f"predicted σ for rig '{pred.rig}', experiment '{pred.experiment}', sensors "
        f"'{pred.sensors}' ({pred.seconds:.0f} s of planned motion) — before anything moves:",
        file=out,
    )
    for m in pred.models:
        print(f"\n  model {m.model}: {len(m.names)} parameters", file=out)
        w = max(len(n) for n in m.names)
        print(f"  {'parameter':<{w}}  {'nominal':>11}  {'σ':>10}  {'σ %':>8}", file=out)
        for k, (n, v, s, pct) in enumerate(
            zip(m.names, m.nominal, m.sigma, m.sigma_pct, strict=True)
        ):
            pct_s = f"{pct:8.3g}" if math.isfinite(pct) else "       –"
            line = f"  {n:<{w}}  {_fmt(v):>11}  {_fmt(s):>10}  {pct_s}"
            if m.definitions:
                line += f"  = {m.definitions[k]}"
            print(line, file=out)
        if m.classes:
            groups: dict[str, list[str]] = {}
            for nm, c in m.classes.items():
                groups.setdefault(c, []).append(nm)
            print("\n  identifiability of the physical parameters:", file=out)
            for c in ("alone", "in combination", "unidentifiable"):
                names = groups.get(c, [])
                print(f"    {c} ({len(names)}): {', '.join(names)}", file=out)
    for note in pred.notes:
        print(f"\n  note: {note}", file=out)


def run(args: argparse.Namespace) -> int:
    pred = predict(args, args.profile, args.experiment)
    if args.json:
        print(json.dumps(pred.to_json()))
    else:
        print_prediction(pred)
    return EXIT_OK
