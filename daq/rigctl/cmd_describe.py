"""`rigctl describe`: channels, limits and the profile summary."""

from __future__ import annotations

import argparse
import json
from typing import Any

from daq.rigctl.common import add_connection_options, add_json_option, call


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("describe", help="channels, limits and profile summary")
    add_connection_options(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return call(args, "describe", show=show)


def show(reply: dict[str, Any]) -> None:
    meta = reply.get("meta") or {}
    print(
        f"rig {meta.get('rig', '?')}  layout {meta.get('layout_id', '?')}  "
        f"period {meta.get('period', '?')} s"
    )
    for c in meta.get("columns", []):
        where = c.get("joint") or ""
        print(f"  {c['name']:<22} {c.get('unit', ''):<8} {c.get('role', ''):<7} {where}")
    for key in ("limits", "profile"):
        if key in reply:
            print(f"{key}: {json.dumps(reply[key], indent=2, default=str)}")
