"""`rigctl record start [--name N] [--note T]` / `rigctl record stop`."""

from __future__ import annotations

import argparse
from typing import Any

from rigctl.common import add_connection_options, add_json_option, call


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("record", help="start or stop a recording")
    p.add_argument("action", choices=("start", "stop"))
    p.add_argument("--name", default=None, help="run name (start)")
    p.add_argument("--note", default=None, help="free text stored with the run (start)")
    add_connection_options(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "stop":
        return call(args, "record_stop")
    extra = {k: v for k, v in (("name", args.name), ("note", args.note)) if v is not None}
    return call(args, "record_start", extra)
