"""The batch fit's σ and identifiability (estimator/wls.py) on synthetic data whose truth and
noise are known: the printed σ covers the truth (z-scores of RMS ≈ 1 over many runs, with two
output equations of different noise), each equation's σ is its noise, κ's batch means at their
threshold, a disagreement between equations widens σ, and the `still` / `rank_tol` flags."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from estimator.models import LinearModel
from estimator.wls import SPEED_BINS, correlation_factor, fit_model, row_sigma

TRUE = np.array([2.0, -1.0, 0.5])


def _model(m: int = 2, prior: np.ndarray | None = None, scale: float = 1.0) -> LinearModel:
    def regressor(x):  # pragma: no cover - fit_model takes Φ, y directly
        raise AssertionError

    return LinearModel(
        name="toy",
        names=("a", "b", "c"),
        n_outputs=m,
        regressor=regressor,
        param_scale=np.full(3, scale),
        output_scale=np.ones(m),
        prior=prior,
    )


def _data(seed: int, r: int = 600, noise=(0.05, 0.5), gain2: float = 1.0):
    """Two equations sharing every parameter; equation 2 ten times noisier (and optionally
    read through a sensor with a gain error)."""
    rng = np.random.default_rng(seed)
    Phi = rng.standard_normal((r, 2, 3))
    y = Phi @ TRUE + rng.standard_normal((r, 2)) * np.asarray(noise)
    y[:, 1] *= gain2
    return Phi, y


def test_sigma_covers_the_truth_and_weights_the_equations_by_their_noise() -> None:
    z = []
    for seed in range(60):
        Phi, y = _data(seed)
        fit = fit_model(_model(), Phi, y)
        assert fit.identifiable.all() and fit.method == "WLS"
        sig = fit.sigma_pct / 100 * np.abs(fit.theta)
        np.testing.assert_allclose(np.sqrt(np.diag(fit.cov)), sig, rtol=1e-12)
        z.append((fit.theta - TRUE) / sig)
        # Each equation's σ (from the OLS residuals, which carry the OLS error too).
        assert 0.45 < fit.equation_sigma[1] < 0.55 and 0.04 < fit.equation_sigma[0] < 0.08
    rms = np.sqrt(np.mean(np.square(z), axis=0))
    assert np.all((rms > 0.8) & (rms < 1.25)), rms
    # Weighting: the WLS σ is near the quiet equation's alone, far below the pooled OLS one.
    Phi, y = _data(0)
    fit = fit_model(_model(), Phi, y)
    assert np.all(fit.sigma_pct < 0.5 * fit.sigma_pct_ls)
    assert fit.rows == 2 * 600 and fit.correlation == 1.0 and fit.condition >= 1.0
    # A WLS fit is not iterated: it is settled after none (the IV refinement sets its own).
    assert fit.settled and fit.iterations == 0 and fit.theta_iv is None


def test_sigma_is_in_physical_units_whatever_the_scale() -> None:
    Phi, y = _data(1)
    one = fit_model(_model(), Phi, y)
    # Φ comes normalised (Φ·scale, for θ_n = θ/scale); θ and σ come back in physical units.
    big = fit_model(_model(scale=1e3), Phi * 1e3, y)
    np.testing.assert_allclose(big.theta, one.theta, rtol=1e-6)
    np.testing.assert_allclose(big.sigma_pct, one.sigma_pct, rtol=1e-6)
    np.testing.assert_allclose(big.theta_ls, one.theta_ls, rtol=1e-6)
    np.testing.assert_allclose(big.sigma_pct_ls, one.sigma_pct_ls, rtol=1e-6)
    np.testing.assert_allclose(big.cov, one.cov, rtol=1e-6)
    np.testing.assert_allclose(big.cov_plain, one.cov_plain, rtol=1e-6)
    # …and a prior is given in physical units too: a parameter fixed at it keeps its value.
    prior = np.array([1.9, -1.0, 0.5])
    fixed = fit_model(_model(prior=prior, scale=1e3), Phi * 1e3, y, still=("a",))
    assert fixed.theta[0] == pytest.approx(1.9, rel=1e-12)


def test_the_residual_and_equation_variances_are_the_documented_formulas() -> None:
    """σ² = |e|²/(rows − rank) of the OLS residuals (eq. 17); each equation's σ_j² =
    |e_j|²/(r − n/m) (eq. 20: the n parameters' degrees of freedom shared by the m equations);
    the condition number is s_max/s_min of the weighted observation matrix."""
    Phi, y = _data(9, r=40)
    fit = fit_model(_model(), Phi, y)
    W = Phi.transpose(1, 0, 2).reshape(80, 3)
    Y = y.T.reshape(80)
    theta, *_ = np.linalg.lstsq(W, Y, rcond=None)
    e = Y - W @ theta
    assert fit.residual_var == pytest.approx(e @ e / (80 - 3), rel=1e-9)
    e_j = e.reshape(2, 40)
    np.testing.assert_allclose(fit.equation_sigma, np.sqrt((e_j**2).sum(axis=1) / 38.5), rtol=1e-9)
    sv = fit.singular_values
    assert fit.condition == pytest.approx(sv[0] / sv[-1], rel=1e-12) and sv[-1] < sv[0]


def test_an_equation_fitted_exactly_is_weighted_not_divided_by_zero() -> None:
    """All outputs zero: every residual is exactly 0, so no equation has a noise to weight by;
    the fit is still made (weight 1) and gives θ = 0, not NaN."""
    Phi, _ = _data(10)
    fit = fit_model(_model(), Phi, np.zeros((600, 2)))
    assert np.all(fit.theta == 0.0) and np.all(fit.equation_sigma == 1.0)


def test_a_prior_of_zero_is_judged_against_the_normalised_unit() -> None:
    """A parameter whose prior is 0 has no size of its own: its 3σ is compared with 5 % of one
    normalised unit, so a well-measured one stays measured."""
    Phi, y = _data(11)
    fit = fit_model(_model(prior=np.array([2.0, 0.0, 0.5])), Phi, y)
    assert fit.identifiable.all()


def test_the_free_parameters_explain_what_the_fixed_ones_leave() -> None:
    """A parameter fixed at its (true) prior is taken out of the outputs before the others are
    fitted: they come out at the truth within their σ."""
    rng = np.random.default_rng(12)
    Phi = rng.standard_normal((600, 2, 3))
    Phi[:, :, 1] += 0.8 * Phi[:, :, 0]  # b's regressor follows a's: a's part must go first
    y = Phi @ TRUE + rng.standard_normal((600, 2)) * 0.05
    fit = fit_model(_model(prior=TRUE.copy()), Phi, y, still=("a",))
    sig = fit.sigma_pct[1:] / 100 * np.abs(fit.theta[1:])
    assert fit.theta[0] == 2.0
    assert np.all(np.abs(fit.theta[1:] - TRUE[1:]) < 4 * sig), (fit.theta, sig)


def test_a_gain_error_on_one_equation_is_revealed_and_widens_sigma() -> None:
    Phi, y = _data(2, r=2000, noise=(0.05, 0.05), gain2=1.1)
    fit = fit_model(_model(), Phi, y)
    assert np.all(fit.disagreement_z > 4.0)
    plain = np.sqrt(np.diag(fit.cov_plain))
    assert np.all(np.sqrt(np.diag(fit.cov)) > 2.0 * plain)
    # …and enough that the truth is within 3σ of the compromise.
    sig = fit.sigma_pct / 100 * np.abs(fit.theta)
    assert np.all(np.abs(fit.theta - TRUE) < 3 * sig)
    clean = fit_model(_model(), *_data(2, r=2000, noise=(0.05, 0.05)))
    assert np.all(clean.disagreement_z < 4.0)
    np.testing.assert_array_equal(clean.cov, clean.cov_plain)


def test_too_few_equations_are_refused_naming_the_model() -> None:
    Phi, y = _data(3, r=1)
    with pytest.raises(ValueError, match="model 'toy': 2 equations for 3 parameters"):
        fit_model(_model(), Phi, y)
    # As many equations as parameters: an exact solve, no residual to say σ: refused too.
    Phi3, y3 = _data(3, r=3)
    with pytest.raises(ValueError, match="model 'toy': 3 equations for 3 parameters"):
        fit_model(_model(m=1), Phi3[:, :1], y3[:, :1])


def test_instruments_equal_to_the_regressors_give_the_wls_fit() -> None:
    """IV with Z = Φ is least squares: the same θ, σ, weights and equation check as WLS (every
    step on the instruments' rows, weighted like the regressors)."""
    Phi, y = _data(13, noise=(0.05, 0.05), gain2=1.05)
    wls = fit_model(_model(), Phi, y)
    iv = fit_model(_model(), Phi, y, instruments=Phi.copy())
    assert iv.method == "IV" and wls.method == "WLS" and wls.truth is None
    np.testing.assert_allclose(iv.theta, wls.theta, rtol=1e-9)
    np.testing.assert_allclose(iv.sigma_pct, wls.sigma_pct, rtol=1e-6)
    np.testing.assert_allclose(iv.equation_sigma, wls.equation_sigma, rtol=1e-9)
    np.testing.assert_allclose(iv.disagreement_z, wls.disagreement_z, rtol=1e-6)
    assert np.all(wls.disagreement_z > 4.0)


def test_correlation_factor_needs_eight_blocks_and_never_goes_below_one() -> None:
    e = np.full((80, 1), 3.0)  # constant: κ = B
    assert correlation_factor(e, 10) == pytest.approx(10.0)
    assert correlation_factor(e[:79], 10) == 1.0  # seven blocks
    assert correlation_factor(e, 0) == 1.0
    assert correlation_factor(np.zeros((80, 1)), 10) == 1.0
    alt = np.tile([[1.0], [-1.0]], (40, 1))  # block means 0: anti-correlated, not credited
    assert correlation_factor(alt, 10) == 1.0
    rng = np.random.default_rng(0)
    white = rng.standard_normal((200_000, 2))
    assert correlation_factor(white, 100) == pytest.approx(1.0, abs=0.1)


def test_kappa_inflates_the_covariance() -> None:
    """Residuals correlated over ~50 samples: with batch means of 200 the σ grows by √κ."""
    rng = np.random.default_rng(4)
    r = 20_000
    Phi = np.repeat(rng.standard_normal((r // 50, 1, 3)), 50, axis=0)  # slow regressors
    Phi += 0.3 * rng.standard_normal(Phi.shape)
    noise = np.repeat(rng.standard_normal(r // 50), 50) * 0.1  # slow noise
    y = Phi[:, 0, :] @ TRUE + noise
    white = fit_model(_model(m=1), Phi, y[:, None])
    kappa = fit_model(_model(m=1), Phi, y[:, None], block=200)
    assert kappa.correlation > 5.0
    np.testing.assert_allclose(kappa.cov, kappa.correlation * white.cov, rtol=1e-9)
    # κ is the batch-means factor of the WLS fit's own residuals (not of the outputs).
    e = y - Phi[:, 0, :] @ kappa.theta
    assert kappa.correlation == pytest.approx(correlation_factor(e[:, None], 200), rel=1e-9)


def test_still_and_rank_tol_flag_parameters_and_fix_them_at_the_prior() -> None:
    Phi, y = _data(5)
    prior = np.array([1.5, -1.0, 0.5])
    fit = fit_model(_model(prior=prior), Phi, y, still=("a",))
    assert list(fit.identifiable) == [False, True, True]
    assert fit.theta[0] == 1.5 and np.isnan(fit.sigma_pct[0])
    assert np.all(np.isfinite(fit.sigma_pct[1:]))
    # rank_tol above every singular value ratio: the weakest direction is flagged too.
    ratio = fit.singular_values[-1] / fit.singular_values[0]
    tight = fit_model(_model(prior=prior), Phi, y, rank_tol=1.01 * ratio)
    loose = fit_model(_model(prior=prior), Phi, y, rank_tol=0.99 * ratio)
    assert not tight.identifiable.all() and len(tight.unidentifiable) == 1
    assert loose.identifiable.all() and loose.unidentifiable == []


def test_correlated_residuals_leave_a_direction_unresolved_that_white_ones_would_resolve() -> None:
    """The identifiability test's 3σ carries √κ (σ = √κ after weighting): slow noise with κ ≈ 50
    flags the weakest parameter that the white-residual formula would call measured."""
    rng = np.random.default_rng(4)
    r = 20_000
    Phi = np.repeat(rng.standard_normal((r // 50, 1, 3)), 50, axis=0)  # slow regressors
    Phi += 0.3 * rng.standard_normal(Phi.shape)
    y = Phi[:, 0, :] @ TRUE + np.repeat(rng.standard_normal(r // 50), 50) * 0.5
    white = fit_model(_model(m=1), Phi, y[:, None])
    kappa = fit_model(_model(m=1), Phi, y[:, None], block=200)
    assert kappa.correlation > 25.0
    assert white.identifiable.all()
    assert list(kappa.identifiable) == [True, True, False] and kappa.unidentifiable


def test_equations_are_compared_on_the_instruments_of_their_own_rows() -> None:
    """With instruments equal to the regressors IV is LS: each equation's estimate (and so the
    disagreement) must be the same as without instruments."""
    from estimator.wls import equation_disagreement

    Phi, y = _data(6, noise=(0.05, 0.05), gain2=1.05)
    W = Phi.transpose(1, 0, 2).reshape(-1, 3)
    Y = y.T.reshape(-1)
    free = np.ones(3, dtype=bool)
    plain = equation_disagreement(W, Y, 2, free)
    iv = equation_disagreement(W, Y, 2, free, W.copy())
    assert np.all(plain[1] > 4.0)  # the gain error shows
    np.testing.assert_allclose(iv[0], plain[0], rtol=1e-9)
    np.testing.assert_allclose(iv[1], plain[1], rtol=1e-9)


def test_a_parameter_numerically_absent_from_an_equation_is_not_compared_there() -> None:
    """A column at 1e-10 of the equation's largest is rounding dust, not a second estimate of
    its parameter: the disagreement check leaves it out (in < 2 equations: 0)."""
    from estimator.wls import equation_disagreement

    Phi, y = _data(7)
    Phi[:, 1, 2] *= 1e-10  # c all but absent from equation 2
    y[:, 1] = Phi[:, 1, :] @ TRUE + 0.5 * np.random.default_rng(8).standard_normal(600)
    W = Phi.transpose(1, 0, 2).reshape(-1, 3)
    Y = y.T.reshape(-1)
    spread, z = equation_disagreement(W, Y, 2, np.ones(3, dtype=bool))
    assert spread[2] == 0.0 and z[2] == 0.0
    assert spread[0] > 0.0 and spread[1] > 0.0


def test_an_equation_with_no_spare_row_or_no_parameter_is_not_compared() -> None:
    """Equation disagreement needs two over-determined single-equation estimates: an equation
    with as many rows as parameters (an exact solve, no σ) says nothing, an equation without
    any of the parameters is passed over, and so is a parameter in one equation only."""
    Phi, y = _data(14, r=3, noise=(1e-3, 1e-3))
    fit = fit_model(_model(), Phi, y)
    assert fit.identifiable.all() and np.all(fit.disagreement_z == 0.0)
    rng = np.random.default_rng(15)
    r = 2000
    Phi = rng.standard_normal((r, 3, 3))
    Phi[:, 0, :] = 0.0  # equation 1 carries no parameter
    Phi[:, 2, 0] = 0.0  # a is in equation 2 only
    y = Phi @ TRUE + 0.05 * rng.standard_normal((r, 3))
    y[:, 2] *= 1.1  # equation 3 read through a gain error
    fit = fit_model(LinearModel(name="toy", names=("a", "b", "c"), n_outputs=3,
                                regressor=None, param_scale=np.ones(3),
                                output_scale=np.ones(3)), Phi, y)  # fmt: skip
    assert fit.disagreement_z[0] == 0.0 and np.all(fit.disagreement_z[1:] > 4.0)


def test_disagreement_widens_each_variance_by_the_half_spread_it_carries() -> None:
    """σ² grows by Σ_c (Cov_jc / Var_c · spread_c / 2)² over the revealed parameters c."""
    from estimator.wls import equation_disagreement

    Phi, y = _data(2, r=2000, noise=(0.05, 0.05), gain2=1.1)
    fit = fit_model(_model(), Phi, y)
    w = np.repeat(1.0 / fit.equation_sigma, 2000)
    Ww = Phi.transpose(1, 0, 2).reshape(-1, 3) * w[:, None]
    Yw = y.T.reshape(-1) * w
    spread, z = equation_disagreement(Ww, Yw, 2, np.ones(3, dtype=bool))
    np.testing.assert_allclose(z, fit.disagreement_z, rtol=1e-9)
    plain = fit.cov_plain
    var = np.diag(plain)
    extra = sum((plain[:, c] / var[c] * 0.5 * spread[c]) ** 2 for c in np.flatnonzero(z > 4.0))
    np.testing.assert_allclose(np.diag(fit.cov), var + extra, rtol=1e-9)


def test_a_parameter_fixed_at_its_own_estimate_passes_its_scatter_to_the_others() -> None:
    """No prior: a flagged parameter is fixed at its own least-squares value, which is not
    known, only unresolved. b's regressor nearly repeats a's and the slow noise moves along
    their difference: the jackknife of the whole fit sees b scatter with a, the one with a held
    fixed does not — b's σ² must be the whole fit's."""
    from estimator.wls import jackknife_variance

    rng = np.random.default_rng(3)
    r = 8000
    Phi = rng.standard_normal((r, 1, 3))
    Phi[:, 0, 1] = Phi[:, 0, 0] + 0.1 * Phi[:, 0, 1]
    slow = np.repeat(rng.standard_normal(r // 100), 100)
    y = Phi[:, 0, :] @ TRUE + 0.05 * slow * (Phi[:, 0, 0] - Phi[:, 0, 1])
    y += 1e-3 * rng.standard_normal(r)
    groups = (np.arange(r) * 16) // r
    fit = fit_model(_model(m=1), Phi, y[:, None], still=("a",), groups=groups)
    assert list(fit.identifiable) == [False, True, True]
    whole = jackknife_variance(Phi[:, 0, :], y, groups)
    held = jackknife_variance(Phi[:, 0, 1:], y - Phi[:, 0, 0] * fit.theta[0], groups)
    assert whole is not None and held is not None
    assert fit.cov[1, 1] >= whole[1] * (1 - 1e-9) and fit.cov[1, 1] > 100 * held[0]
    # With a prior, a is known there: its scatter is not b's (the conditional σ stands).
    known = fit_model(_model(m=1, prior=TRUE.copy()), Phi, y[:, None], still=("a",),
                      groups=groups)  # fmt: skip
    assert known.cov[1, 1] < whole[1] / 100


def test_without_a_prior_the_free_parameters_keep_their_whole_fit_sigma() -> None:
    """No prior: fixing a at its own estimate must not shrink (nor grow) the others' σ — they
    keep the marginal σ of the whole fit (the conditional one is never larger in least
    squares)."""
    Phi, y = _data(16)
    whole = fit_model(_model(), Phi, y)
    held = fit_model(_model(), Phi, y, still=("a",))
    assert whole.identifiable.all() and list(held.identifiable) == [False, True, True]
    np.testing.assert_allclose(np.diag(held.cov)[1:], np.diag(whole.cov)[1:], rtol=1e-9)


def test_with_instruments_a_free_parameter_keeps_the_larger_of_its_two_sigmas() -> None:
    """No prior, IV: a fixed at its own estimate. Unlike least squares, the IV covariance of
    b and c with a held can exceed the whole fit's (here b's by about 37×): each free
    parameter's σ² is then the conditional one — the larger — never the marginal one, and
    never less than either."""
    rng = np.random.default_rng(168)
    r = 400
    Phi = rng.standard_normal((r, 1, 3))
    Z = Phi + rng.standard_normal((r, 1, 3)) * rng.uniform(0, 3, 3)
    Z[:, 0, 1] += rng.uniform(-2, 2) * Z[:, 0, 0]
    y = Phi[:, 0, :] @ TRUE + 0.1 * rng.standard_normal(r)
    whole = fit_model(_model(m=1), Phi, y[:, None], instruments=Z)
    held = fit_model(_model(m=1), Phi, y[:, None], still=("a",), instruments=Z)
    assert whole.identifiable.all() and list(held.identifiable) == [False, True, True]
    ratio = np.diag(held.cov)[1:] / np.diag(whole.cov)[1:]
    assert np.all(ratio >= 1.0 - 1e-9), ratio
    assert ratio[0] > 10.0, ratio  # the conditional σ, not the marginal one, for b


def test_a_direction_below_the_numerical_floor_is_flagged_whatever_the_prior_size() -> None:
    """a and b's regressors equal to 1e-13: their difference is below the SVD's resolution
    (1e-12 of the largest singular value). Priors of 1e14 would let the 3σ test call the
    direction resolved (3/s ≈ 2e12 < 5 % of 1e14); the relative floor flags it all the same,
    and does so whatever the weighted data's scale (noise 1 or 1e-4: s_max ≈ 30 or 3e5)."""
    rng = np.random.default_rng(7)
    r = 400
    Phi = rng.standard_normal((r, 1, 3))
    Phi[:, 0, 1] = Phi[:, 0, 0] * (1.0 + 1e-13 * rng.standard_normal(r))
    prior = np.full(3, 1e14)
    for noise in (1.0, 1e-4):
        y = Phi[:, 0, :] @ TRUE + noise * rng.standard_normal(r)
        fit = fit_model(_model(m=1, prior=prior), Phi, y[:, None])
        assert fit.singular_values[-1] < 1e-12 * fit.singular_values[0]
        assert list(fit.identifiable) == [False, False, True], (noise, fit.singular_values)


def test_a_whole_runs_rows_are_fitted_without_a_rows_by_rows_matrix() -> None:
    """A 120 s run at 1 kHz with two output equations stacks 240 000 rows: the identifiability
    test's SVD must keep to the thin factors (rows × parameters), never the rows × rows one
    (460 GB here, which no rig PC holds)."""
    Phi, y = _data(3, r=120_000)
    fit = fit_model(_model(), Phi, y)
    assert fit.identifiable.all()
    np.testing.assert_allclose(fit.theta, TRUE, atol=6 * float(np.sqrt(np.diag(fit.cov)).max()))


def _speed_data(seed: int, r: int = 800):
    """Two equations whose noise depends on the row's |Φ_a| (its "speed"): 0.5 below 0.5,
    0.02 above — the friction family's slow rows (estimator.wls.row_sigma)."""
    rng = np.random.default_rng(seed)
    Phi = rng.standard_normal((r, 2, 3))
    sd = np.where(np.abs(Phi[:, :, 0]) < 0.5, 0.5, 0.02)
    return Phi, Phi @ TRUE + rng.standard_normal((r, 2)) * sd


def test_rows_are_weighted_by_the_sigma_of_their_speed_octile() -> None:
    sped = replace(_model(), speed_params=(("a",), ("a",)))
    Phi, y = _speed_data(0)
    r = Phi.shape[0]
    res = (y - Phi @ TRUE).T.reshape(-1)
    sig = row_sigma(sped, Phi, res).reshape(2, r).T
    # Octiles wholly inside one noise level read that level; the one across the step between.
    for j in range(2):
        speed = np.abs(Phi[:, j, 0])
        assert np.all(np.abs(sig[speed < 0.3, j] / 0.5 - 1) < 0.25), j
        assert np.all(np.abs(sig[speed > 0.8, j] / 0.02 - 1) < 0.25), j
        assert len(np.unique(sig[:, j])) == SPEED_BINS
    # Without speed_params: one σ per equation, every row of it.
    flat = row_sigma(_model(), Phi, res).reshape(2, r).T
    assert np.all(flat == flat[0]) and np.all(flat[0] > 0.2)
    # The fit: σ far below the one-σ-per-equation fit's, and still the truth's scatter.
    z = []
    for seed in range(60):
        Phi, y = _speed_data(seed)
        fit = fit_model(sped, Phi, y)
        one = fit_model(_model(), Phi, y)
        assert np.all(fit.sigma_pct < 0.3 * one.sigma_pct), (fit.sigma_pct, one.sigma_pct)
        # The octiles' σ span the two noise levels (0.5 / 0.02); one σ per equation spans none.
        assert np.all(fit.row_sigma_spread > 10) and np.all(one.row_sigma_spread == 1.0)
        z.append((fit.theta - TRUE) / (fit.sigma_pct / 100 * np.abs(fit.theta)))
    rms = np.sqrt(np.mean(np.square(z), axis=0))
    assert np.all((rms > 0.75) & (rms < 1.3)), rms


def test_a_speed_octile_fitted_exactly_is_weighted_not_divided_by_zero() -> None:
    sped = replace(_model(), speed_params=(("a",), ("b",)))
    Phi, _ = _speed_data(3)
    y = Phi @ TRUE
    y[:, 1] += np.where(np.abs(Phi[:, 1, 1]) > 1.0, 0.1, 0.0) * np.sign(Phi[:, 1, 2])
    fit = fit_model(sped, Phi, y)
    assert np.all(np.isfinite(fit.theta)) and np.all(np.isfinite(fit.cov))
    # Equation 1 and the slow octiles of equation 2 are exact: weight 1, not 1/0.
    res = (y - Phi @ TRUE).T.reshape(-1)
    sig = row_sigma(sped, Phi, res).reshape(2, -1).T
    assert np.all(sig[:, 0] == 1.0) and np.all(sig[np.abs(Phi[:, 1, 1]) < 0.5, 1] == 1.0)
    assert np.all(sig[np.abs(Phi[:, 1, 1]) > 1.6, 1] < 1.0)
    # Fewer rows than octiles: one row per bin, each its own |residual|.
    few = row_sigma(sped, Phi[:4], np.arange(1.0, 9.0))
    np.testing.assert_array_equal(few, np.arange(1.0, 9.0))
