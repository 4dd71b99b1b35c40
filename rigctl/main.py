"""`rigctl` entry point: finds the subcommand modules present and dispatches.

Each `rigctl.cmd_*` module exposes `register(subparsers) -> None`, which adds its parser and
sets `func=run(args) -> int`. Modules another branch has not delivered yet are skipped, so the
branches merge in any order.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from rigctl.common import EXIT_OK, EXIT_USAGE, UsageError, resolve_connection

log = logging.getLogger(__name__)

SUBCOMMAND_MODULES = (
    "rigctl.cmd_status",
    "rigctl.cmd_monitor",
    "rigctl.cmd_describe",
    "rigctl.cmd_state",  # arm, disarm, stop, estop, reset
    "rigctl.cmd_run",
    "rigctl.cmd_check",
    "rigctl.predict",
    "rigctl.cmd_record",
    "rigctl.cmd_gains",
    "rigctl.cmd_tune",
    "rigctl.cmd_keys",
    "rigctl.cmd_export",
    "rigctl.cmd_install",
    "rigctl.cmd_identify",
    "rigctl.cmd_report",
    "rigctl.cmd_params",
    "rigctl.cmd_station",  # power, shunt, jog
    "rigctl.cmd_calibrate",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rigctl",
        description="Drive and watch the rig service. Exit codes: 0 ok, 1 refused by the "
        "service, 2 usage or bad input, 3 service unreachable.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            if e.name != name:  # the module exists but one of its imports is broken
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return int(e.code) if isinstance(e.code, int) else EXIT_USAGE
    level = (logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        resolve_connection(args)  # --endpoint, else --profile, else $RIG_COMMANDS/$RIG_TELEMETRY
        return int(args.func(args))
    except UsageError as e:
        print(f"rigctl: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`rigctl status | head`): not an error of ours. Point stdout at
        # /dev/null so the interpreter's final flush does not raise again (Python docs, signal).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
