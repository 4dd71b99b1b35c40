"""`[hydraulics]`, the `supply` role and `accuracy` in the profile: checked at load with the key
named; profiles without them load as before."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from daq.profile import ProfileError, parse_profile

PROFILES = Path(__file__).resolve().parents[2] / "hw_profiles"


def _data(name: str = "sim-2dof.toml", **hyd: Any) -> dict[str, Any]:
    data = tomllib.loads((PROFILES / name).read_text())
    data["hydraulics"] = {"pump_line": "sim", "low_pressure_pa": 2.5e6, **hyd}
    return data


def test_a_station_profile_loads_and_one_without_stays_implicitly_powered() -> None:
    from daq.station.power import Power, initial, stage_pressure

    p = parse_profile(_data(), "x.toml")
    assert initial(p) == Power.OFF and p.hydraulics is not None
    assert stage_pressure(p, Power.LOW) == p.plant.supply_pressure_pa  # type: ignore[union-attr]
    two = parse_profile(_data(high_line="sim"), "x.toml")
    assert stage_pressure(two, Power.LOW) == 2.5e6
    plain = parse_profile(tomllib.loads((PROFILES / "sim-2dof.toml").read_text()), "y.toml")
    assert plain.hydraulics is None and initial(plain) == Power.HIGH


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"low_pressure_pa": 9.0e6}, r"low_pressure_pa \(9000000.0\) must not exceed"),
        ({"supply_min_fraction": 1.5}, r"hydraulics.supply_min_fraction"),
        ({"supply_arm_fraction": 0.6}, r"supply_arm_fraction 0.6 must be above supply_min"),
        ({"jog_max_velocity_deg_s": 90.0}, r"hydraulics.jog_max_velocity_deg_s"),
        ({"pump": "sim"}, r"hydraulics.pump"),
        ({"device": "ni"}, r"hydraulics.device 'ni' is not one of"),
    ],
)
def test_bad_hydraulics_are_refused_naming_the_key(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        parse_profile(_data(**change), "x.toml")


def test_the_supply_channel_needs_no_joint_and_there_is_at_most_one() -> None:
    data = _data()
    supply = {
        "name": "p_supply", "role": "supply", "physical": "sim",
        "converter": {"bits": 16, "min": -10.0, "max": 10.0},
        "scaling": {"kind": "linear", "gain": 2.0e6, "units": "Pa"},
        "valid_min": -0.5e6, "valid_max": 9.5e6,
        "accuracy": {"offset": 2.5e4, "gain": 0.005},
    }  # fmt: skip
    data["channels"].insert(0, supply)
    p = parse_profile(data, "x.toml")
    assert p.supply_channel is not None and p.supply_channel.accuracy.gain == 0.005  # type: ignore[union-attr]
    data["channels"].insert(0, {**supply, "name": "p_supply2"})
    with pytest.raises(ProfileError, match="at most one 'supply' channel"):
        parse_profile(data, "x.toml")
    data["channels"].pop(0)
    data["channels"][0]["accuracy"] = {"offset": -1.0}
    with pytest.raises(ProfileError, match=r"accuracy.offset"):
        parse_profile(data, "x.toml")
