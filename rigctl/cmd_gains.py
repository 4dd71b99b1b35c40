"""`rigctl gains JOINT p=8 i=0.5 …`: change PID gains of one joint (`set_gains`)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from daq.commands.spec import GAIN_NAMES
from rigctl.common import UsageError, add_connection_options, add_json_option, call


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "gains", help="set PID gains of a joint", description=f"gain names: {', '.join(GAIN_NAMES)}"
    )
    p.add_argument("joint")
    p.add_argument("gains", nargs="+", metavar="NAME=VALUE")
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


def run(args: argparse.Namespace) -> int:
    return call(args, "set_gains", {"joint": args.joint, "gains": parse_gains(args.gains)})
