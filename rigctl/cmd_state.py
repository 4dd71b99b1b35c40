"""`rigctl arm | disarm | stop | estop | reset`: state changes of the service."""

from __future__ import annotations

import argparse
from typing import Any

from rigctl.common import add_connection_options, add_json_option, call, simple_command


def register(subparsers: Any) -> None:
    simple_command(subparsers, "arm", "arm", "IDLE → ARMED (outputs live at null)")
    simple_command(subparsers, "disarm", "disarm", "back to IDLE, outputs to null")
    simple_command(subparsers, "stop", "stop", "end the running experiment, hold position")
    simple_command(subparsers, "reset", "reset", "clear a latched fault once its cause is gone")
    p = subparsers.add_parser("estop", help="emergency stop: outputs null, fault latched")
    p.add_argument("reason", nargs="?", default=None, help="why (recorded with the fault)")
    add_connection_options(p)
    add_json_option(p)
    p.set_defaults(func=_estop)


def _estop(args: argparse.Namespace) -> int:
    return call(args, "estop", {"reason": args.reason} if args.reason else {})
