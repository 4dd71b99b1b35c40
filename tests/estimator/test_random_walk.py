"""Random-walk (Kalman) form of the RLS (issue 14, item 3): `Rls.diffuse` and the chain's
drift configuration. The measure is coverage: how often the drifting truth lies within the
reported ±3σ over time."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from daq.profile.loader import load_profile
from daq.profile.plant import plant_params
from estimator.chain import ModelChain
from estimator.models import reference_models
from estimator.online import OnlineIdentifier, random_walks
from estimator.rls import Rls, RlsConfig

ROOT = Path(__file__).resolve().parents[2]


def test_diffuse_adds_to_the_covariance_and_keeps_the_ud_form() -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 17):
        r = Rls(n, 2, RlsConfig(p0=10.0))
        r.update(rng.normal(size=(40, 2, n)), rng.normal(size=(40, 2)))
        before = r.P.copy()
        q = rng.uniform(0.0, 1.0, n) * np.diag(before)
        r.diffuse(q)
        np.testing.assert_allclose(r.P, before + np.diag(q), rtol=1e-10, atol=1e-14)
        assert np.allclose(np.tril(r.U, -1), 0.0) and np.all(np.diag(r.U) == 1.0)
        assert np.all(r.d > 0.0)
    with pytest.raises(ValueError, match="≥ 0"):
        r.diffuse(-np.ones(r.n))


def _track(
    drift: np.ndarray, walk: float, noise: float = 0.05, block: int = 10, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Feed y = φᵀθ_k + e with θ_k = θ0 + drift[k] through an RLS that, like the chain, diffuses
    once per block by walk²·(block samples)/σ² (walk: 1σ per sample, absolute). Returns the
    truth, estimates and σ after each block, from the 50th block on (after the start-up)."""
    rng = np.random.default_rng(seed)
    N, n = drift.shape
    theta = np.array([1.0, -0.5, 2.0])[:n] + drift
    Phi = rng.normal(size=(N, 1, n))
    y = np.einsum("kmi,ki->km", Phi, theta) + noise * rng.normal(size=(N, 1))
    r = Rls(n, 1, RlsConfig(p0=1e6))
    truth, est, sig = [], [], []
    for k in range(0, N, block):
        s2 = r.residual_variance()
        if walk > 0.0 and np.isfinite(s2):
            r.diffuse(np.full(n, walk**2 * block / s2))
        r.update(Phi[k : k + block], y[k : k + block])
        truth.append(theta[k + block - 1])
        est.append(r.theta.copy())
        sig.append(np.sqrt(np.diag(r.covariance())))
    return np.array(truth)[50:], np.array(est)[50:], np.array(sig)[50:]


def _coverage(truth: np.ndarray, est: np.ndarray, sig: np.ndarray) -> float:
    return float(np.mean(np.abs(est - truth) <= 3.0 * sig))


def test_random_walk_covers_a_random_walking_truth() -> None:
    """The model's own assumption: every parameter walks with 1σ = 2e-3 per sample."""
    rng = np.random.default_rng(11)
    N, w = 20_000, 2e-3
    drift = np.cumsum(w * rng.normal(size=(N, 3)), axis=0)
    walk = _coverage(*_track(drift, w))
    constant = _coverage(*_track(drift, 0.0))
    assert walk >= 0.95, walk
    assert constant < 0.5, constant  # the growing-window RLS lags far outside its σ


