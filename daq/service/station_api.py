"""Command semantics of the station: `power`, `jog` and `shunt` (docs/protocol.md,
docs/operations.md).

Like `daq.service.control_api`, everything here runs on the command server's thread: argument
checks against the profile, the jog runner's construction. The loop only takes the finished
request (`daq.loop.station`) and applies the rules that depend on its state in that cycle.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from daq.commands.errors import CommandError
from daq.loop.station import JogRequest
from daq.station.power import parse
from daq.station.shunt import bits_of, names

#: Jog acceleration: a jog reaches its velocity in this long (a gentle start at low pressure).
JOG_RAMP_S = 0.5

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


def station_handlers(api: Any) -> dict[str, Handler]:
    """`power`, `jog` and `shunt` for a `ControlApi` (its loop, profile, gains, `_call_loop`)."""

    def power(args: dict[str, Any], client: Any) -> dict[str, Any]:
        try:
            level = parse(str(args["level"]))
        except ValueError as exc:
            raise CommandError("bad_args", f"power: {exc}") from None
        if api.profile.hydraulics is None:
            raise CommandError(
                "rejected",
                "power: the profile has no [hydraulics] section; this station's power is not "
                "switched by the service (implicitly on)",
            )
        out: dict[str, Any] = api._call_loop("power", int(level))
        out["power"] = level.name
        return out

    def jog(args: dict[str, Any], client: Any) -> dict[str, Any]:
        return api._call_loop("jog", jog_request(api, args))

    def shunt(args: dict[str, Any], client: Any) -> dict[str, Any]:
        on = args["state"] == "on"
        chans = args.get("channels")
        try:
            bits = bits_of(api.profile, chans)
        except ValueError as exc:
            raise CommandError("bad_args", f"shunt: {exc}") from None
        if not bits:
            raise CommandError("rejected", "shunt: no channel of this profile has a shunt")
        out: dict[str, Any] = api._call_loop("shunt", (on, bits))
        out["shunt"] = args["state"]
        out["channels"] = names(api.profile, bits)
        return out

    return {"power": power, "jog": jog, "shunt": shunt}


def jog_request(api: Any, args: dict[str, Any]) -> JogRequest:
    """Check a jog's arguments against the profile and build its runner."""
    profile = api.profile
    hyd = profile.hydraulics
    if hyd is None:
        raise CommandError(
            "rejected", "jog: the profile has no [hydraulics] section (jogging needs low pressure)"
        )
    if api.gains is None:
        raise CommandError("rejected", "jog: the controller package is not available")
    names = [j.name for j in profile.joints]
    joint = str(args["joint"])
    if joint not in names:
        raise CommandError("bad_args", f"jog: no joint '{joint}' (joints: {names})")
    j = names.index(joint)
    lim = profile.joints[j].limits
    target = float(args["target_deg"])
    if not lim.soft_min_deg <= target <= lim.soft_max_deg:
        raise CommandError(
            "rejected",
            f"jog: target {target:g}° of joint {joint} is outside its soft limits "
            f"[{lim.soft_min_deg:g}°, {lim.soft_max_deg:g}°]; a jog only moves toward them",
        )
    vmax = min(hyd.jog_max_velocity_deg_s, lim.max_velocity_deg_s)
    velocity = float(args.get("velocity_deg_s", min(2.0, vmax)))
    if not 0.0 < velocity <= vmax:
        raise CommandError(
            "bad_args", f"jog: velocity_deg_s must be in (0, {vmax:g}] for joint {joint}, "
            f"got {velocity:g}",
        )  # fmt: skip
    from controller.jog import JogRunner
    from daq.service.control_api import joint_limits

    v = math.radians(velocity)
    accel = min(v / JOG_RAMP_S, math.radians(lim.max_acceleration_deg_s2))
    runner = JogRunner(
        api.gains, joint_limits(profile), profile.period, j, math.radians(target), v, accel
    )
    return JogRequest(runner, j, math.radians(target))
