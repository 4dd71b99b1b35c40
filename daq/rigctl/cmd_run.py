"""`rigctl run FILE.toml`: send an experiment file's content to the service."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any

from daq.rigctl.common import UsageError, add_connection_options, add_json_option, call


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("run", help="run an experiment file (TOML)")
    p.add_argument("file", type=Path, help="experiment TOML file")
    add_connection_options(p)
    add_json_option(p)
    p.set_defaults(func=run)


def load_experiment(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such experiment file") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: not valid TOML: {e}") from e


def run(args: argparse.Namespace) -> int:
    return call(args, "run", {"experiment": load_experiment(args.file)})
