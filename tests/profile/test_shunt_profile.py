"""A pressure channel's `shunt` table in the profile: loaded from the realistic profile,
refused with the key and the allowed range named when wrong, or on a channel that is not a
pressure transducer, or where its shunted reading would trip the pressure interlock, or on a
relay line already in use."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from daq.profile import ProfileError, load_profile, parse_profile

PROFILES = Path(__file__).resolve().parents[2] / "hw_profiles"
SHUNT = {"equivalent_pa": 5.0e6, "line": "sim"}


def _data(name: str = "sim-2dof.toml", channel: str = "p_cap_1", **shunt: Any) -> dict[str, Any]:
    data = tomllib.loads((PROFILES / name).read_text())
    ch = next(c for c in data["channels"] if c["name"] == channel)
    ch["shunt"] = {**SHUNT, **shunt}
    return data


def test_the_realistic_profile_shunts_every_pressure_transducer() -> None:
    p = load_profile(PROFILES / "sim-2dof-realistic.toml")
    shunted = {c.name: c.shunt for c in p.inputs if c.shunt is not None}
    assert set(shunted) == {"p_cap_1", "p_rod_1", "p_cap_2", "p_rod_2", "p_supply"}
    assert all(s.sigma == 0.001 and s.line == "sim" and s.sim_error is None
               for s in shunted.values())  # fmt: skip
    plain = parse_profile(_data(), "x.toml").inputs[0].shunt
    assert plain is not None and plain.sigma == 0.001  # the default certificate σ


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"equivalent_pa": -1.0}, r"channels\[0:p_cap_1\]\.shunt\.equivalent_pa.*greater than 0"),
        ({"equivalent_pa": 9.6e6}, r"shunt.equivalent_pa 9.6e\+06 is outside the allowed range "
                                   r"0 < equivalent_pa < valid_max \(9.5e\+06\)"),
        ({"sigma": 0.05}, r"shunt\.sigma.*less than or equal to 0.02"),
        ({"sigma": -0.001}, r"shunt\.sigma.*greater than or equal to 0"),
        ({"sim_error": 0.2}, r"shunt\.sim_error.*less than or equal to 0.05"),
        ({"line": ""}, r"shunt\.line"),
        ({"ohms": 1.0}, r"shunt\.ohms"),
        # 0.9 × max_pressure_pa (7.5 MPa on sim-2dof) = 6.75 MPa
        ({"equivalent_pa": 7.0e6}, r"channel 'p_cap_1': shunt.equivalent_pa 7e\+06 is above 0.9 "
                                   r"× joint 'j1''s max_pressure_pa \(6.75e\+06\)"),
    ],
)  # fmt: skip
def test_bad_shunt_values_are_refused_naming_the_key(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        parse_profile(_data(**change), "x.toml")


def test_a_shunt_on_a_channel_that_is_not_a_pressure_transducer_is_refused() -> None:
    only = (
        r"shunt applies to pressure transducers only \(roles pressure_cap, pressure_rod, supply\)"
    )
    with pytest.raises(ProfileError, match=rf"channel 'spool_1': {only}"):
        parse_profile(_data(channel="spool_1", equivalent_pa=1.0), "x.toml")


def test_a_shunt_line_is_one_relay_s_own_on_hardware() -> None:
    data = _data("ni-2dof.toml", line="Dev1/port0/line2")
    data["hydraulics"] = {"pump_line": "Dev1/port0/line0", "low_pressure_pa": 2.0e6}
    parse_profile(data, "x.toml")
    data["channels"][1]["shunt"] = {**SHUNT, "line": "Dev1/port0/line2"}
    with pytest.raises(ProfileError, match=r"channel 'p_rod_1': shunt.line 'Dev1/port0/line2' is "
                       r"also channel 'p_cap_1''s shunt.line"):  # fmt: skip
        parse_profile(data, "x.toml")
    data["channels"][1]["shunt"] = {**SHUNT, "line": "Dev1/port0/line0"}
    with pytest.raises(ProfileError, match=r"'Dev1/port0/line0' is also hydraulics.pump_line"):
        parse_profile(data, "x.toml")
