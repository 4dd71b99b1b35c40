"""estimator.oil_span: which rows' temperatures count, and which fits are flagged (the path
through identify_run is in test_batch_paths.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from estimator.chain import TEMP_SLOT
from estimator.oil_span import OIL_SPAN_LIMIT_K, oil_span_warning


def _case(temps: list[float], used: list[bool], nj: int = 2):
    raw = np.zeros((len(temps), 6 * nj))
    raw[:, TEMP_SLOT * nj] = temps
    models = [
        SimpleNamespace(name="mech", referred=("Fv1",)),
        SimpleNamespace(name="fluid", referred=("1/b",)),
        SimpleNamespace(name="plain", referred=()),
    ]
    fits = [SimpleNamespace(identifiable=np.ones(3, dtype=bool)) for _ in models]
    return raw, np.array(used), nj, models, fits


def test_only_the_rows_used_count() -> None:
    hot = 30.0 + OIL_SPAN_LIMIT_K + 5.0  # a reading outside the data used (e.g. not RUNNING)
    raw, used, nj, models, fits = _case([30.0, 31.0, hot, 32.0], [True, True, False, True])
    assert oil_span_warning(raw, used, nj, models, fits, "oil_t") == []
    assert all(f.identifiable.all() for f in fits)


def test_a_span_of_the_limit_itself_is_within_it() -> None:
    raw, used, nj, models, fits = _case([25.0, 25.0 + OIL_SPAN_LIMIT_K], [True, True])
    assert oil_span_warning(raw, used, nj, models, fits, "oil_t") == []
    assert all(f.identifiable.all() for f in fits)


def test_a_missing_reading_is_not_a_span() -> None:
    raw, used, nj, models, fits = _case([30.0, np.nan, 31.0], [True, True, True])
    assert oil_span_warning(raw, used, nj, models, fits, "oil_t") == []
    assert all(f.identifiable.all() for f in fits)


def test_past_the_limit_every_referring_fit_is_flagged_and_named() -> None:
    lo, hi = 25.0, 25.0 + OIL_SPAN_LIMIT_K + 1.0
    raw, used, nj, models, fits = _case([lo, np.nan, hi], [True, True, True])
    (warning,) = oil_span_warning(raw, used, nj, models, fits, "oil_t")
    assert [f.identifiable.any() for f in fits] == [False, False, True]
    assert f"({lo:.1f}–{hi:.1f} °C, 'oil_t')" in warning
    assert "'mech', 'fluid' is flagged" in warning


def test_nothing_to_judge_without_a_reading_or_a_referring_model() -> None:
    raw, used, nj, models, fits = _case([np.nan, np.nan], [True, True])
    assert oil_span_warning(raw, used, nj, models, fits, "oil_t") == []
    raw, used, nj, models, fits = _case([20.0, 40.0], [True, True])
    assert oil_span_warning(raw, used, nj, models[2:], fits[2:], "oil_t") == []
    assert fits[2].identifiable.all()
