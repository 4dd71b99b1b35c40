"""Shunt calibration resistors of the pressure transducers (`Channel.shunt`, docs/operations.md,
"Shunt calibration").

The loop keeps which shunts are switched on as a bit mask over `shunt_channels(profile)` (the
input channels with a `shunt` table, in profile order): bit k set = the k-th one's relay closed.
The mask is what the status block carries; backends get a boolean per input channel of their
own (`Backend.write_shunt`).
"""

from __future__ import annotations

from collections.abc import Iterable

from daq.profile.schema import Channel, Profile


def shunt_channels(profile: Profile) -> list[Channel]:
    """The input channels that carry a shunt resistor, in profile order (the mask's bits)."""
    return [c for c in profile.inputs if c.shunt is not None]


def names(profile: Profile, bits: int) -> list[str]:
    """The channels switched on in `bits`."""
    return [c.name for k, c in enumerate(shunt_channels(profile)) if bits >> k & 1]


def bits_of(profile: Profile, channels: Iterable[str] | None) -> int:
    """The mask of `channels` (None: every shunted channel); ValueError naming an unknown or
    unshunted channel and the ones that have a shunt."""
    chans = [c.name for c in shunt_channels(profile)]
    if channels is None:
        return (1 << len(chans)) - 1
    bits = 0
    for name in channels:
        if name not in chans:
            have = ", ".join(chans) or "none"
            raise ValueError(f"channel '{name}' has no shunt in the profile (shunted: {have})")
        bits |= 1 << chans.index(name)
    return bits
