from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import lfilter

from estimator.conditioning import Conditioner, design_kernels


def test_streaming_equals_batch_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 3))
    c = Conditioner(3, 1000.0, 30.0, 41)
    out = np.empty((1000, 3, 3))
    pos = 0
    for size in [1, 7, 100, 1, 391, 500]:
        first = c.push(X[pos : pos + size], out[pos : pos + size])
        assert first == min(max(42 - pos, 0), size)
        pos += size
    ref = c.batch(X)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_array_equal(out[42:], ref[42:])
    assert np.all(np.isnan(ref[:42])) and np.all(np.isfinite(ref[42:]))


def test_matches_direct_convolution() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=500)
    K = design_kernels(1000.0, 50.0, 31)
    out = Conditioner(1, 1000.0, 50.0, 31).batch(x[:, None])
    for k in range(3):
        np.testing.assert_allclose(
            out[32:, k, 0], lfilter(K[k], [1.0], x)[32:], rtol=1e-10, atol=1e-9 * np.abs(K[k]).sum()
        )


def test_derivatives_of_a_slow_signal_are_delayed_exact_derivatives() -> None:
    fs, f = 1000.0, 0.7
    t = np.arange(3000) / fs
    x = np.sin(2 * np.pi * f * t)
    c = Conditioner(1, fs, 20.0, 101)
    out = c.batch(x[:, None])
    td = t - c.delay / fs
    w = 2 * np.pi * f
    sl = slice(200, None)
    np.testing.assert_allclose(out[sl, 0, 0], np.sin(w * td[sl]), atol=1e-3)
    np.testing.assert_allclose(out[sl, 1, 0], w * np.cos(w * td[sl]), atol=1e-3 * w)
    np.testing.assert_allclose(out[sl, 2, 0], -w * w * np.sin(w * td[sl]), atol=1e-3 * w * w)


def test_reset_restarts_warmup_and_bad_arguments() -> None:
    c = Conditioner(2, 1000.0, 20.0, 11)
    out = np.empty((20, 3, 2))
    assert c.push(np.ones((20, 2)), out) == 12
    assert c.ready
    c.reset()
    assert not c.ready
    assert c.push(np.ones((5, 2)), out[:5]) == 5
    with pytest.raises(ValueError, match=r"odd"):
        Conditioner(1, 1000.0, 20.0, 10)
    with pytest.raises(ValueError, match=r"cutoff_hz"):
        Conditioner(1, 1000.0, 600.0, 11)
    with pytest.raises(ValueError, match=r"width 2"):
        c.push(np.ones((3, 3)), np.empty((3, 3, 3)))


def test_filtering_skips_only_the_all_zero_columns() -> None:
    """The batch filters and decimates only the columns that are not zero throughout (each
    joint's fluid columns live in its own rows): the same numbers as filtering them all."""
    from scipy.signal import butter, decimate, sosfiltfilt

    from estimator.observation import nonzero_columns

    rng = np.random.default_rng(3)
    a = rng.standard_normal((3000, 4, 6))
    a[:, 1, 2:] = 0.0
    a[:, 3, :4] = 0.0
    sos = butter(4, 40.0, fs=1000.0, output="sos")
    for f in (
        lambda b: sosfiltfilt(sos, b, axis=0),
        lambda b: decimate(b, 10, axis=0, zero_phase=True),
    ):
        np.testing.assert_allclose(nonzero_columns(f, a), f(a), rtol=0, atol=1e-12)
