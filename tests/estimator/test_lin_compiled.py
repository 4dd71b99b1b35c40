"""The batch's fast paths give the reference path's numbers, bit for bit: the compiled Lin
fluid regressor against its NumPy definition, a structure candidate's lean score against a
full fit's, and the per-column memo of a structure search against filtering every column."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import estimator.observation as obs
from controller.plant.params import PlantParams
from daq.profile import load_profile
from daq.profile.plant import plant_params
from estimator.model_fit import candidate_residuals, fit_blocks
from estimator.models import static_sample
from estimator.models_lin import (
    lin_fluid_regressor,
    lin_fluid_regressor_reference,
    lin_mechanical_model,
    lin_models,
)

ROOT = Path(__file__).resolve().parents[2]
FS = 1000.0


def _params(oil: bool = True) -> PlantParams:
    params = plant_params(load_profile(ROOT / "hw_profiles" / "sim-2dof-realistic.toml"))
    assert params.oil is not None  # the realistic profile declares an oil law
    return params if oil else replace(params, oil=None)


def _raw(n: int = 6000, seed: int = 1) -> np.ndarray:
    """(n, 12) `[q | s | p_cap | p_rod | u | temp]` of a 2-joint rig: moving joints, noisy
    pressures that cross the supply and zero, a spool crossing null, a warming oil."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / FS
    raw = np.zeros((n, 12))
    raw[:, 0:2] = 0.6 + 0.3 * np.sin(2 * np.pi * np.outer(t, [0.7, 1.1]))
    raw[:, 2:4] = 0.05 * np.sin(2 * np.pi * np.outer(t, [0.7, 1.1]))
    raw[:, 4:8] = 3e6 + 4e6 * np.sin(2 * np.pi * np.outer(t, [0.3, 0.5, 0.4, 0.2]))
    raw[:, 4:8] += 1e5 * rng.standard_normal((n, 4))
    raw[:, 8:10] = 0.02 * np.sin(2 * np.pi * np.outer(t, [1.3, 0.9]))
    raw[:, 8:10] += 1e-3 * rng.standard_normal((n, 2))
    raw[:, 10:12] = (35.0 + 10.0 * t / t[-1])[:, None]
    return raw


VALVES = (
    None,
    np.array([0.003, -0.002, -0.004, 0.001]),  # offsets and an overlap / underlap
    np.array([0.0, 0.0, 0.05, -0.05]),  # a wide overlap on one joint, underlap on the other
)


@pytest.mark.parametrize("oil", [True, False])
@pytest.mark.parametrize("valve", range(len(VALVES)))
def test_the_compiled_fluid_regressor_is_its_definition(oil: bool, valve: int) -> None:
    params = _params(oil)
    raw = _raw()
    sos = obs.butter(4, 40.0, fs=FS, output="sos")
    x = obs.conditioned(raw, sos, FS, 2)
    for sample in (x, static_sample(x), obs.sample_from(raw, 2)):
        got = lin_fluid_regressor(params, sample, VALVES[valve])
        ref = lin_fluid_regressor_reference(params, sample, VALVES[valve])
        assert got[0].shape == ref[0].shape
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])
    if valve < 2:
        # Every column is exercised (the spool crosses both opening points: no edge always
        # shut or always open); the wide lap of the third shuts joint 1's edges throughout.
        phi = lin_fluid_regressor(params, x, VALVES[valve])[0]
        assert np.all(np.any(phi != 0.0, axis=(0, 1)))


