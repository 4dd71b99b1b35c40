"""A model's shape parameters (`LinearModel.shapes`): fitted and kept, never printed as
measurements — every batch fit flags them not identifiable. The real-rig family declares its
stiction bumps so (estimator.models_lin.stiction_caveat: they read 13–17 % low at σ 4–5 % on
the realistic profile)."""

from __future__ import annotations

import dataclasses

import numpy as np

from daq.profile.plant import plant_params
from estimator.batch import identify_run
from estimator.models import reference_models
from estimator.models_lin import lin_mechanical_model


def test_a_shape_parameter_is_flagged_and_keeps_its_value(sim1dof_run) -> None:
    profile, layout, rows = sim1dof_run
    cols = {n: rows[:, i] for i, n in enumerate(layout.names)}
    params = plant_params(profile)
    models = reference_models(params)
    plain = identify_run(cols, params, profile=profile, models=models, refine=False)
    k = list(plain.names).index("Fv1")
    assert plain.identifiable[k]  # measured on this run
    shaped = [dataclasses.replace(m, shapes=("Fv1",)) if "Fv1" in m.names else m for m in models]
    res = identify_run(cols, params, profile=profile, models=shaped, refine=False)
    assert not res.identifiable[k]
    assert res.theta[k] == plain.theta[k]
    others = np.arange(len(res.names)) != k
    np.testing.assert_array_equal(res.identifiable[others], plain.identifiable[others])


def test_the_real_rig_family_declares_its_stiction_bumps_as_shapes() -> None:
    from daq.profile.loader import load_profile
    from tests.estimator.conftest import ROOT

    params = plant_params(load_profile(ROOT / "hw_profiles" / "sim-2dof-realistic.toml"))
    model = lin_mechanical_model(params)
    assert model.shapes == ("dFs+1", "dFs-1", "dFs+2", "dFs-2")
    assert all(nm in model.caveats[0] for nm in model.shapes)


def test_a_model_weighted_by_speed_says_so_and_by_how_much(sim1dof_run) -> None:
    """A model with `speed_params` is fitted with one σ per speed octile
    (estimator.wls.row_sigma) and the batch's notes say so with each equation's spread of
    those σ; a model without them gets one σ per equation (spread 1) and no such note."""
    profile, layout, rows = sim1dof_run
    cols = {n: rows[:, i] for i, n in enumerate(layout.names)}
    params = plant_params(profile)
    models = reference_models(params)
    plain = identify_run(cols, params, profile=profile, models=models, refine=False)
    assert not any("speed octile" in n for n in plain.notes)
    assert all(np.all(f.row_sigma_spread == 1.0) for f in plain.fits)
    sped = [
        dataclasses.replace(m, speed_params=(("Fv1",),)) if "Fv1" in m.names else m for m in models
    ]
    res = identify_run(cols, params, profile=profile, models=sped, refine=False)
    fit = next(f for f in res.fits if "Fv1" in f.names)
    assert fit.row_sigma_spread.shape == (1,) and fit.row_sigma_spread[0] > 1.0
    note = next(n for n in res.notes if "speed octile" in n)
    assert note.startswith(f"{fit.name}: ") and f"×{fit.row_sigma_spread[0]:.0f}" in note
