"""estimator/fit_warnings.py: which joints "barely moved", which residuals are "far from white",
which parameters disagree across output equations or are not identifiable — each threshold at
its boundary and each sentence in full (the words a user reads instead of a bad number)."""

from __future__ import annotations

import numpy as np
import pytest

from estimator.fit_warnings import fit_warnings, output_labels, still_joints
from estimator.wls import ModelFit
from tests.estimator.fits import model_fit


def fit(
    name: str = "mechanical",
    names: tuple[str, ...] = ("M1", "B1"),
    kappa: tuple[float, ...] = (1.0,),
    z: tuple[float, ...] = (0.0, 0.0),
    identifiable: tuple[bool, ...] = (True, True),
    unidentifiable: tuple[str, ...] = (),
) -> ModelFit:
    return model_fit(
        name, names, kappa=kappa, z=z, identifiable=identifiable, unidentifiable=unidentifiable
    )


def test_still_joints_are_those_under_one_degree_in_every_block() -> None:
    raw = np.zeros((300, 3))
    raw[100:, 0] = np.radians(np.linspace(0.0, 0.999, 200))  # just under 1° peak to peak
    raw[100:, 1] = np.radians(np.linspace(0.0, 1.0, 200))  # exactly 1°: moved
    raw[:50, 2] = np.radians(5.0)  # a 5° step inside the first block only
    blocks = [slice(0, 100), slice(100, 300), slice(50, 50)]  # the empty block is skipped
    got = still_joints(raw, 3, blocks)
    assert [j for j, _ in got] == [0]
    assert got[0][1] == pytest.approx(0.999, rel=1e-9)
    moved = raw.copy()
    moved[:, 2] = 0.0
    assert [j for j, _ in still_joints(moved, 3, blocks)] == [0, 2]
    assert still_joints(raw, 1, []) == [(0, 0.0)]  # no block: nothing moved


def test_output_labels_name_the_reference_equations() -> None:
    assert output_labels(fit(kappa=(1.0, 1.0)), 2) == ["torque 1", "torque 2"]
    assert output_labels(fit(name="fluid", kappa=(1,) * 4), 2) == [
        "cap flow 1",
        "rod flow 1",
        "cap flow 2",
        "rod flow 2",
    ]
    assert output_labels(fit(kappa=(1.0,) * 3), 2) == ["equation 1", "equation 2", "equation 3"]
    assert output_labels(fit(name="fluid", kappa=(1.0, 1.0)), 2) == ["equation 1", "equation 2"]
    assert output_labels(fit(name="lin", kappa=(1.0, 1.0)), 2) == ["equation 1", "equation 2"]


def test_a_clean_fit_says_nothing() -> None:
    assert fit_warnings(fit(kappa=(10.0, 1.0), z=(4.0, 0.0)), [], 2) == []


def test_residuals_far_from_white_name_the_equations_and_the_measured_parameters() -> None:
    got = fit_warnings(fit(kappa=(10.5, 3.0), identifiable=(True, False)), [], 2)
    assert got[0] == (
        "the mechanical model does not explain the data: residuals far from white on "
        "torque 1 (κ = 10); M1 are conditional on the model (a sensor gain or offset error, "
        "or dynamics the model lacks, bias them beyond their σ)"
    )


def test_disagreeing_equations_name_the_parameters_past_four_sigma() -> None:
    got = fit_warnings(fit(z=(4.01, 9.0)), [], 1)
    assert got == [
        "the mechanical model's output equations disagree on M1 (4σ), B1 (9σ): a sensor "
        "error (gain, offset) or a model error; its σ is widened by the disagreement, and "
        "M1, B1 are conditional on the model"
    ]


@pytest.mark.parametrize(
    ("flags", "still", "weak", "sentence"),
    [
        (
            (False, True),
            [],
            (),
            "M1 is not identifiable from this run (not excited): fixed at the profile's "
            "value, not measured",
        ),
        (
            (False, False),
            [(1, 0.25)],
            ("M1 + B1",),
            "M1, B1 are not identifiable from this run (joint 2 barely moved (0.25° peak to "
            "peak); weakly excited directions: M1 + B1): fixed at the profile's value, not "
            "measured",
        ),
        (
            (True, False),
            [(0, 0.5), (1, 0.125)],
            (),
            "B1 is not identifiable from this run (joint 1 barely moved (0.50° peak to peak); "
            "joint 2 barely moved (0.12° peak to peak)): fixed at the profile's value, not "
            "measured",
        ),
    ],
)
def test_unidentifiable_parameters_say_why(flags, still, weak, sentence) -> None:
    got = fit_warnings(fit(identifiable=flags, unidentifiable=weak), still, 2)
    assert got == [sentence]


def test_a_still_joint_alone_flags_nothing() -> None:
    assert fit_warnings(fit(), [(0, 0.1)], 2) == []


@pytest.mark.parametrize(
    "broken",
    [
        {"z": (9.0,)},  # fewer disagreement scores than parameters
        {"identifiable": (True,)},  # fewer flags than parameters
        {"identifiable": (False,)},
    ],
)
def test_a_fit_whose_lists_do_not_match_its_parameters_is_an_error(broken) -> None:
    """Names and values are paired one to one; a short list must not silently pair the wrong
    name with a value (or drop one)."""
    with pytest.raises(ValueError, match="zip"):
        fit_warnings(fit(**broken), [], 1)
