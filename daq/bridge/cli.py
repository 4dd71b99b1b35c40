"""`rig-bridge`: serve the rig's telemetry to Foxglove (docs/live-view.md).

    rig-bridge --profile hw_profiles/sim-2dof.toml            # ws://127.0.0.1:8765
    rig-bridge --telemetry tcp://127.0.0.1:5555 --rate 50 --port 0

Endpoints and the CURVE keys directory come from the profile's `[network]` when given (a
`--key NAME` from that directory is then required). The WebSocket server binds loopback unless
`--host` says otherwise. Prints `rig-bridge: serving ws://HOST:PORT` once it listens.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from daq.profile.schema import DEFAULT_COMMANDS, DEFAULT_TELEMETRY

log = logging.getLogger("rig-bridge")


def _connectable(endpoint: str) -> str:
    """A bind address (`tcp://*:5555`, `tcp://0.0.0.0:5555`) as one to connect to."""
    for wild in ("//*:", "//0.0.0.0:"):
        endpoint = endpoint.replace(wild, "//127.0.0.1:")
    return endpoint


def tls_context(cert: Path | None, key: Path | None) -> Any:
    """A server TLS context for `--tls-cert`/`--tls-key` (None without them)."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise ValueError("--tls-cert and --tls-key go together")
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


def arm_factory(profile: Any) -> Any:
    """The arm model for the 3-D view, from the profile's geometry (None without a profile or
    a `[plant]` or `[chain]` section: no `/tf`, no `/rig/scene`)."""
    if profile is None:
        return None
    from daq.bridge.arm3d import arm_from_profile

    arm = arm_from_profile(profile)
    return None if arm is None else (lambda header: arm)