def test_random_walk_covers_a_ramp_and_settles_after_it() -> None:
    """A deterministic ramp (the oil warming): 30 % of θ₀ over 6000 samples on one parameter,
    the random walk set to 4× the ramp's change per sample (measured: with 1× the lag of the
    walk's filter behind a ramp leaves the truth outside ±3σ ~20 % of the time). The truth stays
    within ±3σ ≥ 90 % of the time and the error settles after the ramp."""
    N, ramp = 12_000, (2_000, 8_000)
    drift = np.zeros((N, 3))
    rate = 0.3 * 2.0 / (ramp[1] - ramp[0])
    t = np.arange(N)
    drift[:, 2] = rate * np.clip(t - ramp[0], 0, ramp[1] - ramp[0])
    truth, est, sig = _track(drift, 4 * rate, noise=0.02)
    assert _coverage(truth, est, sig) >= 0.90
    # 1000 samples after the end of the ramp the error is within 1 % of the parameter.
    after = slice((ramp[1] + 1000) // 10 - 50, None)
    assert np.max(np.abs(est[after, 2] - truth[after, 2]) / np.abs(truth[after, 2])) < 0.01
    lagging = _track(drift, 0.0, noise=0.02)
    assert _coverage(lagging[0][:, 2:], lagging[1][:, 2:], lagging[2][:, 2:]) < 0.5


def test_random_walk_configuration_per_model_and_parameter() -> None:
    models = reference_models(plant_params(load_profile(ROOT / "hw_profiles" / "sim-2dof.toml")))

    cfg = SimpleNamespace(random_walk_pct=0.5, random_walk={"fluid": 1.0, "1/b": 3.0})
    mech, fluid = random_walks(models, cfg)
    assert np.all(mech == 0.005)
    assert fluid[list(models[1].names).index("1/b")] == 0.03
    assert np.all(np.delete(fluid, list(models[1].names).index("1/b")) == 0.01)
    cfg.random_walk = {"1/B": 1.0}
    with pytest.raises(ValueError, match="no model or parameter named 1/B"):
        random_walks(models, cfg)


def _primed_chain(walk: float) -> ModelChain:
    """The reference mechanical model's chain with its RLS fed random normalised equations, so
    σ² is known and the random walk acts."""
    params = plant_params(load_profile(ROOT / "hw_profiles" / "sim-2dof.toml"))
    model = reference_models(params)[0]
    chain = ModelChain(model, 1000.0, params.n, random_walk=np.full(model.n_params, walk))
    rng = np.random.default_rng(5)
    m, n = model.n_outputs, model.n_params
    theta = rng.uniform(0.5, 2.0, n)
    phi = rng.normal(size=(400, m, n))
    chain.rls.update(phi, phi @ theta + 0.1 * rng.normal(size=(400, m)))
    return chain


def _growth(chain: ModelChain, act: Callable[[], object]) -> np.ndarray:
    before = chain.covariance()
    act()
    return chain.covariance() - before


def test_the_chain_ages_its_covariance_by_the_walk_over_rig_time() -> None:
    """Each parameter's variance grows by (w·θ̂)²·t over t s of rig time (physical units, the
    read-out's κσ² taken out), nothing else changes; no time, no growth."""
    w = 0.02
    chain = _primed_chain(w)
    expected = (w * chain.theta()) ** 2
    grown = _growth(chain, lambda: chain.age(2.5))
    np.testing.assert_allclose(np.diag(grown), 2.5 * expected, rtol=1e-6)
    np.testing.assert_allclose(grown - np.diag(np.diag(grown)), 0.0, atol=1e-9 * expected.max())
    assert np.all(_growth(chain, lambda: chain.age(0.0)) == 0.0)
    still = _primed_chain(0.0)
    assert np.all(_growth(still, lambda: still.age(100.0)) == 0.0)


def test_rows_the_chain_cannot_use_still_age_it_by_their_rig_time() -> None:
    """Rows inside the filters' warm-up after a gap (restarted filters) reach no regression,
    yet the parameters drift on over the time they span: k rows age it by k/fs seconds."""
    chain = _primed_chain(0.02)
    chain.reset_continuity()
    raw = np.zeros((chain.cond.length // 2, 6 * chain.nj))
    raw[:, :2] = 0.7
    expected = (0.02 * chain.theta()) ** 2 * raw.shape[0] / chain.fs
    used: list[int] = []
    grown = _growth(chain, lambda: used.append(chain.push(raw)))
    assert used == [0]
    np.testing.assert_allclose(np.diag(grown), expected, rtol=1e-6)


def test_a_gap_in_the_telemetry_ages_the_online_estimate_by_the_missing_time(
    sim1dof_run,
) -> None:
    """Rows missing from the stream (a jump in t and seq) are rig time the parameters drift
    through: the online identifier ages every chain by the gap's length."""
    profile, layout, rows = sim1dof_run
    est = profile.estimator.model_copy(update={"random_walk_pct": 2.0})
    profile = profile.model_copy(update={"estimator": est})
    ident = OnlineIdentifier(profile, layout.names, chunk_s=0.0)
    ident.update_rows(rows[:6000])
    chain = ident.chains[0]
    assert chain.rls.samples > 0
    state = layout.names.index("state")
    later = rows[6000:6010].copy()
    later[:, state] = 0.0  # not RUNNING: left out, so only the gap before them ages
    gap_s = 3.0
    later[:, layout.names.index("t")] += gap_s
    later[:, layout.names.index("seq")] += round(gap_s * ident.fs)
    expected = (0.02 * chain.theta()) ** 2 * gap_s
    grown = _growth(chain, lambda: ident.update_rows(later))
    assert ident.estimate().data.gap_s == pytest.approx(gap_s)
    np.testing.assert_allclose(np.diag(grown), expected, rtol=1e-6)


def test_a_bad_random_walk_is_refused_naming_the_model() -> None:
    params = plant_params(load_profile(ROOT / "hw_profiles" / "sim-2dof.toml"))
    model = reference_models(params)[0]
    n = model.n_params
    for bad in (np.full(n, -0.01), np.full(n, np.nan), np.full(n + 1, 0.01)):
        with pytest.raises(ValueError, match=f"model '{model.name}': random_walk must be"):
            ModelChain(model, 1000.0, params.n, random_walk=bad)


def test_no_ageing_backwards_in_time_or_without_a_residual() -> None:
    chain = _primed_chain(0.02)
    assert np.all(_growth(chain, lambda: chain.age(-1.0)) == 0.0)  # a clock step back
    chain.rls.stats[0] = 0.0  # an exact fit: σ² = 0, nothing to scale the walk by
    before = chain.rls.P.copy()
    chain.age(1.0)
    np.testing.assert_array_equal(chain.rls.P, before)


def test_a_prior_is_held_in_normalised_units() -> None:
    """θ0 and diag(cov0) in physical units become θ0/scale and cov0/scale² in the RLS, and the
    read-out gives θ0 back in physical units."""
    params = plant_params(load_profile(ROOT / "hw_profiles" / "sim-2dof.toml"))
    model = reference_models(params)[1]
    scale = np.asarray(model.param_scale, dtype=float)
    theta0 = 3.0 * scale
    cov0 = (0.5 * scale) ** 2
    chain = ModelChain(model, 1000.0, params.n, theta0=theta0, cov0=cov0)
    np.testing.assert_allclose(chain.rls.theta, 3.0)
    np.testing.assert_allclose(np.diag(chain.rls.P), 0.25)
    np.testing.assert_allclose(chain.theta(), theta0)


def test_drifting_means_forgetting_or_a_walk() -> None:
    params = plant_params(load_profile(ROOT / "hw_profiles" / "sim-2dof.toml"))
    model = reference_models(params)[0]
    n = model.n_params

    def chain(forgetting: float, walk: float) -> ModelChain:
        cfg = RlsConfig(forgetting=forgetting)
        return ModelChain(model, 1000.0, params.n, cfg, random_walk=np.full(n, walk))

    assert not chain(1.0, 0.0).drifting
    assert chain(1.0, 0.01).drifting and chain(0.999, 0.0).drifting
    assert chain(0.999, 0.01).drifting
    one = np.zeros(n)
    one[0] = 0.01  # one parameter walking is enough
    assert ModelChain(model, 1000.0, params.n, random_walk=one).drifting


def test_excitation_is_the_smallest_eigenvalue_and_the_condition_number() -> None:
    chain = _primed_chain(0.0)
    ev = chain.rls.information_eigenvalues()
    low, cond = chain.excitation()
    assert low == pytest.approx(ev[0]) and cond == pytest.approx(ev[-1] / ev[0])
    assert cond >= 1.0


def test_correlated_residuals_inflate_sigma_by_their_long_run_variance() -> None:
    """Batch means of AR(1) residuals e_k = ρ e_(k−1) + w_k: κ → (1 + ρ)/(1 − ρ) for blocks much
    longer than the correlation time; white residuals give κ = 1."""
    chain = _primed_chain(0.0)
    rng = np.random.default_rng(9)
    rho, N = 0.8, 400_000
    w = rng.normal(size=N)
    e = np.empty(N)
    e[0] = w[0]
    for k in range(1, N):
        e[k] = rho * e[k - 1] + w[k]
    chain._batch_means(e[:, None])
    assert chain.correlation() == pytest.approx((1 + rho) / (1 - rho), rel=0.25)
    white = _primed_chain(0.0)
    white._batch_means(rng.normal(size=(N, 1)))
    assert white.correlation() == pytest.approx(1.0, abs=0.3)


def test_the_jackknife_needs_its_groups_and_reads_with_exactly_that_many() -> None:
    from estimator.chain import JACKKNIFE_GROUPS

    chain = _primed_chain(0.0)
    m, n = chain.model.n_outputs, chain.model.n_params
    rng = np.random.default_rng(3)
    rows = chain._group_rows
    for g in range(JACKKNIFE_GROUPS):
        assert chain.jackknife_variance() is None, g
        Phi = rng.normal(size=(rows + 1, m, n))
        y = Phi @ np.ones(n) + 0.1 * rng.normal(size=(rows + 1, m))
        y[g % rows, 0] = np.nan  # one non-finite sample, left out: `rows` remain
        chain._jackknife_groups(Phi, y)
    assert len(chain._A) == JACKKNIFE_GROUPS  # one group per `fs` rows, exactly
    assert all(np.all(np.isfinite(a)) for a in chain._A)
    var = chain.jackknife_variance()
    assert var is not None and np.all(var > 0.0)
