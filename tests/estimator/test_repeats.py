"""Finding the experiment's repeats in the recorded reference (estimator.repeats)."""

from __future__ import annotations

import numpy as np

from estimator.repeats import find_repeats


def test_repeats_found_in_the_reference_and_the_first_dropped() -> None:
    P = 500
    t = np.arange(P) / 100.0
    period = np.column_stack([np.sin(2 * np.pi * 0.2 * t), np.cos(2 * np.pi * 0.4 * t)])
    rng = np.random.default_rng(0)
    ref = np.concatenate([rng.normal(size=(321, 2)), np.tile(period, (6, 1))])
    ref = np.concatenate([ref, rng.normal(size=(400, 2))])
    good = np.ones(ref.shape[0], dtype=bool)
    rep = find_repeats(ref, good, P)
    assert rep is not None
    assert (rep.start, rep.period, rep.count) == (321 + P, P, 5)
    # A left-out row inside the repeats shortens the usable stretch.
    good[321 + 3 * P + 10] = False
    rep = find_repeats(ref, good, P)
    assert rep is not None and rep.count < 5
    # Nothing periodic: none.
    assert find_repeats(rng.normal(size=(4000, 2)), np.ones(4000, dtype=bool), P) is None


def test_ml_fit_on_averaged_repeats_divides_the_errors_in_variables_bias() -> None:
    """The chamber of test_refine (periodic in 10 s), six repeats, noisy pressure: averaging
    five repeats (the first dropped) cuts the regressor's noise variance, hence least
    squares' bias, about five-fold."""
    from estimator.observation import observation, valid_rows
    from estimator.repeats import Repeats, periodic_fit
    from tests.estimator.chamber import MODEL, THETA, chamber_run, fit

    raw = chamber_run(60.0, p_noise=1.0e4, seed=3)
    ls, _ = fit(raw, refine=False)
    P, nd = 10_000, 10
    rep = Repeats(start=P, period=P, count=5)

    def observe(m, block, trim):
        return observation(m, block, 1000.0, 1, 40.0, nd, trim)[:2]

    def valid(m, block):
        return valid_rows(m, block, 1, 100)[::nd][P // nd : -(P // nd)]

    res = periodic_fit(MODEL, raw, rep, observe, nd, valid)
    assert res is not None and res.repeats.count == 5
    err_ls = abs(ls.theta[0] / THETA[0] - 1.0)
    err = abs(res.theta[0] / THETA[0] - 1.0)
    assert err < err_ls / 3.0, (err, err_ls)
