"""Lin's link-by-link identification (estimator.linkwise; issue 14 item 4)."""

from __future__ import annotations

import numpy as np

from estimator.linkwise import link_by_link


def test_outer_link_first_then_inner_with_it_fixed() -> None:
    """Two torque equations: τ2 holds (M2, R12), τ1 holds (M1, M2, R12). Stage 1 fits τ2
    alone; stage 2 fits M1 from τ1 with M2, R12 fixed; σ propagates the fixed ones' error
    (the scatter over seeds matches it)."""
    theta = np.array([4.0, 1.3, 1.4])  # M1, M2, R12
    est, sig = [], []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        r = 400
        a, b, c = rng.normal(size=(3, r))
        Phi = np.zeros((r, 2, 3))
        Phi[:, 0] = np.column_stack([a, b, 0.5 * a + c])
        Phi[:, 1] = np.column_stack([np.zeros(r), a + b, c])
        y = Phi @ theta + rng.normal(0.0, 0.2, (r, 2))
        fit = link_by_link(Phi, y, ["M1", "M2", "R12"], np.ones(3))
        assert fit is not None
        assert fit.stage.tolist() == [2, 1, 1]
        est.append(fit.theta)
        sig.append(fit.theta * fit.sigma_pct / 100.0)
    est, sig = np.array(est), np.array(sig)
    assert np.mean(np.abs(est - theta) <= 3 * sig) >= 0.95
    # M1's σ includes what M2, R12 bring in from stage 1: it matches M1's own scatter.
    np.testing.assert_allclose(est.std(axis=0, ddof=1), sig.mean(axis=0), rtol=0.35)


def test_single_equation_has_nothing_to_sequence() -> None:
    assert link_by_link(np.ones((10, 1, 2)), np.ones((10, 1)), ["a", "b"], np.ones(2)) is None
