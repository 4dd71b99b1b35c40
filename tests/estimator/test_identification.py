"""The chain on simulated data: only telemetry-like rows go in, compared with the plant's truth."""

from __future__ import annotations

import numpy as np
import pytest

from daq.profile.plant import plant_params
from estimator.batch import identify_run
from estimator.models import load_models
from estimator.online import OnlineIdentifier

USER = "estimator.examples.one_joint:models"


@pytest.mark.parametrize("spec", ["reference", USER])
def test_online_1dof_recovers_truth(sim1dof_run, spec: str) -> None:
    profile, layout, rows = sim1dof_run
    ident = OnlineIdentifier(
        profile, layout.to_dict(), models=load_models(spec, plant_params(profile))
    )
    for k in range(0, len(rows), 20):
        ident.update_rows(rows[k : k + 20])
    est = ident.estimate()
    assert len(est.names) == 8  # 3 mechanical + 5 fluid
    err = np.abs(est.theta - est.truth) / np.abs(est.truth)
    assert err.max() < 0.02, dict(zip(est.names, err, strict=True))
    assert np.all(np.isfinite(est.sigma_pct)) and np.all(est.sigma_pct < 5)
    assert est.history_theta.shape == (len(est.history_t), 8)
    assert est.gaps == 0
    mech, fluid = est.models["mechanical"], est.models["fluid"]
    assert mech["samples"] > 0.95 * len(rows) and mech["rejected"] == 0
    # Samples with a pressure at the relief valve or the tank bound are left out of the fluid
    # model; this excitation is rough enough to have both kinds.
    assert fluid["rejected"] > 0 and fluid["samples"] > 0.2 * len(rows)
    assert fluid["samples"] + fluid["rejected"] > 0.95 * len(rows)


def test_gap_restarts_filters_and_is_counted(sim1dof_run) -> None:
    profile, layout, rows = sim1dof_run
    ident = OnlineIdentifier(profile, layout.names)
    ident.update_rows(rows[:5000])
    before = ident.estimate().samples
    ident.gap()
    used = ident.update_rows(rows[6000:6050])  # shorter than the FIR history: nothing usable
    assert used == 0 and ident.estimate().gaps == 1
    ident.update_rows(rows[6050:8000])
    assert ident.estimate().samples > before


def test_batch_1dof_recovers_truth(sim1dof_run) -> None:
    profile, layout, rows = sim1dof_run
    cols = {n: rows[:, i] for i, n in enumerate(layout.names)}
    res = identify_run(cols, plant_params(profile), profile=profile)
    assert res.conditioning == [(20.0, 20), (40.0, 10)]
    err = np.abs(res.theta - res.truth) / np.abs(res.truth)
    assert err.max() < 0.015, dict(zip(res.names, err, strict=True))
    for fit in res.fits:
        assert fit.unidentifiable == [] and fit.condition < 1e3
        assert len(fit.singular_values) == len(fit.names)


def test_batch_reports_unidentifiable_direction(sim1dof_run) -> None:
    """Holding the arm still: the inertia column is ~0, SVD must say so."""
    profile, layout, rows = sim1dof_run
    cols = {n: rows[:, i] for i, n in enumerate(layout.names)}
    # Both angle sensors (the regressors take q from the potentiometer: estimator.angles).
    for name in ("eng.q_1", "eng.piston_1"):
        cols[name] = np.full_like(cols[name], cols[name].mean())
    res = identify_run(cols, plant_params(profile), profile=profile, rank_tol=1e-3)
    mech = res.fits[0]
    assert len(mech.unidentifiable) == 2, mech.unidentifiable
    assert any("M1" in w for w in mech.unidentifiable)
    assert any("Fv1" in w for w in mech.unidentifiable)


def test_missing_column_is_named(sim1dof_run) -> None:
    profile, layout, _rows = sim1dof_run
    names = [n for n in layout.names if n != "eng.spool_1"]
    with pytest.raises(ValueError, match=r"eng\.spool_1"):
        OnlineIdentifier(profile, names)
