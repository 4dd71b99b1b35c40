"""`rigctl status`: state, fault, loop timing, recorder and telemetry statistics."""

from __future__ import annotations

import argparse
from typing import Any

from rigctl.common import add_connection_options, add_json_option, call, fault_text


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("status", help="the service's state, fault and timing")
    add_connection_options(p)
    add_json_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return call(args, "status", show=show)


def _flat(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out.append((prefix, f"{value:.6g}" if isinstance(value, float) else str(value)))


def show(reply: dict[str, Any]) -> None:
    print(f"state: {reply.get('state')}   fault: {fault_text(reply.get('fault'))}")
    rows: list[tuple[str, str]] = []
    for k, v in reply.items():
        if k not in ("ok", "id", "state", "fault") and v is not None:
            _flat(k, v, rows)
    width = max((len(k) for k, _ in rows), default=0)
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
