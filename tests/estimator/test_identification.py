"""The chain on simulated data: only telemetry-like rows go in, compared with the plant's truth."""

from __future__ import annotations

import numpy as np
import pytest

from daq.profile.plant import plant_params
from estimator.batch import identify_run
from estimator.models import load_models
from estimator.online import OnlineIdentifier
from rigctl.identify_table import widened_sigma_pct

USER = "estimator.examples.one_joint:models"


#: 1/b carries a bias of about −0.2 % on this data in both estimators, whatever the filters
#: (docs/estimator.md: 1 kHz pressure derivatives while the spool moves within each sample);
#: no σ of either estimator covers it (≈ 3σ batch after widening). Open: checked apart.
ONE_OVER_B_BIAS = 0.003
#: Every other parameter: measured errors ≤ 0.06 % online, ≤ 0.03 % batch (σ 0.002–0.06 %).
OTHER_ERROR = 0.001


def _online(profile, layout, rows, spec: str = "reference"):
    ident = OnlineIdentifier(
        profile, layout.to_dict(), models=load_models(spec, plant_params(profile))
    )
    for k in range(0, len(rows), 20):
        ident.update_rows(rows[k : k + 20])
    return ident.estimate()


def _batch(profile, layout, rows):
    cols = {n: rows[:, i] for i, n in enumerate(layout.names)}
    return identify_run(cols, plant_params(profile), profile=profile)


@pytest.mark.parametrize("spec", ["reference", USER])
def test_online_1dof_recovers_truth(sim1dof_run, spec: str) -> None:
    profile, layout, rows = sim1dof_run
    est = _online(profile, layout, rows, spec)
    assert len(est.names) == 8  # 3 mechanical + 5 fluid
    err = np.abs(est.theta - est.truth) / np.abs(est.truth)
    other = [i for i, n in enumerate(est.names) if n != "1/b"]
    assert err[other].max() < OTHER_ERROR, dict(zip(est.names, err, strict=True))
    assert err[est.names.index("1/b")] < ONE_OVER_B_BIAS
    assert np.all(np.isfinite(est.sigma_pct)) and np.all(est.sigma_pct < 0.1)
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
    res = _batch(profile, layout, rows)
    assert res.conditioning == [(20.0, 20), (40.0, 10)]
    err = np.abs(res.theta - res.truth) / np.abs(res.truth)
    other = [i for i, n in enumerate(res.names) if n != "1/b"]
    assert err[other].max() < OTHER_ERROR, dict(zip(res.names, err, strict=True))
    assert err[res.names.index("1/b")] < ONE_OVER_B_BIAS
    assert res.identifiable.all() and res.warnings == []
    for fit in res.fits:
        assert fit.unidentifiable == [] and fit.condition < 1e3
        assert len(fit.singular_values) == len(fit.names)


def test_1dof_truth_within_three_sigma(sim1dof_run) -> None:
    """Issue 19: the truth lay 18–23σ from M online. With the σ the table prints (each
    estimator's, widened by the online–batch disagreement) every parameter but 1/b (see
    ONE_OVER_B_BIAS) is within ±3σ, online and batch."""
    profile, layout, rows = sim1dof_run
    est = _online(profile, layout, rows)
    res = _batch(profile, layout, rows)
    assert est.names == res.names
    s_on, s_b = widened_sigma_pct(est.theta, est.sigma_pct, res.theta, res.sigma_pct)
    for theta, sig in ((est.theta, s_on), (res.theta, s_b)):
        z = np.abs(theta - res.truth) / (sig / 100 * np.abs(theta))
        other = [i for i, n in enumerate(res.names) if n != "1/b"]
        assert z[other].max() <= 3.0, dict(zip(res.names, z, strict=True))


def test_missing_column_is_named(sim1dof_run) -> None:
    profile, layout, _rows = sim1dof_run
    names = [n for n in layout.names if n != "eng.spool_1"]
    with pytest.raises(ValueError, match=r"eng\.spool_1"):
        OnlineIdentifier(profile, names)
