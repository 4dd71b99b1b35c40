"""Hydraulic power around `rigctl identify` on a station with `[hydraulics]`
(docs/operations.md, "Station set-up"): low pressure to arm (set-up), high for the test, off at
the end. A profile without `[hydraulics]` has its power implicitly on: nothing to switch."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from daq.profile.schema import Profile
from rigctl.session import RigSession, SessionError


def _rig_time(s: RigSession) -> float:
    return float(s.request("status").get("t") or 0.0)


def _wait_rig(s: RigSession, seconds: float, timeout: float) -> None:
    """`seconds` of rig time (virtual time runs faster than the wall clock)."""
    t_end = _rig_time(s) + seconds
    deadline = time.monotonic() + timeout
    while _rig_time(s) < t_end:
        if time.monotonic() > deadline:
            raise SessionError(f"the rig's clock did not advance {seconds:g} s in {timeout:g} s")
        time.sleep(0.05)


def power_up(s: RigSession, profile: Profile, say: Callable[[str], None]) -> list[str]:
    """Power low, arm once the supply is up (the service refuses before), then power high and
    wait until the supply has settled at the working pressure (3 ramp times: 9 accumulator
    time constants). Returns the levels switched, for the result."""
    hyd = profile.hydraulics
    if hyd is None:
        return []
    say(f"hydraulic power low for set-up ({hyd.low_pressure_pa / 1e6:.3g} MPa)")
    s.command("power", {"level": "low"})
    deadline = time.monotonic() + 60.0 + 10.0 * hyd.ramp_up_s
    while True:
        reply: dict[str, Any] = s.request("arm")
        if reply.get("ok"):
            break
        if time.monotonic() > deadline:
            raise SessionError(
                f"arm refused at low pressure ({reply.get('error')}): {reply.get('message')}"
            )
        time.sleep(0.1)
    p_high = profile.plant.supply_pressure_pa if profile.plant is not None else float("nan")
    say(f"hydraulic power high for the run ({p_high / 1e6:.3g} MPa)")
    s.command("power", {"level": "high"})
    _wait_rig(s, 3.0 * hyd.ramp_up_s, 120.0 + 30.0 * hyd.ramp_up_s)
    return ["low", "high"]


def power_down(s: RigSession, profile: Profile, say: Callable[[str], None]) -> list[str]:
    """Power off after the session's last move (disarmed); best effort after a fault."""
    if profile.hydraulics is None:
        return []
    try:
        reply = s.request("power", {"level": "off"})
    except SessionError as exc:
        say(f"hydraulic power left on: power off not answered ({exc})")
        return []
    if reply.get("ok"):
        say("hydraulic power off")
        return ["off"]
    say(f"hydraulic power left on: power off refused ({reply.get('message')})")
    return []