def build_parser() -> argparse.ArgumentParser:
    from daq.bridge.auth import DEFAULT_ORIGINS
    from daq.bridge.server import DEFAULT_PORT, DEFAULT_RATE_HZ

    p = argparse.ArgumentParser(prog="rig-bridge", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", help="hardware profile: telemetry/estimates endpoints, keys_dir")
    p.add_argument(
        "--telemetry", help=f"telemetry endpoint (default profile's, {DEFAULT_TELEMETRY})"
    )
    p.add_argument("--estimates", help="estimator endpoint (default the profile's; 'none': off)")
    p.add_argument(
        "--commands",
        help="command endpoint for the services and settable parameters (default the "
        "profile's; 'none': no commands)",
    )
    p.add_argument(
        "--experiments", type=Path, default=Path("experiments"),
        help="directory of experiment files the `run` service runs by name (default experiments)",
    )  # fmt: skip
    p.add_argument("--key", help="client key NAME in the profile's keys_dir (CURVE)")
    p.add_argument("--keys-dir", help="CURVE keys directory (default the profile's)")
    p.add_argument(
        "--host", default="127.0.0.1",
        help="WebSocket bind address (loopback; anything else needs CURVE keys and tokens)",
    )  # fmt: skip
    p.add_argument(
        "--allow-origin", action="append", default=None, metavar="ORIGIN",
        help=f"browser Origin allowed to connect (repeatable; '*': any; default "
        f"{' '.join(DEFAULT_ORIGINS)})",
    )  # fmt: skip
    p.add_argument("--tls-cert", type=Path, help="PEM certificate: serve wss:// (with --tls-key)")
    p.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert")
    p.add_argument(
        "--make-token", metavar="NAME",
        help="create the WebSocket token of the listed key NAME in the keys directory, print "
        "it, exit",
    )  # fmt: skip
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: any")
    p.add_argument(
        "--rate", type=float, default=DEFAULT_RATE_HZ, help="rows per second sent (decimation)"
    )
    p.add_argument(
        "--replay", metavar="RUN", type=Path,
        help="serve a recorded run (.rigrun) with the live channels instead of the live rig",
    )  # fmt: skip
    p.add_argument("--speed", type=float, default=1.0, help="replay speed (× real time; default 1)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not args.rate > 0:
        print(f"rig-bridge: --rate must be > 0 Hz, got {args.rate:g}", file=sys.stderr)
        return 2
    telemetry, estimates, keys_dir = DEFAULT_TELEMETRY, None, args.keys_dir
    commands: str | None = DEFAULT_COMMANDS
    profile = None
    if args.profile:
        from daq.profile import ProfileError, load_profile

        try:
            profile = load_profile(args.profile)
            net = profile.network
        except ProfileError as e:
            print(f"rig-bridge: {e}", file=sys.stderr)
            return 2
        telemetry, estimates = _connectable(net.telemetry), _connectable(net.estimates)
        commands = _connectable(net.commands)
        keys_dir = keys_dir or net.keys_dir
    telemetry = args.telemetry or telemetry
    estimates = args.estimates or estimates
    if estimates == "none":
        estimates = None
    commands = args.commands or commands
    if commands == "none":
        commands = None
    from daq.bridge.auth import (
        DEFAULT_ORIGINS,
        TokenStore,
        check_bind,
        is_loopback_host,
        make_token,
    )
    from daq.security import SecurityError

    if args.make_token:
        if keys_dir is None:
            print("rig-bridge: --make-token needs the keys directory (--profile with "
                  "network.keys_dir, or --keys-dir)", file=sys.stderr)  # fmt: skip
            return 2
        try:
            print(make_token(keys_dir, args.make_token))
        except SecurityError as e:
            print(f"rig-bridge: {e}", file=sys.stderr)
            return 2
        return 0
    keys = None
    if keys_dir is not None or args.key is not None:
        from daq.security import ClientKeys

        if args.key is None:
            print(
                f"rig-bridge: the telemetry uses CURVE (keys_dir {keys_dir}): give --key NAME "
                "(a monitor key made with `rigctl keys generate NAME --role monitor`)",
                file=sys.stderr,
            )
            return 2
        try:
            keys = ClientKeys.load(args.key, keys_dir)
        except SecurityError as e:
            print(f"rig-bridge: {e}", file=sys.stderr)
            return 2
    # With CURVE on the telemetry, WebSocket clients need a token standing for a listed key
    # (daq/bridge/auth.py); without, only loopback is served, as the service itself does.
    tokens = None
    if keys is not None:
        tokens = TokenStore(keys_dir if keys_dir is not None else Path(str(args.key)).parent)
    try:
        check_bind(args.host, tokens is not None)
    except SecurityError as e:
        print(f"rig-bridge: {e}", file=sys.stderr)
        return 2
    try:
        tls = tls_context(args.tls_cert, args.tls_key)
    except (ValueError, OSError) as e:
        print(f"rig-bridge: TLS: {e}", file=sys.stderr)
        return 2
    if tls is None and not is_loopback_host(args.host):
        log.warning("serving on %s without TLS: tokens and data cross the network in clear "
                    "(give --tls-cert/--tls-key, or use an SSH tunnel)", args.host)  # fmt: skip
    if tokens is not None and not len(tokens):
        log.warning("no WebSocket tokens in %s/clients: every client will be refused (create "
                    "one with rig-bridge --make-token NAME)", keys_dir)  # fmt: skip
    try:
        from daq.bridge.server import Bridge
    except ImportError as e:  # pragma: no cover - depends on the install
        print(f"rig-bridge: {e}; install the 'live' extra: pip install 'hydrig[live]'",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.replay is not None:
        return _replay(args, tokens, tls)
    from daq.bridge.station_commands import StationCommands

    key_role = None
    if keys is not None:
        from daq.security import read_role

        key_path = Path(str(args.key))
        if not key_path.is_file():
            key_path = Path(str(keys_dir)) / f"{args.key}.key_secret"
        try:
            key_role = read_role(key_path)
        except SecurityError as e:
            print(f"rig-bridge: {e}", file=sys.stderr)
            return 2
    station = StationCommands(commands, keys=keys, key_role=key_role,
                              key_name=str(args.key or "local"),
                              experiments=args.experiments)  # fmt: skip
    try:
        bridge = Bridge(telemetry, estimates=estimates, keys=keys, host=args.host,
                        port=args.port, rate_hz=args.rate, tokens=tokens,
                        origins=tuple(args.allow_origin or DEFAULT_ORIGINS),
                        commands=station, arm_factory=arm_factory(profile),
                        ssl=tls)  # fmt: skip
    except (RuntimeError, OSError) as e:
        print(f"rig-bridge: cannot serve on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: bridge.stop())
    signal.signal(signal.SIGINT, lambda *_: bridge.stop())
    scheme = "wss" if tls is not None else "ws"
    print(f"rig-bridge: serving {scheme}://{args.host}:{bridge.port} (telemetry {telemetry})",
          flush=True)  # fmt: skip
    try:
        bridge.run()
    finally:
        bridge.close()
    return 0


def _replay(args: argparse.Namespace, tokens: Any, tls: Any) -> int:
    from daq.bridge.auth import DEFAULT_ORIGINS
    from daq.bridge.replay import Replay
    from daq.recording.format import RunFileError

    try:
        replay = Replay(args.replay, host=args.host, port=args.port, rate_hz=args.rate,
                        speed=args.speed, tokens=tokens, ssl=tls,
                        origins=tuple(args.allow_origin or DEFAULT_ORIGINS))  # fmt: skip
    except (ValueError, RunFileError, OSError) as e:
        print(f"rig-bridge: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: replay.stop())
    signal.signal(signal.SIGINT, lambda *_: replay.stop())
    scheme = "wss" if tls is not None else "ws"
    print(f"rig-bridge: serving {scheme}://{args.host}:{replay.port} (replay of {args.replay}, "
          f"{args.speed:g}×)", flush=True)  # fmt: skip
    try:
        replay.run()
    finally:
        replay.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
