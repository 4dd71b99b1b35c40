"""`rigctl calibrate show | apply FILE | revert | <procedure>`: the rig's transducer calibration
(docs/operations.md, "Calibration")."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rigctl.common import EXIT_USAGE, add_connection_options, add_json_option, call


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="transducer calibration: show, apply, revert, or run a procedure",
        description="Calibrations are kept per rig and date by the service and applied in its "
        "scaling layer; every run's header names the one in force.",
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = sub.add_parser("show", help="the calibration in force, per channel")
    _common(s, _show)
    s = sub.add_parser("apply", help="check a calibration file against the rig and apply it")
    s.add_argument("file", type=Path)
    _common(s, _apply)
    s = sub.add_parser("revert", help="back to the previously applied calibration")
    _common(s, lambda args: call(args, "calibration_revert", show=_print))
    register_procedures(sub, _common)


def register_procedures(sub: Any, common: Any) -> None:
    """The procedures (rigctl.cmd_calibrate_procedures), when present."""
    try:
        from rigctl.cmd_calibrate_procedures import register as reg
    except ImportError as e:
        if e.name != "rigctl.cmd_calibrate_procedures":
            raise
        return
    reg(sub, common)


def _common(p: argparse.ArgumentParser, func: Any) -> None:
    add_connection_options(p)
    add_json_option(p)
    p.set_defaults(func=func)


def _show(args: argparse.Namespace) -> int:
    return call(args, "calibration", show=_print)


def _apply(args: argparse.Namespace) -> int:
    try:
        text = args.file.read_text()
    except OSError as exc:
        print(f"rigctl: {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    return call(
        args, "calibration_apply", {"text": text, "source": str(args.file.resolve())}, show=_print
    )


def _print(reply: dict[str, Any]) -> None:
    cal = reply.get("calibration")
    if reply.get("reverted"):
        print(f"reverted {reply['reverted']}")
    if cal is None:
        print("no calibration in force: the profile's declared scaling")
        return
    print(
        f"calibration {cal.get('source')}  ({cal.get('created_utc')}, sha256 {cal['sha256'][:12]})"
    )
    print(f"  {'channel':<12} {'offset':>12} {'σ':>10} {'gain':>9} {'σ':>8}  method")
    for name, c in cal.get("channels", {}).items():
        print(
            f"  {name:<12} {c['offset']:>12.6g} {c['sigma_offset']:>10.3g} {c['gain']:>9.6f} "
            f"{c['sigma_gain']:>8.2g}  {c.get('method', '')}"
        )
    applied = reply.get("applied")
    if applied:
        print(f"applied (newest first): {', '.join(applied)}")
