from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from daq.profile.loader import ProfileError, parse_profile
from daq.profile.plant import plant_params
from estimator.online import OnlineIdentifier
from estimator.paramfile import read_param_file, write_param_file
from estimator.service import prior_from_file, write_estimate

ROOT = Path(__file__).resolve().parents[2]


def _profile_dict() -> dict:
    return tomllib.loads((ROOT / "hw_profiles" / "sim-1dof.toml").read_text())


def test_estimator_section_is_optional_and_checked() -> None:
    data = _profile_dict()
    data.pop("estimator", None)  # the shipped 1-DOF profile names the example model
    assert parse_profile(data).estimator is None
    data["estimator"] = {"model": "estimator.examples.one_joint:models", "forgetting": 0.999}
    prof = parse_profile(data)
    assert prof.estimator is not None and prof.estimator.forgetting == 0.999
    data["estimator"] = {"model": "not a module spec"}
    with pytest.raises(ProfileError, match=r"estimator\.model"):
        parse_profile(data)
    data["estimator"] = {"forgeting": 0.9}
    with pytest.raises(ProfileError, match="unknown key"):
        parse_profile(data)


def test_profile_model_key_selects_the_user_model(sim1dof_run) -> None:
    _, layout, _ = sim1dof_run
    data = _profile_dict()
    data["estimator"] = {"model": "estimator.examples.one_joint:models"}
    ident = OnlineIdentifier(parse_profile(data), layout.names)
    assert ident.estimate().names == ["M", "Fv", "W", "1/b", "Cf++", "Cf+-", "Cf-+", "Cf--"]


def test_param_file_round_trip_and_resume(sim1dof_run, tmp_path) -> None:
    profile, layout, rows = sim1dof_run
    ident = OnlineIdentifier(profile, layout.names)
    ident.update_rows(rows[:8000])
    path = tmp_path / "p.toml"
    write_estimate(path, profile.rig.id, ident)
    data = read_param_file(path)
    est = ident.estimate()
    got = data["models"]["mechanical"]["theta"] + data["models"]["fluid"]["theta"]
    np.testing.assert_allclose(got, est.theta, rtol=1e-15)
    np.testing.assert_allclose(data["plant"]["inertia"], est.theta[:1], rtol=1e-15)
    assert data["plant"]["bulk_modulus"] == pytest.approx(1.0 / est.theta[3], rel=1e-12)
    prior = prior_from_file(path)
    resumed = OnlineIdentifier(profile, layout.names, prior=prior)
    np.testing.assert_allclose(resumed.estimate().theta, est.theta, rtol=1e-12)
    # A resumed estimator is not stuck on the prior: the prior weighs ~1 % of the 8000
    # samples it came from (RESUME_INFLATION = 100), the 12000 fresh ones dominate, so the
    # resumed estimate lands next to a diffuse estimator's on the fresh data alone.
    resumed.update_rows(rows[8000:])
    fresh = OnlineIdentifier(profile, layout.names)
    fresh.update_rows(rows[8000:])
    moved = np.abs(resumed.estimate().theta - fresh.estimate().theta)
    apart = np.abs(est.theta - fresh.estimate().theta)
    assert np.all(moved <= 0.1 * apart), dict(zip(est.names, moved / apart, strict=True))


def test_bad_param_file_is_reported(tmp_path) -> None:
    p = tmp_path / "x.toml"
    p.write_text('format = "something-else"\n')
    with pytest.raises(ValueError, match="format"):
        read_param_file(p)
    write_param_file(
        p,
        "r",
        0,
        {
            "m": {
                "names": ["a"],
                "theta": [1.0],
                "sigma_pct": [1.0],
                "cov_diag": [0.1],
                "residual_var": 2.0,
            }
        },
        plant_params(parse_profile(_profile_dict())),
    )
    assert read_param_file(p)["models"]["m"]["theta"] == [1.0]
