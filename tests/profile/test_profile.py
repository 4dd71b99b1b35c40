"""Profiles load strictly: every broken profile fails with one line naming file, key and rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from daq.profile import ProfileError, load_profile
from tests.conftest import PROFILES

REFERENCE = (PROFILES / "sim-2dof.toml").read_text()


#: Every shipped profile is the service's, serial-chain ones (`[chain]`, docs/excavator.md)
#: included; tests/profile/test_chain_profile.py checks those further.
SERVICE_PROFILES = sorted(p.name for p in PROFILES.glob("*.toml"))


def test_the_chain_profile_is_a_service_profile() -> None:
    chains = [n for n in SERVICE_PROFILES if "\n[chain]\n" in (PROFILES / n).read_text()]
    assert chains == ["sim-excavator.toml"]


@pytest.mark.parametrize("name", SERVICE_PROFILES)
def test_shipped_profiles_load(name: str) -> None:
    profile = load_profile(PROFILES / name)
    assert profile.joints and profile.channels


def test_reference_profile_describes_the_reference_rig() -> None:
    p = load_profile(PROFILES / "sim-2dof.toml")
    assert [j.name for j in p.joints] == ["j1", "j2"]
    assert {c.role for c in p.channels} == {
        "pressure_cap",
        "pressure_rod",
        "lvdt",
        "potentiometer",
        "resolver",
        "valve",
        "temperature",
    }
    assert p.backend.sim is not None and p.backend.sim.plant is not None
    assert p.backend.sim.plant.bulk_modulus_pa == 2.33e8
    assert p.plant is not None and p.plant.bulk_modulus_pa is None  # no answers in [plant]
    assert p.period == 1e-3


def _broken(tmp_path: Path, old: str, new: str, count: int = 1) -> Path:
    assert old in REFERENCE, old
    path = tmp_path / "broken.toml"
    path.write_text(REFERENCE.replace(old, new, count))
    return path


CASES = [
    # (what is wrong, old text, new text, fragments the one-line message must contain)
    (
        "misspelt key",
        "max_pressure_pa = 7.5e6",
        "max_presure_pa = 7.5e6",
        ["joints[0:j1].limits.max_presure_pa", "unknown key"],
    ),
    (
        "string for a number",
        "loop_rate_hz = 1000.0",
        'loop_rate_hz = "1000"',
        ["rig.loop_rate_hz", "valid number", "'1000'"],
    ),
    (
        "negative range",
        "valid_min = -0.5e6\nvalid_max = 9.5e6",
        "valid_min = 9.5e6\nvalid_max = -0.5e6",
        ["channels[0:p_cap_1]", "valid_max", "must be greater than valid_min"],
    ),
    (
        "converter range inverted",
        "converter = { bits = 12, min = -10.0, max = 10.0 }",
        "converter = { bits = 12, min = 10.0, max = -10.0 }",
        ["channels[11:valve_1].converter", "max (-10.0) must be greater than min (10.0)"],
    ),
    (
        "out of range value",
        "loop_rate_hz = 1000.0",
        "loop_rate_hz = 1.0",
        ["rig.loop_rate_hz", "greater than or equal to 10"],
    ),
    (
        "missing resolver",
        'name = "q_2"\nrole = "resolver"',
        'name = "q_2"\nrole = "temperature"',
        ["joint 'j2' has no 'resolver' channel"],
    ),
    (
        "duplicate channel names",
        'name = "p_rod_1"',
        'name = "p_cap_1"',
        ["duplicate channel names: p_cap_1"],
    ),
    (
        "unknown role",
        'role = "lvdt"',
        'role = "lvdtt"',
        ["channels[4:spool_1].role", "'pressure_cap'"],
    ),
    ("wrong joint", 'joint = "j2"', 'joint = "j3"', ["names joint 'j3'"]),
    ("bad bits", "bits = 14", "bits = 40", ["converter.bits", "less than or equal to 24"]),
    # Keys the loop would not act on (the valve command is volts at the D/A): refused.
    (
        "scaled output",
        'name = "valve_1"\nrole = "valve"\njoint = "j1"\nphysical = "sim"\n'
        "converter = { bits = 12, min = -10.0, max = 10.0 }\n"
        'scaling = { kind = "linear", gain = 1.0, offset = 0.0, units = "V" }',
        'name = "valve_1"\nrole = "valve"\njoint = "j1"\nphysical = "sim"\n'
        "converter = { bits = 12, min = -10.0, max = 10.0 }\n"
        'scaling = { kind = "linear", gain = 4.0, offset = 0.0, units = "mA" }',
        ["channels[11:valve_1]", "scaling must be linear with gain 1 and offset 0"],
    ),
    (
        "noise on an output",
        'name = "valve_1"\nrole = "valve"',
        'name = "valve_1"\nsim_noise = 0.001\nrole = "valve"',
        ["channels[11:valve_1]", "'sim_noise' applies to input channels only"],
    ),
]


@pytest.mark.parametrize(("what", "old", "new", "fragments"), CASES, ids=[c[0] for c in CASES])
def test_broken_profile_gives_one_clear_line(
    tmp_path: Path, what: str, old: str, new: str, fragments: list[str]
) -> None:
    path = _broken(tmp_path, old, new)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    for fragment in fragments:
        assert fragment in message, f"{what}: {fragment!r} not in {message!r}"


def test_missing_file_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read"):
        load_profile(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[rig\nid = 1")
    with pytest.raises(ProfileError, match="not valid TOML"):
        load_profile(bad)


def test_sim_backend_without_plant_is_refused(tmp_path: Path) -> None:
    text = REFERENCE[
        : REFERENCE.index(
            "# ------------------------------------------------------------------ plant"
        )
    ]
    path = tmp_path / "noplant.toml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=r"needs a \[plant\] section"):
        load_profile(path)
