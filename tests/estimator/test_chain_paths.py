"""ModelChain's bookkeeping, each against numbers worked out here: the validity mask's exact
FIR reach (also across blocks), the rejected-row count, λ applied once per raw row whether or
not the row reaches the RLS, the correlation factor's eight-block threshold and carried
partial blocks, and what a frozen estimate stops accumulating."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from daq.profile.loader import load_profile
from daq.profile.plant import plant_params
from estimator.chain import ModelChain, sample_from
from estimator.models import Sample, reference_models
from estimator.rls import RlsConfig

ROOT = Path(__file__).resolve().parents[2]
FS = 1000.0


def _model(valid_col: bool = False, **kw: object):
    params = plant_params(load_profile(ROOT / "hw_profiles" / "sim-2dof.toml"))
    model = reference_models(params)[0]
    if valid_col:
        # Invalid where the first joint's valve command is exactly 9 (a marker the test sets).
        def valid(x: Sample) -> np.ndarray:
            return x.u[:, 0] != 9.0

        model = dataclasses.replace(model, valid=valid)
    return model, params.n


def _chain(valid_col: bool = True, **kw: object) -> ModelChain:
    model, nj = _model(valid_col)
    return ModelChain(model, FS, nj, **kw)  # type: ignore[arg-type]


def _raw(chain: ModelChain, n: int, bad: list[int] = (), seed: int = 0) -> np.ndarray:  # type: ignore[assignment]
    rng = np.random.default_rng(seed)
    nj = chain.nj
    raw = np.zeros((n, 6 * nj))
    raw[:, 0:nj] = 0.3 + 0.2 * np.sin(np.arange(n)[:, None] / 50.0 + np.arange(nj))
    raw[:, nj : 2 * nj] = 0.05 + 0.01 * rng.normal(size=(n, nj))
    raw[:, 2 * nj : 4 * nj] = 5e6 + 1e5 * rng.normal(size=(n, 2 * nj))
    raw[:, 4 * nj : 5 * nj] = rng.uniform(-2, 2, size=(n, nj))
    raw[:, 5 * nj :] = 40.0
    for k in bad:
        raw[k, 4 * nj] = 9.0
    return raw


def test_the_mask_rejects_exactly_the_rows_whose_filter_history_holds_a_bad_row() -> None:
    chain = _chain()
    L = chain.cond.length
    n = 3 * L
    raw = _raw(chain, n, bad=[L])
    ok = chain._valid_mask(raw)
    assert ok is not None
    expected = np.ones(n, dtype=bool)
    expected[L : 2 * L] = False  # the bad row and the L − 1 after it; row 2L is clean again
    np.testing.assert_array_equal(ok, expected)
    # A bad row as the last of a block reaches into the next block.
    chain.reset_continuity()
    first = chain._valid_mask(_raw(chain, 10, bad=[9]))
    second = chain._valid_mask(_raw(chain, L, seed=1))
    assert first is not None and second is not None
    np.testing.assert_array_equal(first, [True] * 9 + [False])
    np.testing.assert_array_equal(second, [False] * (L - 1) + [True])
    # A continuity reset forgets it.
    chain._valid_mask(_raw(chain, 10, bad=[9]))
    chain.reset_continuity()
    np.testing.assert_array_equal(chain._valid_mask(_raw(chain, 5, seed=2)), [True] * 5)


def test_without_a_validity_rule_there_is_no_mask() -> None:
    chain = _chain(valid_col=False)
    assert chain._valid_mask(_raw(chain, 10, bad=[3])) is None


def test_rejected_rows_are_counted_and_every_raw_row_forgets_once() -> None:
    """λ is per sample period of rig time: rows in the warm-up or outside the model's domain
    are forgotten over (`Rls.forget`), the rest are forgotten inside the update; together
    exactly one λ per raw row."""
    chain = _chain(rls_config=RlsConfig(forgetting=0.999))
    L = chain.cond.length
    forgot: list[int] = []
    updated: list[int] = []
    real_forget, real_update = chain.rls.forget, chain.rls.update

    def forget(samples: int) -> None:
        forgot.append(samples)
        real_forget(samples)

    def update(Phi: np.ndarray, y: np.ndarray) -> None:
        updated.append(Phi.shape[0])
        real_update(Phi, y)

    chain.rls.forget = forget  # type: ignore[method-assign]
    chain.rls.update = update  # type: ignore[method-assign]
    n = 4 * L
    bad = [2 * L]
    used = chain.push(_raw(chain, n, bad=bad))
    assert chain.rejected == L  # the bad row's reach, all of it past the warm-up
    assert updated == [used] and forgot == [n - used]
    clean = _chain(rls_config=RlsConfig(forgetting=0.999))
    assert clean.push(_raw(clean, n)) == used + L and clean.rejected == 0
    # A block entirely inside the filters' warm-up: forgotten over, nothing updated.
    chain.reset_continuity()
    forgot.clear()
    assert chain.push(_raw(chain, L // 2)) == 0
    assert forgot == [L // 2] and updated == [used]


def test_the_correlation_factor_needs_eight_block_means_and_carries_partial_blocks() -> None:
    """Eight block means (blocks × outputs: each output's residual is a series of its own)."""
    chain = _chain(valid_col=False, block=10)
    m = chain.model.n_outputs
    need = -(-8 // m)  # blocks for eight means
    e = np.full((10 * need + 5, m), 2.0)  # constant residuals: κ = B · mean² / e² = B
    chain._batch_means(e[: 10 * (need - 1) + 5])  # one block short, 5 rows carried
    assert chain._bm[1] == (need - 1) * m and chain.correlation() == 1.0
    chain._batch_means(e[:4])  # 9 rows carried: still short
    assert chain.correlation() == 1.0
    chain._batch_means(e[:1])  # the last block, from carried rows
    assert chain._bm[1] == need * m and chain._bm[3] == 10 * need * m
    assert chain.correlation() == pytest.approx(10.0)
    zero = _chain(valid_col=False, block=10)
    zero._batch_means(np.zeros((100, m)))  # no residual at all: no factor
    assert zero.correlation() == 1.0
    white = _chain(valid_col=False, block=10)
    alt = np.tile([[1.0], [-1.0]], (50, m))  # each block mean 0: κ floors at 1
    white._batch_means(alt)
    assert white.correlation() == 1.0


def test_a_frozen_estimate_keeps_its_residual_statistics_and_jackknife_groups() -> None:
    chain = _chain(valid_col=False, block=10)
    L = chain.cond.length
    assert chain.push(_raw(chain, 3 * L)) > 0
    bm, groups = chain._bm.copy(), [a.copy() for a in chain._A]
    assert len(groups) >= 1 and bm[3] > 0
    chain.rls.frozen = True
    chain.push(_raw(chain, 2 * L, seed=4))
    np.testing.assert_array_equal(chain._bm, bm)
    assert len(chain._A) == len(groups)
    for a, b in zip(chain._A, groups, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_rejected_count_counts_only_regression_rows() -> None:
    """A bad row inside the warm-up rejects only the rows after the warm-up it still reaches."""
    n = 3 * _chain().cond.length
    clean = _chain()
    warm = n - clean.push(_raw(clean, n))  # rows before the first regression sample
    L = clean.cond.length
    assert 10 < warm < 10 + L
    chain = _chain()
    used = chain.push(_raw(chain, n, bad=[10]))
    assert chain.rejected == 10 + L - warm and used == n - warm - chain.rejected


def test_sample_from_views_the_signals_in_their_slots() -> None:
    nj = 2
    raw = np.arange(4 * 6 * nj, dtype=float).reshape(4, 6 * nj)
    x = sample_from(raw, nj)
    np.testing.assert_array_equal(x.q, raw[:, 0:2])
    np.testing.assert_array_equal(x.s, raw[:, 2:4])
    np.testing.assert_array_equal(x.p_cap, raw[:, 4:6])
    np.testing.assert_array_equal(x.p_rod, raw[:, 6:8])
    np.testing.assert_array_equal(x.u, raw[:, 8:10])
    np.testing.assert_array_equal(x.temp, raw[:, 10:12])
    assert np.all(x.qd == 0.0) and x.qd.shape == (4, nj)


def test_a_fresh_chain_has_seen_no_bad_row_whatever_its_filters_reach() -> None:
    """Before any bad row, every row is valid: 'the last bad row' starts out of every filter's
    reach, also for a conditioner longer than a hundred rows (here 401 taps)."""
    model, nj = _model(valid_col=True)
    chain = ModelChain(dataclasses.replace(model, taps=401), FS, nj)
    L = chain.cond.length
    assert L > 200
    np.testing.assert_array_equal(chain._valid_mask(_raw(chain, 2 * L)), [True] * (2 * L))
    chain._valid_mask(_raw(chain, 10, bad=[9]))
    chain.reset_continuity()  # forgets the bad row the same way
    np.testing.assert_array_equal(chain._valid_mask(_raw(chain, L, seed=3)), [True] * L)


def test_the_residual_statistics_are_of_y_minus_the_fit() -> None:
    """The correlation factor's batch means are taken of the regression's residuals after the
    update, y − Φθ̂, in the normalised units the RLS works in."""
    chain = _chain(valid_col=False, block=10)
    seen: dict[str, np.ndarray] = {}
    real_update, real_means = chain.rls.update, chain._batch_means

    def update(Phi: np.ndarray, y: np.ndarray) -> None:
        seen["Phi"], seen["y"] = Phi.copy(), y.copy()
        real_update(Phi, y)

    def means(e: np.ndarray) -> None:
        seen["e"] = e.copy()
        real_means(e)

    chain.rls.update = update  # type: ignore[method-assign]
    chain._batch_means = means  # type: ignore[method-assign]
    assert chain.push(_raw(chain, 3 * chain.cond.length)) > 0
    expected = seen["y"] - seen["Phi"] @ chain.rls.theta
    np.testing.assert_allclose(
        seen["e"], expected, rtol=1e-12, atol=1e-12 * np.abs(seen["y"]).max()
    )
    assert np.abs(expected).max() > 0  # a residual, not an exact fit
