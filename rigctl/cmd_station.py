"""`rigctl power off|low|high`, `rigctl shunt on|off [CHANNEL …]` and `rigctl jog JOINT
TARGET_DEG`: the station's hydraulic power, the pressure transducers' shunt relays and jogging a
joint at low pressure (docs/operations.md, "Hydraulic power", "Shunt calibration" and "Jog")."""

from __future__ import annotations

import argparse
from typing import Any

from rigctl.common import add_connection_options, add_json_option, call


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "power",
        help="switch the station's hydraulic power (pump and manifold stage)",
        description="off: pump stopped; low: the reduced-pressure stage for set-up, jogging "
        "and calibration; high: the working pressure. estop drops power too.",
    )
    p.add_argument("level", choices=("off", "low", "high"))
    add_connection_options(p)
    add_json_option(p)
    p.set_defaults(func=lambda args: call(args, "power", {"level": args.level}))

    p = subparsers.add_parser(
        "shunt",
        help="close or open pressure transducers' shunt calibration relays",
        description="on: in IDLE with the power off only; the shunted channels read their "
        "shunt equivalent over the pressure (status shows them under station.shunt, and arm "
        "is refused while any is closed). off: open them. Every state or power change and "
        "estop opens them all. Without CHANNEL: every channel with a shunt in the profile.",
    )
    p.add_argument("state", choices=("on", "off"))
    p.add_argument("channels", nargs="*", metavar="CHANNEL", help="channel names (default all)")
    add_connection_options(p)
    add_json_option(p)
    p.set_defaults(func=_shunt)

    p = subparsers.add_parser(
        "jog",
        help="move one joint slowly to a target at low pressure (also back into its soft range)",
        description="Needs power low. The other joints hold; the target must lie inside the "
        "joint's soft limits, and a joint outside them may only move toward them. The rig stays "
        "ARMED, holding the target.",
    )
    p.add_argument("joint", help="joint name, as in the profile")
    p.add_argument("target_deg", type=float, help="target angle, degrees")
    p.add_argument("--velocity", type=float, default=None, help="deg/s (default 2, at most "
                   "[hydraulics].jog_max_velocity_deg_s)")  # fmt: skip
    add_connection_options(p)
    add_json_option(p)
    p.set_defaults(func=_jog)


def _jog(args: argparse.Namespace) -> int:
    cmd: dict[str, Any] = {"joint": args.joint, "target_deg": args.target_deg}
    if args.velocity is not None:
        cmd["velocity_deg_s"] = args.velocity
    return call(args, "jog", cmd)


def _shunt(args: argparse.Namespace) -> int:
    cmd: dict[str, Any] = {"state": args.state}
    if args.channels:
        cmd["channels"] = list(args.channels)
    return call(args, "shunt", cmd)
