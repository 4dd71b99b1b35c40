"""The closed-loop choice of the parameters the equations leave weak
(estimator.closed_loop_choice): the search on known cost surfaces, and its wiring into the
batch (estimator.report.analysis.choose_in_closed_loop)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from estimator.closed_loop_choice import (
    SPAN,
    STEPS,
    ClosedLoopChoice,
    choose_closed_loop,
    joint_of,
    pressure_cost,
)

NAMES = ["Cint1", "Cext1", "Cint2", "Cext2"]
SCALE = {"Cext1": 1e-13, "Cext2": 1e-13}


def _fits(best: dict[str, float], width: float = 4e-13, leak: float = 0.0):
    """FIT per pressure output, falling off linearly with each joint's distance from its
    own best value (`leak`: how much of the other joint's distance joint 1 also feels)."""
    calls: list[np.ndarray] = []

    def fits_of(theta: np.ndarray) -> dict[str, float]:
        calls.append(theta.copy())
        d1 = abs(theta[1] - best["Cext1"]) + leak * abs(theta[3] - best["Cext2"])
        d2 = abs(theta[3] - best["Cext2"])
        return {
            "p_cap1": 100.0 * (1.0 - d1 / width),
            "p_rod1": 100.0 * (1.0 - 0.5 * d1 / width),
            "p_cap2": 100.0 * (1.0 - d2 / width),
            "p_rod2": 100.0 * (1.0 - 0.5 * d2 / width),
            "q1": 99.0,
        }

    return fits_of, calls


def test_each_joint_finds_its_own_minimum_in_one_simulation_per_step() -> None:
    theta = np.array([2e-12, 1.5e-13, 2e-12, 3e-13])
    best = {"Cext1": 2.0e-13, "Cext2": 1.9e-13}
    fits_of, calls = _fits(best, leak=0.05)
    choice = choose_closed_loop(NAMES, theta, ["Cext1", "Cext2"], SCALE, fits_of)
    # The bracket [0, 3 × max(value, scale)] shrinks to 0.618^STEPS of its width.
    for nm, start in (("Cext1", 1.5e-13), ("Cext2", 3e-13)):
        tol = SPAN * max(start, SCALE[nm]) * 0.618**STEPS
        assert choice.values[nm] == pytest.approx(best[nm], abs=tol)
        assert choice.equations[nm] == start
        assert choice.cost[nm] < choice.cost_equations[nm]
    # The start, two golden points, then one simulation per step for both joints at once.
    assert choice.trials == len(calls) == 3 + STEPS
    assert all(c[0] == 2e-12 and c[2] == 2e-12 for c in calls)  # only the candidates move
    assert theta[1] == 1.5e-13 and theta[3] == 3e-13  # the caller's array is not changed
    assert "Cext1" in choice.note() and "no σ" in choice.note()


def test_the_equations_value_is_kept_when_no_trial_beats_it() -> None:
    # The equations' value is the minimum, and it is not on the golden grid.
    theta = np.array([2e-12, 1.234e-13, 2e-12, 2.345e-13])
    fits_of, _ = _fits({"Cext1": 1.234e-13, "Cext2": 2.345e-13})
    choice = choose_closed_loop(NAMES, theta, ["Cext1", "Cext2"], SCALE, fits_of, steps=3)
    assert choice.values == {"Cext1": 1.234e-13, "Cext2": 2.345e-13}
    assert choice.cost == choice.cost_equations


def test_an_estimate_at_or_below_zero_searches_up_to_the_scale() -> None:
    theta = np.array([2e-12, -5e-14, 2e-12, 0.0])
    best = {"Cext1": 2.2e-13, "Cext2": 0.7e-13}
    fits_of, calls = _fits(best)
    choice = choose_closed_loop(NAMES, theta, ["Cext1", "Cext2"], SCALE, fits_of)
    tol = SPAN * 1e-13 * 0.618**STEPS
    assert choice.values["Cext1"] == pytest.approx(best["Cext1"], abs=tol)
    assert choice.values["Cext2"] == pytest.approx(best["Cext2"], abs=tol)
    assert all(0.0 <= c[1] <= SPAN * 1e-13 for c in calls[1:])


def test_a_diverged_trial_costs_infinity_and_is_never_chosen() -> None:
    theta = np.array([2e-12, 1e-13, 2e-12, 1e-13])

    def fits_of(th: np.ndarray) -> dict[str, float]:
        # Diverges above 2e-13 (a NaN FIT), best just below it.
        bad = th[1] > 2e-13
        f = 100.0 * (1.0 - abs(th[1] - 1.9e-13) / 4e-13)
        return {
            "p_cap1": math.nan if bad else f,
            "p_rod1": f,
            "p_cap2": 90.0,
            "p_rod2": 90.0,
        }

    choice = choose_closed_loop(NAMES, theta, ["Cext1", "Cext2"], SCALE, fits_of)
    assert choice.values["Cext1"] <= 2e-13
    assert choice.values["Cext1"] == pytest.approx(1.9e-13, abs=0.1e-13)
    assert pressure_cost({"p_cap1": math.nan, "p_rod1": 90.0}, "1") == math.inf
    assert pressure_cost({"p_cap1": 90.0}, "1") == math.inf  # an output missing
    assert pressure_cost({"p_cap1": 90.0, "p_rod1": 80.0}, "1") == pytest.approx(0.05)


def test_parameters_must_name_one_joint_each() -> None:
    assert joint_of("Cext12") == "12"
    with pytest.raises(ValueError, match="names no joint"):
        joint_of("air")
    theta = np.zeros(4)
    fits_of, _ = _fits({"Cext1": 1e-13, "Cext2": 1e-13})
    with pytest.raises(ValueError, match="one per joint"):
        choose_closed_loop(["Cext1", "Cext1b1"], theta[:2], ["Cext1", "Cext1b1"], {
            "Cext1": 1e-13, "Cext1b1": 1e-13}, fits_of)  # fmt: skip
    assert choose_closed_loop(NAMES, theta, [], SCALE, fits_of) == ClosedLoopChoice()
