"""hw_profiles/sim-excavator.toml: the thesis's numbers arrive where they belong, the sensor
grades reproduce §4.4.3's error figures, and bad input is refused naming file and key."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from controller.plant.chain.model import Motor
from controller.plant.chain.plant import ChainPlant
from controller.plant.chain.profile import (
    ChainProfile,
    ChainProfileError,
    actuator_errors,
    load_chain_profile,
)
from tests.chain.conftest import EXCAVATOR


def test_thesis_values_are_loaded(excavator: ChainProfile) -> None:
    chain = excavator.chain
    assert chain.names == ["swing", "boom", "stick", "bucket"]
    swing, boom, stick, bucket = chain.joints
    # Table 1 / Table 13 masses, Table 2 link lengths, §2.4.1 gear.
    assert [j.link.mass for j in (swing, boom, stick)] == [8031.0, 1830.0, 688.0]
    assert [j.link.dh.a for j in (swing, boom, stick)] == [0.340, 5.180, 1.800]
    assert isinstance(swing.drive, Motor) and swing.drive.gear_ratio == 307.0
    assert isinstance(boom.drive, tuple) and len(boom.drive) == 2
    # Two identical jacks, one on either side of the boom (§2.4.1).
    left, right = boom.drive
    assert left.pin_parent[2] == -right.pin_parent[2] != 0.0
    assert replace(left, pin_parent=right.pin_parent, pin_child=right.pin_child) == right
    # §2.4.1 triangles: DA, DC of the boom (0.625, 2.000) and the stick (2.444, 0.720).
    for jack, (da, dc) in ((boom.drive[0], (0.625, 2.0)), (stick.drive[0], (2.444, 0.720))):  # type: ignore[index]
        assert np.hypot(*jack.pin_parent[:2]) == pytest.approx(da, abs=1e-12)
        assert np.hypot(*jack.pin_child[:2]) == pytest.approx(dc, abs=1e-12)
    assert isinstance(bucket.drive, tuple)


def test_sensor_grades_reproduce_the_thesis_error_figures(excavator: ChainProfile) -> None:
    """§4.4.3: ±25 psi gives ±1400 N·m on the swing, ±5700 N on the boom jacks, ±4200 N on
    the stick jack (the thesis rounds to two figures); ±5 psi is five times better."""
    thesis = actuator_errors(excavator.chain, excavator.sensors["thesis"])
    assert thesis[0] == pytest.approx(1400.0, rel=0.03)
    assert thesis[1] == pytest.approx(5700.0, rel=0.01)
    assert thesis[2] == pytest.approx(4200.0, rel=0.01)
    better = actuator_errors(excavator.chain, excavator.sensors["better"])
    np.testing.assert_allclose(np.array(better) * 5.0, thesis, rtol=1e-12)
    assert excavator.sensors["thesis"].resolver_accuracy_deg == 0.1


def test_home_pose_holds_within_supply_pressure(excavator: ChainProfile) -> None:
    plant = ChainPlant(excavator.chain)
    tau = plant.gravity_torque(excavator.home)
    assert abs(tau[0]) < 1e-6  # the swing axis is vertical
    assert np.all(np.abs(tau[1:]) > 100.0)


def _edited(tmp_path: Path, old: str, new: str) -> Path:
    text = EXCAVATOR.read_text()
    assert old in text, old
    p = tmp_path / "edited.toml"
    p.write_text(text.replace(old, new, 1))
    return p


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "gear_ratio = 307.0",
            "gear_rato = 307.0",
            "gear_ratio: missing (is 'gear_rato' a misspelling",
        ),
        ("tau_s = 0.02  ", "tau_s = 0.02\nspeed = 1  ", "unknown key(s) speed"),
        ("mass = 1830.0", "mass = -1830.0", "mass: -1830.0 is outside the allowed range"),
        ("stroke = 0.90", 'stroke = "long"', "stroke: must be a number"),
        ("a = 5.180", "", "dh.a: missing"),
        (
            "pin_child = { radius = 2.000, angle_deg = 8.0, axial = 0.50 }",
            "pin_child = { radius = 2.000, angle_deg = 8.0, axial = 0.40 }",
            "must lie in one plane across the joint axis",
        ),
        ("area_rod = 9.1161e-3", "area_rod = 9.1161e-1", "area_rod"),
    ],
)
def test_bad_input_is_refused_naming_file_and_key(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    path = _edited(tmp_path, old, new)
    with pytest.raises(ChainProfileError) as exc:
        load_chain_profile(path)
    assert str(path) in str(exc.value)
    assert message in str(exc.value)
