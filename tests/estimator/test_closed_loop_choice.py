"""The closed-loop choice of the parameters the equations leave weak
(estimator.closed_loop_choice): the search on known cost surfaces, and its wiring into the
batch (estimator.report.analysis.choose_in_closed_loop)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from daq.profile import load_profile
from daq.profile.plant import plant_params
from estimator.batch import BatchResult
from estimator.closed_loop_choice import (
    SPAN,
    STEPS,
    ClosedLoopChoice,
    choose_closed_loop,
    joint_of,
    pressure_cost,
)
from estimator.models import LinearModel
from estimator.models_lin import lin_models
from estimator.report import analysis
from estimator.validation import Measured
from estimator.wls import ModelFit
from tests.estimator.fits import model_fit

ROOT = Path(__file__).resolve().parents[2]
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


# ---------------------------------------------------------------- the wiring into the batch


def _model_fit(name: str, names: list[str], theta: list[float], flagged: set[str]) -> ModelFit:
    return model_fit(
        name,
        names,
        theta=theta,
        identifiable=[nm not in flagged for nm in names],
        sigma_pct=[np.nan if nm in flagged else 1.0 for nm in names],
        kappa=(1.0, 1.0),
        unidentifiable=sorted(flagged),
    )


@dataclass
class _Run:
    """What `choose_in_closed_loop` reads of a run."""

    profile: Any
    params: Any = None
    period: float = 1e-3
    oil_c: float | None = None
    columns: dict[str, np.ndarray] = field(default_factory=dict)

    def mean_oil_c(self, rows: int | None = None) -> float | None:
        return self.oil_c


BEST = {"Cext1": 2.0e-13, "Cext2": 1.0e-13}


@pytest.fixture
def fake_loop(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, float]]:
    """The closed loop replaced by a cost that is best at `BEST` (the plant handed through is
    the parameter vector itself): only the wiring is under test here; the physics is the
    bench's (bench/identification_accuracy.py)."""
    seen: list[dict[str, float]] = []
    names: list[str] = []

    def identified(known: Any, plant_names: list[str], theta: np.ndarray, *a: Any) -> Any:
        names[:] = plant_names
        return (dict(zip(plant_names, theta, strict=True)), None), None

    def closed(params: dict[str, float], *a: Any, **k: Any) -> Any:
        seen.append(params)
        fit = {}
        for j in ("1", "2"):
            d = abs(params[f"Cext{j}"] - BEST[f"Cext{j}"]) / 4e-13
            fit[f"p_cap{j}"] = fit[f"p_rod{j}"] = 100.0 * (1.0 - d)
        return SimpleNamespace(fit=fit)

    t = np.arange(100) * 1e-3
    z = np.zeros((100, 2))
    monkeypatch.setattr(analysis, "recorded_experiment", lambda rd: {"experiment": {}})
    monkeypatch.setattr(analysis, "control_setup", lambda *a: None)
    monkeypatch.setattr(analysis, "measured", lambda rd: Measured(t, z, z, z, z, None))
    monkeypatch.setattr(analysis, "_velocity_before", lambda rd: None)
    monkeypatch.setattr(analysis, "identified_params", identified)
    monkeypatch.setattr(analysis, "validate_closed_loop", closed)
    return seen


def _batch(flagged: set[str]) -> tuple[BatchResult, list[LinearModel]]:
    prof = load_profile(ROOT / "hw_profiles" / "sim-2dof-realistic.toml")
    models = lin_models(plant_params(prof))
    fits = []
    for m in models:
        theta = [{"Cext1": 1.5e-13, "Cext2": 3.0e-13}.get(nm, 1.0) for nm in m.names]
        fits.append(_model_fit(m.name, list(m.names), theta, flagged & set(m.names)))
    return BatchResult(fits=fits, fs=1000.0, conditioning=[(20.0, 1)] * 2), models


def test_the_batch_puts_the_flagged_parameters_at_their_closed_loop_choice(
    fake_loop: list[dict[str, float]],
) -> None:
    result, models = _batch({"Cext1", "Cext2", "Cint1"})
    prof = load_profile(ROOT / "hw_profiles" / "sim-2dof-realistic.toml")
    analysis.choose_in_closed_loop(_Run(prof), result, models)  # type: ignore[arg-type]
    fluid = result.fits[1]
    for nm in ("Cext1", "Cext2"):
        i = result.names.index(nm)  # in the fit and in the concatenation
        assert result.theta[i] == pytest.approx(BEST[nm], rel=0.05, abs=0.0)
        assert fluid.theta[fluid.names.index(nm)] == result.theta[i]
        assert not result.identifiable[i]  # still flagged: no σ comes with it
    assert fluid.theta_wls is not None
    assert fluid.theta_wls[fluid.names.index("Cext2")] == 3.0e-13  # the equations' beside
    assert result.theta[result.names.index("Cint1")] == 1.0  # not a closed-loop parameter
    assert len(fake_loop) == 3 + STEPS
    (note,) = result.notes
    assert note.startswith("Cext1, Cext2: chosen by closed-loop simulation") and "no σ" in note


def test_a_measured_parameter_keeps_its_measurement(fake_loop: list[dict[str, float]]) -> None:
    result, models = _batch({"Cext2"})
    prof = load_profile(ROOT / "hw_profiles" / "sim-2dof-realistic.toml")
    analysis.choose_in_closed_loop(_Run(prof), result, models)  # type: ignore[arg-type]
    assert result.theta[result.names.index("Cext1")] == 1.5e-13
    assert result.theta[result.names.index("Cext2")] == pytest.approx(1.0e-13, rel=0.05, abs=0.0)
    assert all(set(p) >= {"Cext1", "Cext2"} for p in fake_loop)
    assert all(p["Cext1"] == 1.5e-13 for p in fake_loop)  # never moved in a trial either


def test_nothing_changes_without_a_recorded_experiment(
    fake_loop: list[dict[str, float]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(analysis, "recorded_experiment", lambda rd: None)
    result, models = _batch({"Cext1", "Cext2"})
    prof = load_profile(ROOT / "hw_profiles" / "sim-2dof-realistic.toml")
    before = result.theta.copy()
    analysis.choose_in_closed_loop(_Run(prof), result, models)  # type: ignore[arg-type]
    assert np.array_equal(result.theta, before) and not fake_loop
    assert "recorded no experiment" in result.notes[0]


def test_a_model_that_diverges_at_every_trial_keeps_the_equations_value() -> None:
    theta = np.array([2e-12, 1.5e-13, 2e-12, 3e-13])

    def diverged(th: np.ndarray) -> dict[str, float]:
        return dict.fromkeys(("p_cap1", "p_rod1", "p_cap2", "p_rod2"), math.nan)

    choice = choose_closed_loop(NAMES, theta, ["Cext1", "Cext2"], SCALE, diverged, steps=4)
    assert choice.values == {"Cext1": 1.5e-13, "Cext2": 3e-13}
    assert choice.cost == {"Cext1": math.inf, "Cext2": math.inf}
    # The time the simulations took, for the note: here next to nothing.
    assert 0.0 <= choice.seconds < 60.0
