"""Fault injection for the simulated rig: broken wires, stuck channels, noise bursts, stalled
reads and stuck valves, from the profile or at run time.

Spec syntax: `<channel>:<kind>[:<value>][@<start_s>]`, e.g. `p_cap_1:rail_high`,
`q_1:stall_read:5@2.0` (the read blocks 5 s, once, at rig time 2 s), `piston_2:noise_burst:50`
(noise ×50), `valve_1:stuck_valve` (the spool freezes where it is).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Per-channel sensor modes (codes used by the jitted sensor kernel).
NONE, RAIL_LOW, RAIL_HIGH, STUCK, NOISE_BURST = range(5)
SENSOR_KINDS = {
    "rail_low": RAIL_LOW,
    "rail_high": RAIL_HIGH,
    "stuck": STUCK,
    "noise_burst": NOISE_BURST,
}
OTHER_KINDS = ("stall_read", "stuck_valve")


class FaultSpecError(ValueError):
    pass


@dataclass(frozen=True)
class FaultSpec:
    channel: str
    kind: str
    value: float
    start: float

    @classmethod
    def parse(cls, text: str, channels: list[str]) -> FaultSpec:
        body, _, at = text.partition("@")
        parts = body.split(":")
        if len(parts) not in (2, 3):
            raise FaultSpecError(f"fault '{text}': expected <channel>:<kind>[:<value>][@<start_s>]")
        channel, kind = parts[0], parts[1]
        if channel not in channels:
            raise FaultSpecError(f"fault '{text}': no channel '{channel}' (have {channels})")
        if kind not in SENSOR_KINDS and kind not in OTHER_KINDS:
            allowed = sorted([*SENSOR_KINDS, *OTHER_KINDS])
            raise FaultSpecError(f"fault '{text}': unknown kind '{kind}' (allowed: {allowed})")
        try:
            default = {"noise_burst": 20.0, "stall_read": 1.0}.get(kind, 0.0)
            value = float(parts[2]) if len(parts) == 3 else default
            start = float(at) if at else 0.0
        except ValueError:
            raise FaultSpecError(f"fault '{text}': value and start must be numbers") from None
        if start < 0.0 or value < 0.0:
            raise FaultSpecError(f"fault '{text}': value and start must be ≥ 0")
        return cls(channel, kind, value, start)
