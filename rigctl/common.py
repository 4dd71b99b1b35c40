"""Options, exit codes and helpers shared by the rigctl subcommands."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from daq.commands import CommandClient, ProtocolError, ServiceUnreachable
from daq.profile.schema import DEFAULT_COMMANDS, DEFAULT_TELEMETRY
from daq.security import ClientKeys, SecurityError, connect_endpoint

#: Exit codes scripts can rely on.
EXIT_OK = 0
EXIT_REFUSED = 1  # the service answered {ok: false}
EXIT_USAGE = 2  # bad command line or bad input file
EXIT_UNREACHABLE = 3  # no reply within the timeout

#: Environment variables naming the endpoints (below --endpoint and --profile, above defaults).
ENV_ENDPOINT = {"commands": "RIG_COMMANDS", "telemetry": "RIG_TELEMETRY"}
_DEFAULT_ENDPOINT = {"commands": DEFAULT_COMMANDS, "telemetry": DEFAULT_TELEMETRY}


class UsageError(Exception):
    """Bad input on the command line or in a file named on it (exit 2)."""


def add_connection_options(p: argparse.ArgumentParser, *, telemetry: bool = False) -> None:
    kind = "telemetry" if telemetry else "commands"
    p.add_argument(
        "--endpoint",
        default=None,
        help=f"{kind} endpoint; default: network.{kind} of --profile, else ${ENV_ENDPOINT[kind]}, "
        f"else {_DEFAULT_ENDPOINT[kind]}",
    )
    p.add_argument(
        "--profile",
        default=None,
        help="hardware profile: take the endpoint (and network.keys_dir) from its [network]",
    )
    p.add_argument(
        "--keys-dir",
        default=None,
        help="directory with server.key (and the client key, if --key is a name); default: "
        "network.keys_dir of --profile",
    )
    p.add_argument(
        "--key", default=None, help="client key: a NAME in --keys-dir or a path to NAME.key_secret"
    )
    p.add_argument("--timeout", type=float, default=2.0, help="seconds to wait (default 2)")
    p.set_defaults(endpoint_kind=kind)


def resolve_connection(args: argparse.Namespace) -> None:
    """Fill `args.endpoint` (and `args.keys_dir`): --endpoint, else the --profile's [network],
    else $RIG_COMMANDS / $RIG_TELEMETRY, else the built-in loopback default."""
    kind = getattr(args, "endpoint_kind", None)
    if kind is None:
        return
    net = None
    if args.profile is not None:
        from daq.profile.loader import ProfileError, load_profile

        try:
            net = load_profile(args.profile).network
        except (ProfileError, OSError) as e:
            raise UsageError(f"--profile: {e}") from e
    if args.endpoint is None:
        if net is not None:
            args.endpoint = connect_endpoint(getattr(net, kind))  # `tcp://*:P` → loopback
        else:
            args.endpoint = os.environ.get(ENV_ENDPOINT[kind]) or _DEFAULT_ENDPOINT[kind]
    if net is not None and net.keys_dir is not None and args.keys_dir is None:
        if args.key is None:
            raise UsageError(
                f"{args.profile}: network.keys_dir is set, so the service speaks CURVE: "
                f"pass --key NAME (a client key in {net.keys_dir})"
            )
        args.keys_dir = net.keys_dir


def add_json_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the reply as JSON")


def client_keys(args: argparse.Namespace) -> ClientKeys | None:
    if args.key is None:
        if args.keys_dir is not None:
            raise UsageError("--keys-dir needs --key NAME (which client key to use)")
        return None
    try:
        return ClientKeys.load(args.key, args.keys_dir)
    except SecurityError as e:
        raise UsageError(str(e)) from e


def call(
    args: argparse.Namespace,
    cmd: str,
    cmd_args: dict[str, Any] | None = None,
    *,
    show: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Send one command, print the result, map it to an exit code."""
    keys = client_keys(args)
    with CommandClient(args.endpoint, timeout=args.timeout, keys=keys) as client:
        try:
            reply = client.request(cmd, cmd_args)
        except (ServiceUnreachable, ProtocolError) as e:
            return client_error_exit(e)
    if getattr(args, "json", False):
        print(json.dumps(reply, default=str, sort_keys=True))
    elif not reply["ok"]:
        pass
    elif show is not None:
        show(reply)
    else:
        extra = {k: v for k, v in reply.items() if k not in ("ok", "id")}
        print(f"{cmd}: ok" + (f" {json.dumps(extra, default=str)}" if extra else ""))
    if not reply["ok"]:
        print(
            f"rigctl: {cmd} refused ({reply.get('error')}): {reply.get('message')}", file=sys.stderr
        )
        return EXIT_REFUSED
    return EXIT_OK


def client_error_exit(e: ServiceUnreachable | ProtocolError) -> int:
    """Print a client error and return its exit code (3 unreachable, 1 otherwise)."""
    print(f"rigctl: {e}", file=sys.stderr)
    return EXIT_UNREACHABLE if isinstance(e, ServiceUnreachable) else EXIT_REFUSED


def fault_text(fault: Any) -> str:
    """The status' `fault` (nil, or a map with name/where/message) as one short line."""
    if not fault:
        return "-"
    if isinstance(fault, dict):
        where = f" at {fault['where']}" if fault.get("where") else ""
        return f"{fault.get('name', '?')}{where}: {fault.get('message', '')}"
    return str(fault)


def simple_command(subparsers: Any, name: str, cmd: str, help_text: str) -> argparse.ArgumentParser:
    """A subcommand that sends `cmd` with no arguments."""
    p: argparse.ArgumentParser = subparsers.add_parser(name, help=help_text, description=help_text)
    add_connection_options(p)
    add_json_option(p)
    p.set_defaults(func=lambda args: call(args, cmd))
    return p


def limit_estimator_threads() -> None:
    """One BLAS thread for the estimator's numerics in this command, unless
    `$HYDRIG_BLAS_THREADS` says otherwise (estimator.blas says why); a bad value is a usage
    error. Imported here, when a command needs the estimator, not for every command."""
    from estimator.blas import limit_blas_threads

    try:
        limit_blas_threads()
    except ValueError as e:
        raise UsageError(str(e)) from None
