"""A simulated rig given a hydraulic station: `[hydraulics]` and a supply-pressure transducer.

The shipped simulated profiles have no `[hydraulics]` (their power is implicitly on, as before
the station was part of the product). Benchmarks and tests of the station procedures take one
of them and add the station here, rather than keep a second copy of each profile.
"""

from __future__ import annotations

from typing import Any

from daq.profile.schema import Profile

HYDRAULICS: dict[str, Any] = {
    "pump_line": "sim",
    "high_line": "sim",
    "low_pressure_pa": 2.5e6,
    "ramp_up_s": 1.5,
    "ramp_down_s": 3.0,
}
#: The supply transducer, like the chamber ones: 0–10 MPa → 0–5 V on a 16-bit ±10 V A/D.
SUPPLY_CHANNEL: dict[str, Any] = {
    "name": "p_supply",
    "role": "supply",
    "physical": "sim",
    "converter": {"bits": 16, "min": -10.0, "max": 10.0},
    "scaling": {"kind": "linear", "gain": 2.0e6, "offset": 0.0, "units": "Pa"},
    "valid_min": -0.5e6,
    "valid_max": 9.5e6,
    "sim_noise": 5.0e3,
}


def with_station(
    profile: Profile,
    *,
    supply_channel: bool = True,
    seed: int | None = None,
    **hydraulics: Any,
) -> Profile:
    """`profile` with a power unit (`HYDRAULICS` updated by `hydraulics`), a supply channel
    before the outputs, and optionally another simulator seed."""
    data = profile.model_dump(exclude_none=True)
    data["hydraulics"] = {**HYDRAULICS, **hydraulics}
    if supply_channel and not any(c["role"] == "supply" for c in data["channels"]):
        outputs = [c for c in data["channels"] if c["role"] == "valve"]
        inputs = [c for c in data["channels"] if c["role"] != "valve"]
        data["channels"] = [*inputs, SUPPLY_CHANNEL, *outputs]
    if seed is not None:
        data["backend"]["sim"]["seed"] = seed
    return Profile.model_validate(data)
