"""The estimator's processes run one BLAS thread unless told otherwise (estimator.blas)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from estimator import batch
from estimator.blas import ENV, blas_limited, blas_threads
from tests.conftest import PROFILES


def _blas_threads_now() -> set[int]:
    return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}


@pytest.fixture
def two_threads():
    """BLAS allowed two threads around the test, whatever the machine's default."""
    with threadpool_limits(limits=2, user_api="blas"):
        if _blas_threads_now() != {2}:
            pytest.skip("this BLAS cannot be set to two threads")
        yield


def test_one_thread_within_the_limit_and_the_previous_count_after(two_threads, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with blas_limited():
        assert _blas_threads_now() == {1}
    assert _blas_threads_now() == {2}


def test_the_environment_sets_another_count(two_threads, monkeypatch):
    with threadpool_limits(limits=1, user_api="blas"):
        monkeypatch.setenv(ENV, "2")
        with blas_limited():
            assert _blas_threads_now() == {2}


@pytest.mark.parametrize("raw", ["0", "-1", "two", "1.5"])
def test_a_bad_count_is_refused_naming_the_variable_and_the_range(raw, monkeypatch):
    monkeypatch.setenv(ENV, raw)
    with pytest.raises(ValueError, match=rf"{ENV}=.*whole number of threads ≥ 1"):
        blas_threads()


def test_the_batch_fit_runs_with_one_thread(two_threads, monkeypatch):
    """identify_run, whoever calls it (rigctl, a bench, a report), fits with one thread: seen
    from inside its first model fit."""
    monkeypatch.delenv(ENV, raising=False)
    seen: list[set[int]] = []

    def spy(*args, **kwargs):
        seen.append(_blas_threads_now())
        raise RuntimeError("stop here")

    monkeypatch.setattr(batch, "signals_from_columns", spy)
    profile = SimpleNamespace(rig=SimpleNamespace(loop_rate_hz=1000.0), joints=["j1"])
    with pytest.raises(RuntimeError, match="stop here"):
        batch.identify_run({"t": np.zeros(3)}, None, profile=profile)  # type: ignore[arg-type]
    assert seen == [{1}]
    assert _blas_threads_now() == {2}


def test_rigctl_refuses_a_bad_count_as_a_usage_error(monkeypatch, capsys):
    """`rigctl predict` (and `check`, `identify`) limit the threads when they load the
    estimator: a bad count is refused before anything is computed."""
    from rigctl.common import EXIT_USAGE
    from rigctl.main import main

    monkeypatch.setenv(ENV, "lots")
    root = PROFILES.parent
    args = ["predict", "--profile", str(PROFILES / "sim-2dof.toml"), "--experiment",
            str(root / "experiments" / "validation-2dof.toml")]  # fmt: skip
    assert main(args) == EXIT_USAGE
    err = capsys.readouterr().err
    assert ENV in err and "≥ 1" in err
