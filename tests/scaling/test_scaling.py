"""Counts ↔ converter units ↔ engineering units: round trips (Hypothesis) and the loop's
vectorised scaler agreeing with the pure functions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from daq.profile import load_profile
from daq.profile.schema import Converter, LinearScaling, PolynomialScaling, TableScaling
from daq.scaling import (
    ChannelScaler,
    counts_to_eng,
    counts_to_units,
    eng_to_counts,
    from_eng,
    lsb,
    to_eng,
    units_to_counts,
)
from tests.conftest import PROFILES

finite = st.floats(-1e6, 1e6, allow_nan=False)
converters = st.builds(
    lambda bits, lo, span, wraps: Converter(bits=bits, min=lo, max=lo + span, wraps=wraps),
    st.integers(8, 24),
    st.floats(-100, 100),
    st.floats(0.1, 400),
    st.booleans(),
)


@given(conv=converters, frac=st.floats(0.0, 0.999999))
def test_quantisation_is_within_half_an_lsb(conv: Converter, frac: float) -> None:
    x = conv.min + frac * (conv.max - conv.min)
    k = units_to_counts(conv, x)
    assert k == int(k)
    full = 1 << conv.bits
    assert 0 <= k < full
    back = counts_to_units(conv, k)
    err = abs(back - x)
    bound = lsb(conv) / 2
    if conv.wraps:  # the top half-lsb wraps to code 0
        err = min(err, abs(err - (conv.max - conv.min)))
    elif x > conv.max - lsb(conv) / 2:  # the top code saturates: up to one lsb there
        bound = lsb(conv)
    assert err <= bound * (1 + 1e-9) + 1e-12


@given(conv=converters, k=st.integers(0, 2**24 - 1))
def test_codes_round_trip_exactly(conv: Converter, k: int) -> None:
    k = k % (1 << conv.bits)
    assert units_to_counts(conv, counts_to_units(conv, k)) == k


@given(conv=converters, over=st.floats(1.0, 1e3))
def test_adc_saturates_at_its_rails_resolver_wraps(conv: Converter, over: float) -> None:
    high = units_to_counts(conv, conv.max + over)
    if conv.wraps:
        assert 0 <= high < (1 << conv.bits)
    else:
        assert high == (1 << conv.bits) - 1
        assert units_to_counts(conv, conv.min - over) == 0


@given(gain=finite.filter(lambda g: abs(g) > 1e-6), offset=finite, x=st.floats(-1e3, 1e3))
def test_linear_round_trip(gain: float, offset: float, x: float) -> None:
    s = LinearScaling(kind="linear", gain=gain, offset=offset, units="u")
    assert from_eng(s, to_eng(s, x)) == pytest.approx(
        x, rel=1e-9, abs=1e-9 * (1 + abs(offset / gain))
    )


@given(
    c0=st.floats(-10, 10),
    c1=st.floats(0.1, 10),
    c3=st.floats(0.0, 0.05),
    x=st.floats(-5.0, 5.0),
)
def test_monotonic_polynomial_round_trip(c0: float, c1: float, c3: float, x: float) -> None:
    s = PolynomialScaling(kind="polynomial", coefficients=[c0, c1, 0.0, c3], units="u")
    assert from_eng(s, to_eng(s, x), -10.0, 10.0) == pytest.approx(x, abs=1e-9)


@given(
    steps=st.lists(st.floats(0.01, 10.0), min_size=2, max_size=10),
    slopes=st.lists(st.floats(0.01, 10.0), min_size=10, max_size=10),
    sign=st.sampled_from([1.0, -1.0]),
    frac=st.floats(0.0, 1.0),
)
def test_table_round_trip(
    steps: list[float], slopes: list[float], sign: float, frac: float
) -> None:
    xs = np.concatenate([[0.0], np.cumsum(steps)])
    ys = np.concatenate([[0.0], sign * np.cumsum(np.array(steps) * slopes[: len(steps)])])
    s = TableScaling(
        kind="table", points=[[float(a), float(b)] for a, b in zip(xs, ys, strict=False)], units="u"
    )
    x = float(frac * xs[-1])
    assume(np.all(np.diff(ys) != 0))
    assert from_eng(s, to_eng(s, x)) == pytest.approx(x, abs=1e-9 * xs[-1])


def test_table_rejects_non_monotonic_points() -> None:
    with pytest.raises(ValueError, match="strictly monotonic"):
        TableScaling(kind="table", points=[[0, 0], [1, 2], [2, 1]], units="u")


def test_channel_scaler_matches_the_pure_functions() -> None:
    profile = load_profile(PROFILES / "sim-2dof.toml")
    inputs = profile.inputs
    rng = np.random.default_rng(0)
    counts = np.array([float(rng.integers(0, 1 << c.converter.bits)) for c in inputs])
    eng = np.zeros(len(inputs))
    ChannelScaler(inputs).scale(counts, eng)
    expected = [counts_to_eng(c, k) for c, k in zip(inputs, counts, strict=False)]
    np.testing.assert_allclose(eng, expected, rtol=1e-12, atol=1e-9)


@given(frac=st.floats(0.05, 0.95))
def test_eng_to_counts_inverts_counts_to_eng(frac: float) -> None:
    profile = load_profile(PROFILES / "sim-2dof.toml")
    for ch in profile.inputs:
        y = ch.valid_min + frac * (ch.valid_max - ch.valid_min)
        back = counts_to_eng(ch, eng_to_counts(ch, y))
        step = abs(to_eng(ch.scaling, lsb(ch.converter)) - to_eng(ch.scaling, 0.0))
        assert abs(back - y) <= step / 2 * (1 + 1e-9), ch.name
