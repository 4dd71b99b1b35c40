"""`rigctl export RUN --format csv|npz|mat|mcap [--out PATH]`: convert a run file for analysis
tools (mcap: Foxglove, PlotJuggler; needs the `live` extra)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from daq.recording import FORMATS, RunFileError, export_run, read_run

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    """Add the `export` subcommand to rigctl's subparsers."""
    p = subparsers.add_parser(
        "export",
        help="convert a recorded run (.rigrun) to csv, npz, mat or mcap",
        description="Convert a recorded run file to CSV, NumPy .npz, MATLAB .mat or MCAP. Every "
        "intact chunk is exported; an incomplete run (lost rows, cut short, damaged chunks) is "
        "exported too, with a warning on stderr.",
    )
    p.add_argument("run", metavar="RUN", type=Path, help="the .rigrun file")
    p.add_argument("--format", "-f", required=True, choices=FORMATS, help="output format")
    p.add_argument(
        "--out",
        "-o",
        type=Path,
        default=None,
        help="output file or directory (default: next to RUN)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """0 on success, 2 for bad input (no such run, not a run file), 1 if the export failed."""
    path: Path = args.run
    if not path.is_file():
        print(f"rigctl export: no such run file: {path}", file=sys.stderr)
        return 2
    if args.out is not None and not args.out.parent.is_dir():
        print(f"rigctl export: output directory does not exist: {args.out.parent}", file=sys.stderr)
        return 2
    try:
        recorded = read_run(path)
    except RunFileError as exc:
        print(f"rigctl export: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"rigctl export: cannot read {path}: {exc}", file=sys.stderr)
        return 1
    if not recorded.complete:
        print(
            f"rigctl export: warning: {path.name} is incomplete (rows lost: {recorded.lost}, "
            f"cut short: {recorded.truncated}, damaged records: {len(recorded.corrupt_chunks)}, "
            f"clean stop: {recorded.trailer is not None}); exporting {len(recorded.data)} rows",
            file=sys.stderr,
        )
    try:
        out = export_run(path, args.format, args.out)
    except (OSError, RunFileError) as exc:
        print(f"rigctl export: export failed: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:
        print(
            f"rigctl export: --format {args.format} needs {exc.name}: pip install 'hydrig[live]'",
            file=sys.stderr,
        )
        return 2
    print(out.resolve())
    return 0
