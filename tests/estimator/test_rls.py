from __future__ import annotations

import numpy as np
import padasip as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimator.rls import Rls, RlsConfig, sigma_pct


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 16),
    m=st.integers(1, 4),
    noise=st.floats(1e-3, 1.0),
)
def test_rls_equals_batch_least_squares(seed: int, n: int, m: int, noise: float) -> None:
    rng = np.random.default_rng(seed)
    N = 3 * n + 20
    scales = 10.0 ** rng.uniform(-2, 2, size=n)  # unequal column scales
    Phi = rng.normal(size=(N, m, n)) * scales
    theta = rng.normal(size=n) / scales
    y = Phi @ theta + noise * rng.normal(size=(N, m))
    r = Rls(n, m, RlsConfig(forgetting=1.0, p0=1e14))
    r.update(Phi, y)
    A, b = Phi.reshape(-1, n), y.reshape(-1)
    ls, *_ = np.linalg.lstsq(A, b, rcond=None)
    np.testing.assert_allclose(r.theta, ls, rtol=1e-6, atol=1e-6 * np.abs(ls).max())
    res = b - A @ ls
    s2 = res @ res / (A.shape[0] - n)
    # σ² and Cov (Gautier eq. 17-18) carry the diffuse prior's rounding: looser than θ.
    assert r.residual_variance() == pytest.approx(s2, rel=1e-3)
    C = s2 * np.linalg.inv(A.T @ A)
    np.testing.assert_allclose(r.covariance(), C, rtol=1e-3, atol=1e-6 * abs(C).max())


