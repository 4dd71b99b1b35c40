"""`rigctl check EXPERIMENT [--profile P] [--params F]`: validate an experiment offline.

No service and no arming: the file is parsed and checked against the profile's joint limits
exactly as the service's `run` does (`controller.checks`), and every violation is listed in the
file's own units and the profile's joint names. Exit 0 when it would run, 2 otherwise.

The profile is `--profile`, else `$RIG_PROFILE`, else the installed `/etc/rig/profile.toml`.
`--params` is the plant-parameter file the service was started with (`rig-daq --params`): with
it the valve-capacity check and open-loop motion prediction run too, as they do in the service.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from rigctl.cmd_run import load_experiment
from rigctl.common import EXIT_OK, EXIT_USAGE, UsageError, add_json_option

INSTALLED_PROFILE = Path("/etc/rig/profile.toml")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "check", help="validate an experiment file offline against a profile's limits"
    )
    p.add_argument("file", type=Path, help="experiment TOML file")
    p.add_argument(
        "--profile",
        default=None,
        help=f"hardware profile (default $RIG_PROFILE, else {INSTALLED_PROFILE})",
    )
    p.add_argument("--params", default=None, help="plant-parameter file, as given to rig-daq")
    p.add_argument(
        "--predict",
        action="store_true",
        help="also print the predicted σ of every identified parameter (rigctl predict)",
    )
    from rigctl.predict import add_predict_options

    add_predict_options(p)
    add_json_option(p)
    p.set_defaults(func=run)


def _profile_path(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    env = os.environ.get("RIG_PROFILE")
    if env:
        return Path(env)
    if INSTALLED_PROFILE.exists():
        return INSTALLED_PROFILE
    raise UsageError(f"check: give --profile (no $RIG_PROFILE, no {INSTALLED_PROFILE})")


def _experiment_for(path: Path, rig_id: str, n: int) -> tuple[Any, tuple[str, list[str]] | None]:
    """The experiment in `path`, or its refusal (name, problems) when it does not parse or is
    not for a rig of n joints; raises UsageError for unreadable input."""
    from controller.experiment import Experiment, ExperimentError

    data = load_experiment(path)
    try:
        exp = Experiment.from_dict(data)
    except (ExperimentError, ValueError, TypeError, KeyError) as e:
        return None, (str(data.get("name", path.stem)), [f"experiment: {e}"])
    if exp.n_joints != n:
        return None, (
            exp.name,
            [f"experiment: {exp.n_joints} joint(s) (home_deg), rig '{rig_id}' has {n}"],
        )
    return exp, None


def check_file(
    path: Path, profile_path: Path, params_path: str | None = None
) -> tuple[str, list[str]]:
    """(experiment name, one line per problem); raises UsageError for unreadable input."""
    from controller.checks import check_experiment, describe
    from daq.profile import ProfileError, load_profile
    from daq.service.control_api import joint_limits

    try:
        profile = load_profile(profile_path)
    except ProfileError as e:
        raise UsageError(str(e)) from None
    limits = joint_limits(profile)
    exp, refusal = _experiment_for(path, profile.rig.id, len(limits))
    if refusal is not None:
        return refusal
    params = None
    if params_path is not None:
        from daq.param_set import read_param_set

        try:
            params = read_param_set(params_path, profile).params
        except (OSError, ValueError) as e:
            raise UsageError(f"--params {params_path}: {e}") from None
    names = [j.name for j in profile.joints]
    return exp.name, [describe(v, names) for v in check_experiment(exp, limits, params)]


def run(args: argparse.Namespace) -> int:
    profile_path = _profile_path(args.profile)
    from estimator.predict import is_chain_profile

    if is_chain_profile(profile_path):
        name, problems = check_chain_file(args.file, profile_path)
    else:
        name, problems = check_file(args.file, profile_path, args.params)
    pred = None
    if getattr(args, "predict", False) and not problems:
        from rigctl.predict import predict

        pred = predict(args, profile_path, args.file)
    if args.json:
        out: dict[str, Any] = {"experiment": name, "ok": not problems, "violations": problems}
        if pred is not None:
            out["prediction"] = pred.to_json()
        print(json.dumps(out))
    elif problems:
        print(
            f"{args.file}: experiment '{name}' violates {profile_path}'s limits ({len(problems)}):",
            file=sys.stderr,
        )
        for line in problems:
            print(f"  {line}", file=sys.stderr)
    else:
        print(f"{args.file}: experiment '{name}' is within {profile_path}'s limits")
        if pred is not None:
            from rigctl.predict import print_prediction

            print_prediction(pred)
    return EXIT_USAGE if problems else EXIT_OK


def check_chain_file(path: Path, profile_path: Path) -> tuple[str, list[str]]:
    """A chain profile (its experiments are planned offline, docs/excavator.md): the
    experiment's planned angles inside the windows the jack strokes allow, its speeds inside
    what the valves can feed (`controller.chain_experiments.chain_limits` with no margin and
    the whole valve flow)."""
    import math

    import numpy as np

    from controller.chain_experiments import chain_limits
    from controller.plant.chain.profile import ChainProfileError, load_chain_profile
    from estimator.predict import experiment_reference

    try:
        prof = load_chain_profile(profile_path)
    except ChainProfileError as e:
        raise UsageError(str(e)) from None
    exp, refusal = _experiment_for(path, prof.rig_id, prof.chain.n)
    if refusal is not None:
        return refusal
    lims = chain_limits(prof.chain, list(exp.home), margin=0.0, speed_fraction=1.0)
    _, q, qd, _, _ = experiment_reference(exp, 100.0)
    problems = []
    for i, (lm, name) in enumerate(zip(lims, prof.chain.names, strict=True)):
        lo, hi = q[:, i].min(), q[:, i].max()
        if lo < lm.position_min or hi > lm.position_max:
            problems.append(
                f"{name}: planned angle {math.degrees(lo):.2f}…{math.degrees(hi):.2f}° outside "
                f"the window its jack strokes allow, {math.degrees(lm.position_min):.2f}…"
                f"{math.degrees(lm.position_max):.2f}°"
            )
        v = np.abs(qd[:, i]).max()
        if v > lm.max_velocity:
            problems.append(
                f"{name}: planned speed {math.degrees(v):.2f}°/s above what its valve can feed, "
                f"{math.degrees(lm.max_velocity):.2f}°/s"
            )
    return exp.name, problems
