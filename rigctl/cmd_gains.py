"""`rigctl gains JOINT p=8 i=0.5 …`: change PID gains of one joint (`set_gains`).

`rigctl gains load FILE [--profile P --params F]`: apply a gains file that `rigctl tune` wrote,
joint by joint with `set_gains`. A file written for another rig is refused; with the profile and
parameter file, a gain set the linearised model predicts unstable is refused too.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from daq.commands.spec import GAIN_NAMES
from rigctl.common import (
    CommandClient,
    ProtocolError,
    ServiceUnreachable,
    UsageError,
    add_connection_options,
    add_json_option,
    call,
    client_error_exit,
    client_keys,
)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "gains", help="set PID gains of a joint", description=f"gain names: {', '.join(GAIN_NAMES)}"
    )
    p.add_argument("joint", help="joint name, or 'load' to apply a gains file")
    p.add_argument("gains", nargs="+", metavar="NAME=VALUE", help="gains (or, after load, FILE)")
    p.add_argument(
        "--params",
        type=Path,
        default=None,
        help="(load) identified parameters: with --profile, refuse sets predicted unstable",
    )
    add_connection_options(p)
    add_json_option(p)
    p.set_defaults(func=run)


def parse_gains(items: list[str]) -> dict[str, float]:
    gains: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in GAIN_NAMES:
            raise UsageError(f"'{item}': expected NAME=VALUE with NAME in {list(GAIN_NAMES)}")
        try:
            x = float(value)
        except ValueError:
            raise UsageError(f"'{item}': '{value}' is not a number") from None
        if not math.isfinite(x):
            raise UsageError(f"'{item}': the value must be finite")
        gains[name] = x
    return gains


def load_gains(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """The file's gains per joint after the rig and stability checks (UsageError if refused)."""
    from controller import tuning

    if len(args.gains) != 1:
        raise UsageError("gains load takes one FILE")
    path = Path(args.gains[0])
    try:
        d = tuning.read_gains_toml(path)
    except ValueError as exc:
        raise UsageError(f"gains load: {exc}") from None
    keys = client_keys(args)
    with CommandClient(args.endpoint, timeout=args.timeout, keys=keys) as client:
        try:
            desc = client.request("describe", None)
        except (ServiceUnreachable, ProtocolError) as e:
            raise SystemExit(client_error_exit(e)) from None
    joints = [j["name"] for j in desc.get("joints", [])]
    try:
        gains = tuning.read_gains_file(d, str(desc.get("rig")), joints)
    except ValueError as exc:
        raise UsageError(f"gains load: {path}: {exc}") from None
    if args.params is not None and args.profile is None:
        raise UsageError("gains load: --params needs --profile for the stability check")
    if args.params is not None:
        from daq.param_set import read_param_set
        from daq.profile import load_profile

        try:
            prof = load_profile(args.profile)
            params = read_param_set(args.params, prof).params
        except (OSError, ValueError) as exc:
            raise UsageError(f"gains load: {exc}") from None
        home = [math.radians(j.home_deg) for j in prof.joints]
        rows = [gains.get(j.name, {}) for j in prof.joints]
        problems = tuning.check_gains(params, home, prof.period, rows)
        if problems:
            raise UsageError("gains load: refused: " + "; ".join(problems))
    return gains


def run(args: argparse.Namespace) -> int:
    if args.joint != "load":
        return call(args, "set_gains", {"joint": args.joint, "gains": parse_gains(args.gains)})
    rc = 0
    for joint, g in load_gains(args).items():
        rc = call(args, "set_gains", {"joint": joint, "gains": g}) or rc
    return rc