def test_covariance_stays_spd_and_bounded_after_1e6_poorly_exciting_updates() -> None:
    rng = np.random.default_rng(3)
    n, N = 16, 1_000_000
    r = Rls(n, 1, RlsConfig(forgetting=0.995, p0=100.0, trace_max=1e4))
    theta = np.linspace(1.0, 2.0, n)
    # Excitation in only two directions, plus tiny noise: the other 14 are unexcited.
    base = rng.normal(size=(2, n))
    for _ in range(10):
        c = rng.normal(size=(N // 10, 2))
        Phi = (c @ base + 1e-9 * rng.normal(size=(N // 10, n)))[:, None, :]
        r.update(Phi, Phi[:, 0, :] @ theta[:, None] + 1e-3 * rng.normal(size=(N // 10, 1)))
    P = r.P
    assert r.samples == N
    assert np.all(np.isfinite(P)) and np.all(np.isfinite(r.theta))
    np.testing.assert_array_equal(P, P.T)
    assert np.linalg.eigvalsh(P).min() > 0.0
    # Unbounded, the 14 unexcited directions would have grown by 0.995^-1e6 (overflow).
    assert 0.9e4 < np.trace(P) <= 1e4 * (1 + 1e-9)
    assert np.all(r.d > 0)
    # The excited directions are still estimated.
    np.testing.assert_allclose(base @ r.theta, base @ theta, rtol=1e-3)


def test_matches_padasip_filter_rls() -> None:
    rng = np.random.default_rng(1)
    n, N = 16, 3000
    x = rng.normal(size=(N, n))
    d = x @ rng.normal(size=n) + 0.01 * rng.normal(size=N)
    f = pa.filters.FilterRLS(n, mu=0.99, eps=0.01, w="zeros")
    f.run(d, x)
    r = Rls(n, 1, RlsConfig(forgetting=0.99, p0=100.0, trace_max=1e300))
    r.update(x[:, None, :], d[:, None])
    np.testing.assert_allclose(r.theta, f.w, rtol=1e-8, atol=1e-10)


def test_freeze_reset_and_nonfinite_samples() -> None:
    r = Rls(2, 1)
    Phi = np.array([[[1.0, 0.0]], [[0.0, 1.0]], [[1.0, 1.0]]])
    y = np.array([[1.0], [2.0], [3.0]])
    r.update(Phi, y)
    th = r.theta.copy()
    r.frozen = True
    r.update(Phi, 10 * y)
    np.testing.assert_array_equal(r.theta, th)
    r.frozen = False
    r.update(np.array([[[np.nan, 1.0]]]), np.array([[1.0]]))
    assert r.skipped == 1 and r.samples == 3
    np.testing.assert_array_equal(r.theta, th)
    r.reset(theta0=np.array([5.0, 6.0]))
    np.testing.assert_array_equal(r.theta, [5.0, 6.0])
    assert r.samples == 0


def test_shape_and_config_errors_are_clear() -> None:
    r = Rls(3, 2)
    with pytest.raises(ValueError, match=r"expected Phi \(N, 2, 3\)"):
        r.update(np.zeros((4, 2, 2)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"forgetting"):
        RlsConfig(forgetting=1.5)
    with pytest.raises(ValueError, match=r"theta0 must have 3"):
        r.reset(theta0=np.zeros(2))


def test_sigma_pct_is_gautier_eq19() -> None:
    cov = np.diag([0.04, 1.0])
    np.testing.assert_allclose(sigma_pct(np.array([2.0, -10.0]), cov), [10.0, 10.0])
    assert sigma_pct(np.array([0.0]), np.eye(1))[0] == np.inf
    # θ = 0 with a σ of 0 too (a parameter held exactly): still inf, not 0/0
    assert sigma_pct(np.array([0.0, 1.0]), np.zeros((2, 2))).tolist() == [np.inf, 0.0]


def test_forgetting_in_time_equals_the_same_number_of_steps() -> None:
    """`forget(k)` (rows the chain did not pass: rejected, warm-up) ages P and the residual
    statistics exactly like k forgetting steps: a stream with 90 % rejected rows keeps the
    memory λ states in rig time (issue 14, item 3)."""
    rng = np.random.default_rng(7)
    Phi = rng.normal(size=(200, 1, 2))
    y = Phi @ np.array([1.0, -2.0]) + 0.01 * rng.normal(size=(200, 1))
    cfg = RlsConfig(forgetting=0.99, p0=100.0, trace_max=1e300)
    timed, dense = Rls(2, 1, cfg), Rls(2, 1, cfg)
    for k in range(200):
        timed.update(Phi[k], y[k])
        timed.forget(9)
        dense.update(Phi[k], y[k])
        dense.update(np.zeros((9, 1, 2)), np.zeros((9, 1)))  # 9 uninformative steps
    np.testing.assert_allclose(timed.P, dense.P, rtol=1e-9)
    np.testing.assert_allclose(timed.theta, dense.theta, rtol=1e-9)
    untimed = Rls(2, 1, cfg)
    untimed.update(Phi, y)
    # Without forgetting in time the memory is 10× longer: P ten times smaller or so.
    assert np.trace(timed.P) > 5.0 * np.trace(untimed.P)


@pytest.mark.parametrize(
    ("kw", "what"),
    [
        ({"forgetting": 0.0}, "forgetting"),
        ({"forgetting": 1.0 + 1e-12}, "forgetting"),
        ({"p0": 0.0}, "p0"),
        ({"trace_max": 0.0}, "trace_max"),
    ],
)
def test_config_bounds_are_open_where_documented(kw: dict[str, float], what: str) -> None:
    with pytest.raises(ValueError, match=what):
        RlsConfig(**kw)
    RlsConfig(forgetting=1.0, p0=1e-300, trace_max=1e-300)  # the closed and tiny ends pass


def test_a_prior_variance_of_zero_is_refused() -> None:
    r = Rls(2, 1)
    with pytest.raises(ValueError, match="p0_diag must be positive"):
        r.reset(p0_diag=np.array([1.0, 0.0]))
    r.reset(p0_diag=np.array([1.0, 1e-300]))
    np.testing.assert_array_equal(np.diag(r.P), [1.0, 1e-300])


def test_information_eigenvalues_are_those_of_the_inverse_covariance() -> None:
    rng = np.random.default_rng(2)
    r = Rls(3, 1, RlsConfig(p0=10.0))
    r.update(rng.normal(size=(50, 1, 3)) * [1.0, 3.0, 0.1], rng.normal(size=(50, 1)))
    want = np.linalg.eigvalsh(np.linalg.inv(r.P))
    np.testing.assert_allclose(r.information_eigenvalues(), want, rtol=1e-8)
    assert np.all(np.diff(r.information_eigenvalues()) >= 0.0)


def test_a_non_finite_sample_is_skipped_and_the_rest_of_the_batch_used() -> None:
    rng = np.random.default_rng(4)
    Phi = rng.normal(size=(40, 1, 2))
    y = Phi @ np.array([1.5, -0.5]) + 0.01 * rng.normal(size=(40, 1))
    Phi[3, 0, 1] = np.nan
    r = Rls(2, 1, RlsConfig(p0=1e8))
    r.update(Phi, y)
    assert r.samples == 39 and r.skipped == 1
    keep = np.arange(40) != 3
    want = np.linalg.lstsq(Phi[keep, 0], y[keep, 0], rcond=None)[0]
    np.testing.assert_allclose(r.theta, want, rtol=1e-5)
    # a non-finite measurement (not regressor) is skipped the same way
    y[7, 0] = np.inf
    r2 = Rls(2, 1, RlsConfig(p0=1e8))
    r2.update(Phi, y)
    assert r2.samples == 38 and r2.skipped == 2
    keep[7] = False
    want = np.linalg.lstsq(Phi[keep, 0], y[keep, 0], rcond=None)[0]
    np.testing.assert_allclose(r2.theta, want, rtol=1e-5)


def test_forget_leaves_a_frozen_estimate_and_a_count_below_one_untouched() -> None:
    """Nothing ages a frozen estimate (it reports the σ it had), and `forget` of no rows or a
    negative count (no rig time passed) changes nothing: P and the residual statistics."""
    rng = np.random.default_rng(5)
    Phi = rng.normal(size=(30, 1, 2))
    y = Phi @ np.array([1.0, 2.0]) + 0.1 * rng.normal(size=(30, 1))
    r = Rls(2, 1, RlsConfig(forgetting=0.99))
    r.update(Phi, y)
    P, stats = r.P.copy(), r.stats.copy()
    for k in (0, -3):
        r.forget(k)
        np.testing.assert_array_equal(r.P, P)
        np.testing.assert_array_equal(r.stats, stats)
    r.frozen = True
    r.forget(50)
    np.testing.assert_array_equal(r.P, P)
    np.testing.assert_array_equal(r.stats, stats)
    r.frozen = False
    r.forget(50)  # and the same call unfrozen does age it
    assert np.trace(r.P) > np.trace(P) and r.stats[1] < stats[1]


def test_diffuse_takes_a_zero_walk_on_some_parameters() -> None:
    """q = 0 for the parameters without a random walk (the chain's usual case) is accepted and
    leaves their variance; a negative q is refused."""
    r = Rls(2, 1, RlsConfig(p0=1.0))
    P = r.P.copy()
    r.diffuse(np.array([0.0, 0.5]))
    np.testing.assert_allclose(r.P, P + np.diag([0.0, 0.5]), atol=1e-15)
    r.diffuse(np.zeros(2))
    np.testing.assert_allclose(r.P, P + np.diag([0.0, 0.5]), atol=1e-15)
    with pytest.raises(ValueError, match="≥ 0"):
        r.diffuse(np.array([-1e-9, 0.0]))


def test_per_output_residual_variance_follows_each_outputs_noise() -> None:
    rng = np.random.default_rng(6)
    N, n = 4000, 3
    Phi = rng.normal(size=(N, 2, n))
    y = Phi @ np.array([1.0, 2.0, -1.0]) + rng.normal(size=(N, 2)) * [0.1, 0.3]
    r = Rls(n, 2, RlsConfig(p0=1e8))
    r.update(Phi, y)
    var = r.output_residual_variance()
    np.testing.assert_allclose(var, [0.01, 0.09], rtol=0.1)
    assert np.mean(var) == pytest.approx(r.residual_variance(), rel=1e-9)
    assert np.all(np.isnan(Rls(n, 2).output_residual_variance()))  # no data yet


@pytest.mark.parametrize(("n", "m"), [(0, 1), (1, 0), (0, 0)])
def test_sizes_below_one_are_refused(n: int, m: int) -> None:
    with pytest.raises(ValueError, match="need n_params ≥ 1 and n_outputs ≥ 1"):
        Rls(n, m)


def test_forgetting_without_data_grows_the_trace_to_its_bound_exactly() -> None:
    """P ← P/λ_eff, λ_eff = max(λ, trace(P)/trace_max): unexcited, P grows by 1/λ per step
    until its trace reaches trace_max, and then stays there (neither beyond nor short)."""
    r = Rls(2, 1, RlsConfig(forgetting=0.9, p0=1.0, trace_max=10.0))
    r.forget(3)
    np.testing.assert_allclose(np.trace(r.P), 2.0 / 0.9**3, rtol=1e-12)
    r.forget(1000)
    np.testing.assert_allclose(np.trace(r.P), 10.0, rtol=1e-9)