def test_a_candidates_lean_score_is_the_full_fits() -> None:
    """`candidate_residuals` (what the structure searches score) against `fit_blocks`'s
    residual variance and per-equation σ, and with the column memo of a search shared over
    candidates against no memo at all."""
    params = _params()
    raw = _raw(12000)
    blks = [slice(0, 7000), slice(7300, 12000)]
    fluid = lin_models(params)[1]
    assert fluid.switches is not None
    kw: dict[str, Any] = {"fs": FS, "nj": 2, "cutoff_hz": 40.0, "nd": 10, "trim": 100}
    cache: dict = {}
    for value in ([[0.0, 0.0], [0.0, 0.0]], [[0.003, -0.002], [-0.004, 0.001]],
                  [[0.003, -0.002], [-0.004, 0.002]]):  # fmt: skip
        mdl = fluid.switches.make(np.array(value))
        full = fit_blocks(mdl, raw, blks, jackknife_groups=0, refine=False, **kw)
        assert full is not None
        lean = candidate_residuals(mdl, raw, blks, cache=cache, **kw)
        assert lean is not None
        assert lean[0] == full[0].residual_var
        np.testing.assert_array_equal(lean[1], full[0].equation_sigma)
    mech = lin_mechanical_model(params)
    assert mech.shape is not None
    kw = {"fs": FS, "nj": 2, "cutoff_hz": 20.0, "nd": 20, "trim": 200}
    cache = {}
    for band in (1e-3, 2e-3, 1e-3):
        mdl = mech.shape.make(band)
        full = fit_blocks(mdl, raw, blks, jackknife_groups=0, refine=False, **kw)
        lean = candidate_residuals(mdl, raw, blks, cache=cache, **kw)
        assert full is not None and lean is not None
        assert lean[0] == full[0].residual_var
        np.testing.assert_array_equal(lean[1], full[0].equation_sigma)


def test_filtering_into_the_nonzero_columns_is_filtering_the_whole_array() -> None:
    """The observation adds the filtered static part and scales and decimates only the
    columns that are not zero throughout: the same numbers as the whole-array forms."""
    sos = obs.butter(4, 40.0, fs=FS, output="sos")
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3000, 4, 6))
    a[:, 1, 2:] = 0.0
    a[:, 0, :3] = 0.0
    base = rng.standard_normal(a.shape)
    scale = rng.uniform(0.5, 2.0, (1, 4, 6))

    def filt(b: np.ndarray) -> np.ndarray:
        return obs.sosfiltfilt(sos, b, axis=0)

    def dec(b: np.ndarray) -> np.ndarray:
        return obs.decimate(b, 10, axis=0, zero_phase=True)

    np.testing.assert_array_equal(obs._plus_filtered(base.copy(), a, filt), base + filt(a))
    np.testing.assert_array_equal(obs._scaled_nonzero(dec, a, scale), dec(a * scale))
    np.testing.assert_array_equal(
        obs._scaled_nonzero(dec, a, scale), obs.nonzero_columns(dec, a * scale)
    )


def test_the_conditioned_memo_filters_only_the_changed_signals() -> None:
    """A sensor refit moves one channel: its conditioned signals are filtered again, the
    others come from the memo, and the whole equals conditioning from scratch."""
    sos = obs.butter(4, 40.0, fs=FS, output="sos")
    raw = _raw()
    memo: obs.ColumnMemo = {}
    obs.conditioned(raw, sos, FS, 2, memo)
    moved = raw.copy()
    moved[:, 5] *= 1.001
    calls: list[int] = []
    real = obs.sosfiltfilt

    def counted(sos_: np.ndarray, b: np.ndarray, axis: int) -> np.ndarray:
        calls.append(b.shape[1])
        return real(sos_, b, axis=axis)

    obs.sosfiltfilt = counted
    try:
        got = obs.conditioned(moved, sos, FS, 2, memo)
    finally:
        obs.sosfiltfilt = real
    ref = obs.conditioned(moved, sos, FS, 2)
    assert calls == [1]
    for name in ("q", "qd", "qdd", "s", "sd", "p_cap", "pd_cap", "p_rod", "pd_rod", "u"):
        np.testing.assert_array_equal(getattr(got, name), getattr(ref, name))


def test_the_refinements_instruments_are_rebuilt_as_from_scratch() -> None:
    """The output-error refinement's θ → Z keeps the columns that hold no predicted rate from
    its first call: Z for a second θ equals the Z of a fresh observation at that θ."""
    params = _params()
    raw = _raw()
    fluid = lin_models(params)[1]
    args = (raw, FS, 2, 40.0, 10, 100)
    _, _, Z = obs.observation(fluid, *args, instruments=True)
    _, _, fresh = obs.observation(fluid, *args, instruments=True)
    assert Z is not None and fresh is not None
    theta = np.asarray(fluid.param_scale, dtype=float).copy()
    Z(theta)
    theta2 = theta * np.linspace(0.8, 1.2, theta.size)
    np.testing.assert_array_equal(Z(theta2), fresh(theta2))
