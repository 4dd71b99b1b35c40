"""hw_profiles/sim-excavator.toml through the service's schema: a [chain] profile loads with its
four joints, the chain reader and the service agree on it, and bad values are refused naming
the file, the key and what is allowed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controller.plant.chain.profile import load_chain_profile
from daq.profile import ProfileError, load_profile
from tests.conftest import PROFILES

EXCAVATOR = PROFILES / "sim-excavator.toml"
TEXT = EXCAVATOR.read_text()


def _edited(tmp_path: Path, old: str, new: str) -> Path:
    assert old in TEXT, old
    path = tmp_path / "edited.toml"
    path.write_text(TEXT.replace(old, new, 1))
    return path


def test_the_excavator_loads_as_a_service_profile_with_its_chain() -> None:
    profile = load_profile(EXCAVATOR)
    assert [j.name for j in profile.joints] == ["swing", "boom", "stick", "bucket"]
    chain, home, sensors = profile.chain_model()
    assert chain.names == [j.name for j in profile.joints]
    np.testing.assert_array_equal(home, np.radians([0.0, 0.0, 0.0, 30.0]))
    assert set(sensors) == {"thesis", "better"}
    # One reading of the file: the chain reader sees the same chain and home.
    other = load_chain_profile(EXCAVATOR)
    assert other.chain == chain
    np.testing.assert_array_equal(other.home, home)
    # The swing motor has no piston; each jack joint has one transducer.
    pots = [c.joint for c in profile.channels if c.role == "potentiometer"]
    assert pots == ["boom", "stick", "bucket"]


@pytest.mark.parametrize(
    ("old", "new", "fragments"),
    [
        # A chain value out of range: the chain reader's own message, through the service.
        ("mass = 1830.0", "mass = -1830.0", ["chain.joints[1].link.mass", "allowed range"]),
        ("gear_ratio = 307.0", "gear_rato = 307.0", ["gear_ratio: missing", "gear_rato"]),
        ("gain = -0.25", "gain = 0.0", ["valve.gain: must be nonzero", "[-10, 0) or (0, 10]"]),
        # The service's joints must be the chain's, in order.
        ('name = "stick"\nhome_deg', 'name = "arm"\nhome_deg', ["[[joints]] names", "stick"]),
        # A motor has no piston to measure.
        (
            'name = "piston_boom"\nrole = "potentiometer"\njoint = "boom"',
            'name = "piston_boom"\nrole = "potentiometer"\njoint = "swing"',
            ["piston_boom", "'swing' has no jack"],
        ),
        # The chain is the plant: a planar [plant] beside it is refused.
        (
            "[chain]\n",
            "[plant]\nsupply_pressure_pa = 2e7\n"
            "joints = [{area_cap = 1e-2, area_rod = 6e-3, dead_volume = 1e-3, stroke = 1.0, "
            "pin_a = 1.0, pin_b = 1.0, closed_length = 1.5, theta0_deg = 90.0}]\n[chain]\n",
            ["remove [plant]"],
        ),
    ],
)
def test_bad_chain_profiles_are_refused_naming_the_key(
    tmp_path: Path, old: str, new: str, fragments: list[str]
) -> None:
    path = _edited(tmp_path, old, new)
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    msg = str(exc.value)
    assert msg.startswith(str(path))
    for f in fragments:
        assert f in msg, msg


def test_more_than_two_joints_without_a_chain_is_refused(tmp_path: Path) -> None:
    """The planar plant has 1 or 2 joints: four joints need [chain]."""
    path = tmp_path / "nochain.toml"
    path.write_text(TEXT[: TEXT.index("[chain]\n")])  # [chain] and [sensors] cut off
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    assert "4 joints" in str(exc.value) and "need a [chain]" in str(exc.value)


def test_the_excavators_speed_limits_are_what_its_valves_and_pressures_allow() -> None:
    """Each joint's velocity limit is its valve's full flow at home (one edge at half the
    supply, `chain_limits` with the whole flow), and its acceleration limit at most 3 s⁻¹ times
    that and at most the acceleration its chambers' headroom to the relief setting gives
    against its own inertia at home, T·(p_relief − p_held)/M_jj — the boom's half of it (a
    step of acceleration into its undamped oil column peaks at twice the static pressure).
    The service's approach moves are trapezoids at half of these limits."""
    from controller.chain_experiments import chain_limits
    from controller.plant.chain.hydraulics import drive_state
    from controller.plant.chain.plant import ChainPlant, equilibrium_state

    profile = load_profile(PROFILES / "sim-excavator.toml")
    chain, home, _ = profile.chain_model()
    feed = chain_limits(chain, home, speed_fraction=1.0, accel_per_speed=3.0)
    plant = ChainPlant(chain)
    x = equilibrium_state(plant, home, 3.0 / 7.0 * chain.supply_pressure)  # the simulator's
    m = plant.mass_matrix(home)
    relief = chain.relief_ratio * chain.supply_pressure
    n = chain.n
    for j, (joint, lim) in enumerate(zip(profile.joints, feed, strict=True)):
        v, a = joint.limits.max_velocity_deg_s, joint.limits.max_acceleration_deg_s2
        assert 0.9 * np.degrees(lim.max_velocity) <= v <= np.degrees(lim.max_velocity)
        assert a <= np.degrees(lim.max_acceleration), joint.name
        _, _, tc, tr = drive_state(plant.L, plant.J, plant.F, plant.E, j, home[j], False)
        headroom = min(abs(tc) * (relief - x[2 * n + j]), abs(tr) * (relief - x[3 * n + j]))
        static = np.degrees(headroom / m[j, j])
        assert a <= (0.5 if joint.name == "boom" else 1.0) * static, (joint.name, a, static)
