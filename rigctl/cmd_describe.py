"""`rigctl describe`: channels, limits and the profile summary."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rigctl.common import add_connection_options, add_json_option, call


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("describe", help="channels, limits and profile summary")
    add_connection_options(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return call(args, "describe", show=show)


def show(reply: dict[str, Any]) -> None:
    print(
        f"rig {reply.get('rig', '?')}: {reply.get('description', '')}\n"
        f"  backend {reply.get('backend', '?')}, period {reply.get('period', '?')} s, "
        f"virtual time {reply.get('virtual_time', '?')}"
    )
    channels = reply.get("channels") or []
    if channels:
        print("channels:")
        for c in channels:
            print(
                f"  {c.get('name', ''):<12} {c.get('role', ''):<14} {c.get('joint') or '-':<4} "
                f"{c.get('direction', ''):<7} {c.get('units', ''):<5} "
                f"valid [{c.get('valid_min')}, {c.get('valid_max')}]"
            )
    for j in reply.get("joints") or []:
        print(f"joint {j.get('name')}: home {j.get('home_deg')}°")
        for k, v in (j.get("limits") or {}).items():
            print(f"  {k:<32} {v}")
    if reply.get("interlocks"):
        print("interlocks: " + json.dumps(reply["interlocks"], default=str))
    print(
        f"{len(reply.get('columns') or [])} telemetry columns (rigctl describe --json lists them)"
    )
