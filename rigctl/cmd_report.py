"""`rigctl report RUN [--validate RUN2] [--out DIR] [--json]`: the identification report.

Writes `report.html` and its PNG figures (parameter table, RLS convergence, measured vs model,
FIT table, residuals, singular values, loop timing, events) and prints the HTML path, or with
`--json` a JSON summary (paths, parameter table, FIT table). The estimator is imported only when
the subcommand runs, so `rigctl status` does not pay for scipy and numba.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def register(subparsers: Any) -> None:
    """Add the `report` subcommand to rigctl's subparsers."""
    p = subparsers.add_parser(
        "report",
        help="identification report of a recorded run (HTML + PNG figures)",
        description="Identify the rig's parameters from a recorded run (batch IDIM-WLS and the "
        "online RLS replayed), validate the identified model on a second run (or, without "
        "--validate, on the same run: not cross-validation) and write an HTML report with PNG "
        "figures. Needs matplotlib (the optional extra 'report').",
    )
    p.add_argument("run", metavar="RUN", type=Path, help="the identification run (.rigrun)")
    p.add_argument(
        "--validate",
        metavar="RUN2",
        type=Path,
        default=None,
        help="a different run to validate the identified model on (recommended)",
    )
    p.add_argument(
        "--out",
        "-o",
        metavar="DIR",
        type=Path,
        default=None,
        help="output directory (default: <RUN stem>-report/ beside RUN)",
    )
    p.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="the rig profile (default: the profile stored in the run file)",
    )
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of the path")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """0 on success, 2 for bad input (no run, not a run file, unusable profile, no
    matplotlib), 1 if writing the report failed."""
    try:
        from estimator.report import ReportError, build_report
    except ImportError as exc:  # the estimator is part of the project: a broken install
        print(f"rigctl report: cannot load the estimator: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        print(f"rigctl report: --out is not a directory: {args.out}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = build_report(
            args.run,
            args.validate,
            args.out,
            profile=args.profile,
            progress=not (args.no_progress or args.json),
        )
    except ReportError as exc:
        print(f"rigctl report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"rigctl report: cannot write the report: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for note in result.notes:
        log.warning("%s", note)
    print(result.to_json() if args.json else result.html)
    return EXIT_OK
