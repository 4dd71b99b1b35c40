"""The batch's choice of a model's shape constant (estimator.shape_search): the Coulomb band of
the real-rig family is recovered from data made with a known one."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from controller.plant.params import PlantEffects
from estimator.models import LinearModel, evaluate
from estimator.models_lin import BAND_RANGE_M_S, SMOOTH_SIGN_M_S, lin_models
from estimator.shape_search import ShapeSearch, choose
from tests.estimator.test_models_lin import _plant, _sample, _states


def _shape(value: float = 5e-3) -> ShapeSearch:
    def never(_v: float) -> LinearModel:
        raise AssertionError("choose() only evaluates the cost")

    return ShapeSearch("width", "mm/s", 1e3, value, 2e-4, 2e-2, make=never)


@pytest.mark.parametrize("true", [3.1e-4, 1.0e-3, 7.3e-3])
def test_choose_finds_the_minimum_of_a_smooth_cost(true: float) -> None:
    got = choose(_shape(), lambda v: 1.0 + (math.log(v / true)) ** 2)
    assert got.value == pytest.approx(true, rel=0.03)
    assert not got.at_edge
    assert got.cost_own >= got.cost


def test_a_minimum_beyond_the_range_is_reported_at_its_edge() -> None:
    got = choose(_shape(), lambda v: 1.0 / v)  # wants an ever wider band
    assert got.value == pytest.approx(2e-2) and got.at_edge
    assert "chosen by the data" in got.note("m", _shape())


def test_unusable_costs_keep_the_models_own_value() -> None:
    got = choose(_shape(4e-3), lambda v: float("nan"))
    assert got.value == 4e-3


def test_a_shape_outside_its_range_is_refused() -> None:
    with pytest.raises(ValueError, match="lo ≤ value ≤ hi"):
        _shape(1.0)


@pytest.mark.parametrize("band", [0.6e-3, 1.5e-3, 8e-3])
def test_the_coulomb_band_of_the_plant_is_the_least_squares_choice(band: float) -> None:
    """States from the simulator's equations with Coulomb friction smoothed over `band`: the
    family's mechanical model explains them exactly only with that band, and the search finds
    it (it is not the model's own 5 mm/s)."""
    params, effects = _plant()
    effects = PlantEffects(
        joints=tuple(replace(j, smoothing_velocity=band) for j in effects.joints)
    )
    rng = np.random.default_rng(7)
    # Slow pistons too: the band only shows where |ṡ| is comparable with it.
    X = _states(params, rng, 600)
    n = params.n
    X[:, n : 2 * n] *= rng.choice([1.0, 0.01, 0.003], (X.shape[0], 1))
    x = _sample(params, effects, X)
    mech = lin_models(params)[0]
    assert mech.shape is not None and mech.shape.value == SMOOTH_SIGN_M_S
    assert (mech.shape.lo, mech.shape.hi) == BAND_RANGE_M_S

    def cost(v: float) -> float:
        Phi, y = evaluate(mech.shape.make(v), x)  # type: ignore[union-attr]
        A, b = Phi.reshape(-1, Phi.shape[2]), y.reshape(-1)
        theta, *_ = np.linalg.lstsq(A, b, rcond=None)
        return float(np.mean((A @ theta - b) ** 2))

    got = choose(mech.shape, cost)
    assert got.value == pytest.approx(band, rel=0.05)
    # The model's own 5 mm/s leaves far more residual (the search stops at ~2 % of the band).
    assert got.cost < 0.01 * got.cost_own


def test_the_profile_sets_the_band_the_online_estimator_runs() -> None:
    from types import SimpleNamespace

    from estimator.shape_search import with_configured_shape

    params, _ = _plant()
    mech, fluid = lin_models(params)
    got = with_configured_shape(mech, SimpleNamespace(coulomb_band_m_s=1.2e-3))
    assert got.shape is not None and got.shape.value == 1.2e-3 and got.name == mech.name
    assert with_configured_shape(mech, SimpleNamespace(coulomb_band_m_s=None)) is mech
    assert with_configured_shape(mech, None) is mech
    assert with_configured_shape(fluid, SimpleNamespace(coulomb_band_m_s=1e-3)) is fluid
    with pytest.raises(ValueError, match="outside mechanical_lin's range"):
        with_configured_shape(mech, SimpleNamespace(coulomb_band_m_s=0.5))


def test_switches_are_found_joint_by_joint() -> None:
    """A separable cost with its minimum at different switches per joint (one sharp, one
    shallow, one beyond the first grid's dense part): the coordinate search finds each joint's
    within the tolerance, scoring every joint in one evaluation per step."""
    from estimator.shape_search import JointSwitches, choose_switches

    target = np.array([[-0.0134, -0.0004, 0.09], [0.0006, 0.0136, -0.03]])
    calls = []

    def cost(value: np.ndarray) -> np.ndarray:
        calls.append(value.copy())
        return np.sum(np.abs(value - target) * np.array([[1.0], [3.0]]), axis=0) + 1.0

    sw = JointSwitches(
        label="switches", value=np.zeros((2, 3)), span=0.2, tol=3e-4, per_joint=2,
        make=lambda v: v, show=str,  # type: ignore[arg-type, return-value]
    )  # fmt: skip
    choice = choose_switches(sw, cost)
    np.testing.assert_allclose(choice.value, target, atol=3e-4)
    assert choice.fits == len(calls) and choice.fits < 120
    assert np.all(choice.cost < choice.cost_own) and not choice.at_edge
    assert "chosen by the data" in choice.note("m", sw)


def test_configured_valve_for_the_online_estimator() -> None:
    """The profile's valve_null_offset_v / valve_lap_v are what the fluid model runs (the
    regressor changes with them); absent, the model is its own; a list of the wrong length is
    refused naming the key, and the schema refuses values outside ±0.2 V naming the range."""
    from types import SimpleNamespace

    from pydantic import ValidationError

    from daq.profile.schema import Estimator
    from estimator.models import Sample
    from estimator.shape_search import with_configured_switches

    params, _ = _plant()
    fluid = lin_models(params)[1]
    assert fluid.switches is not None
    cfg = SimpleNamespace(valve_null_offset_v=[0.007, -0.006], valve_lap_v=[-0.007, 0.0])
    got = with_configured_switches(fluid, cfg)
    assert got.switches is not None
    np.testing.assert_allclose(got.switches.value, [[0.007, -0.006], [-0.007, 0.0]])
    # u = −0.01 on joint 1: inside its configured underlap band both cap edges are open.
    n = params.n
    one = np.ones((1, n))
    p = 0.5 * params.supply_pressure * one
    x = Sample(q=0.6 * one, qd=0 * one, qdd=0 * one, s=0 * one, sd=0 * one, p_cap=p,
               pd_cap=0 * one, p_rod=p, pd_rod=0 * one, u=-0.01 * one)  # fmt: skip
    cols = [fluid.names.index(f"Q0{e}1") for e in ("++", "+-")]
    assert np.count_nonzero(evaluate(fluid, x)[0][0, 0, cols]) == 1
    assert np.count_nonzero(evaluate(got, x)[0][0, 0, cols]) == 2
    none = SimpleNamespace(valve_null_offset_v=None, valve_lap_v=None)
    assert with_configured_switches(fluid, none) is fluid
    with pytest.raises(ValueError, match="valve_lap_v has 1 values; the rig has 2 joints"):
        with_configured_switches(fluid, SimpleNamespace(valve_lap_v=[0.0]))
    with pytest.raises(ValidationError, match=r"less than or equal to 0\.2"):
        Estimator(valve_lap_v=[0.3, 0.0])


def test_the_valve_search_follows_a_diagonal_valley() -> None:
    """The fluid model's own switch search (its lines in the (null offset, lap) plane) on a cost
    whose valley runs along the null offset minus the lap: steep across (both edges' opening
    points move together), shallow along. Coordinate lines alone stop on the valley's floor
    wherever they first meet it; the model's diagonal lines walk along it to the minimum."""
    from estimator.shape_search import choose_switches

    params, _ = _plant()
    fluid = lin_models(params)[1]
    sw = fluid.switches
    assert sw is not None
    n = params.n
    target = np.array([[0.012, -0.006][:n], [-0.004, 0.009][:n]])  # b₀ row, lap row

    def cost(value: np.ndarray) -> np.ndarray:
        d = value - target
        return 100.0 * np.abs(d[0] + d[1]) + np.abs(d[0] - d[1]) + 1.0

    got = choose_switches(sw, cost)
    np.testing.assert_allclose(got.value, target, atol=2 * sw.tol)
    assert np.all(got.cost < got.cost_own) and not got.at_edge
    axes_only = choose_switches(replace(sw, directions=None), cost)
    assert np.max(np.abs(axes_only.value - target)) > 10 * sw.tol  # the valley is the test
