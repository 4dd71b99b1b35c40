"""`rigctl keys generate NAME --role controller|monitor --dir DIR` and `rigctl keys list`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from daq.security import CLIENTS_DIR, ROLES, SERVER_NAME, SecurityError, generate_client_key
from daq.security import read_role as _read_role
from rigctl.common import EXIT_OK, UsageError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("keys", help="CURVE key pairs for the service's allow-list")
    sub = p.add_subparsers(dest="keys_action", metavar="ACTION", required=True)
    g = sub.add_parser("generate", help="new client key pair, listed with its role")
    g.add_argument("name")
    g.add_argument("--role", choices=ROLES, required=True)
    g.add_argument("--dir", type=Path, required=True, help="the service's keys directory")
    g.set_defaults(func=generate)
    ls = sub.add_parser("list", help="listed client keys and their roles")
    ls.add_argument("--dir", type=Path, required=True)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=list_keys)


def generate(args: argparse.Namespace) -> int:
    try:
        listed, secret = generate_client_key(args.dir, args.name, args.role)
    except SecurityError as e:
        raise UsageError(str(e)) from e
    print(f"listed {args.role} key {listed}")
    print(
        f"client secret {secret} (give it, with {args.dir / (SERVER_NAME + '.key')}, "
        f"to the client; keep it private)"
    )
    return EXIT_OK


def list_keys(args: argparse.Namespace) -> int:
    cdir = args.dir / CLIENTS_DIR
    if not cdir.is_dir():
        raise UsageError(f"{cdir}: no such directory (generate a key first)")
    try:
        keys = [{"name": f.stem, "role": _read_role(f)} for f in sorted(cdir.glob("*.key"))]
    except SecurityError as e:
        raise UsageError(str(e)) from e
    if args.json:
        print(json.dumps(keys))
    else:
        for k in keys:
            print(f"{k['name']:<24} {k['role']}")
    return EXIT_OK
