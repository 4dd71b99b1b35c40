"""`rigctl run FILE.toml [--wait]`: send an experiment file's content to the service.

With `--wait` it shows the progress (segment, repeat, time left; from the `status` command)
and returns when the experiment ends: exit 0 when it ran to its end (the loop's
`experiment_done` event on the telemetry), 1 when it was refused, stopped before its end or
faulted (the fault is printed), 3 when the service stops answering.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from daq.commands import CommandClient, ServiceUnreachable
from rigctl.common import (
    DEFAULT_TELEMETRY,
    ENV_ENDPOINT,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    UsageError,
    add_connection_options,
    add_json_option,
    call,
    client_keys,
    fault_text,
)

#: Seconds between `status` polls while waiting.
POLL_S = 0.5


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("run", help="run an experiment file (TOML)")
    p.add_argument("file", type=Path, help="experiment TOML file")
    add_connection_options(p)
    add_json_option(p)
    p.add_argument(
        "--wait", action="store_true", help="show progress; return when the experiment ends"
    )
    p.add_argument(
        "--telemetry",
        default=None,
        help="telemetry endpoint, for --wait; default: network.telemetry of --profile, else "
        f"${ENV_ENDPOINT['telemetry']}, else {DEFAULT_TELEMETRY}",
    )
    p.set_defaults(func=run)


def load_experiment(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such experiment file") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: not valid TOML: {e}") from e


def telemetry_endpoint(args: argparse.Namespace) -> str:
    """Where `--wait` listens: --telemetry, else the --profile's network.telemetry, else
    $RIG_TELEMETRY, else the loopback default (the same order as every rigctl endpoint)."""
    if args.telemetry:
        return str(args.telemetry)
    if args.profile is not None:
        from daq.profile.loader import ProfileError, load_profile
        from daq.security import connect_endpoint

        try:
            return connect_endpoint(load_profile(args.profile).network.telemetry)
        except (ProfileError, OSError) as e:
            raise UsageError(f"--profile: {e}") from e
    return os.environ.get(ENV_ENDPOINT["telemetry"]) or DEFAULT_TELEMETRY


def run(args: argparse.Namespace) -> int:
    experiment = load_experiment(args.file)
    if not args.wait:
        return call(args, "run", {"experiment": experiment})
    from daq.telemetry import Event, TelemetrySubscriber

    args.telemetry = telemetry_endpoint(args)
    keys = client_keys(args)
    # Subscribe before the run starts, so the end-of-experiment event cannot be missed.
    with TelemetrySubscriber(args.telemetry, keys=keys, topics=(b"event", b"meta")) as sub:
        watching = sub.wait_meta(args.timeout) is not None
        if not watching:
            print(
                f"rigctl: no telemetry from {args.telemetry} (--telemetry): the end of the "
                "experiment is judged by the state alone",
                file=sys.stderr,
            )
        code = call(args, "run", {"experiment": experiment})
        if code != EXIT_OK:
            return code
        events: list[dict[str, Any]] = []

        def drain(timeout: float) -> None:
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                msg = sub.recv(timeout=left)
                if msg is None:
                    return
                if isinstance(msg, Event):
                    events.append(msg.header)

        with CommandClient(args.endpoint, timeout=args.timeout, keys=keys) as client:
            status = _follow(client, drain, json_out=args.json)
        if status is None:
            print(f"rigctl: the service stopped answering on {args.endpoint}", file=sys.stderr)
            return EXIT_UNREACHABLE
        drain(2.0 if not any(e.get("kind") == "experiment_done" for e in events) else 0.0)
    done = any(e.get("kind") == "experiment_done" for e in events)
    if done or (not watching and status.get("state") == "ARMED" and not status.get("fault")):
        print(f"{args.file}: experiment finished (state {status.get('state')})")
        return EXIT_OK
    if status.get("fault"):
        print(
            f"rigctl: experiment ended by a fault: {fault_text(status['fault'])}", file=sys.stderr
        )
    else:
        print(
            f"rigctl: experiment stopped before its end (state {status.get('state')})",
            file=sys.stderr,
        )
    return EXIT_REFUSED


def _follow(client: CommandClient, drain: Any, *, json_out: bool) -> dict[str, Any] | None:
    """Poll `status` until the state leaves RUNNING; show progress; the last status or None."""
    from rich.console import Console

    from rigctl.cmd_monitor import progress, progress_text

    console = Console(stderr=True)
    last_line = ""
    with console.status("running…") as spinner:
        while True:
            try:
                status = client.request("status")
            except ServiceUnreachable:
                return None
            check = status.get("check") or {}
            if check.get("state") == "checking":  # the run starts once its limit check passes
                spinner.update(f"checking limits… {100 * check.get('progress', 0.0):.0f} %")
                drain(POLL_S)
                continue
            if status.get("state") != "RUNNING":
                if check.get("state") in ("refused", "cancelled", "failed", "start_refused"):
                    print(f"rigctl: run: {check.get('message')}", file=sys.stderr)
                return status
            prog = progress(status.get("runner"))
            line = progress_text(prog)
            if json_out and line != last_line:
                print(json.dumps({"progress": prog}), flush=True)
            spinner.update(line)
            last_line = line
            drain(POLL_S)
