"""A structure search's fits share the conditioned signals (estimator.observation `cache`):
the same Φ and y as without, and the filters run once per block."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import estimator.observation as obs
from daq.profile import load_profile
from daq.profile.plant import plant_params
from estimator.models_lin import lin_models

ROOT = Path(__file__).resolve().parents[2]


def test_the_cache_changes_nothing_but_the_work(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    params = plant_params(load_profile(ROOT / "hw_profiles" / "sim-2dof-realistic.toml"))
    rng = np.random.default_rng(1)
    n = 3000
    raw = np.zeros((n, 6 * 2))
    t = np.arange(n) / 1000.0
    raw[:, 0:2] = 0.6 + 0.1 * np.sin(2 * np.pi * np.outer(t, [0.7, 1.1]))
    raw[:, 4:8] = 3e6 + 1e5 * rng.standard_normal((n, 4))
    raw[:, 8:10] = 0.05 * np.sin(2 * np.pi * np.outer(t, [1.3, 0.9]))
    raw[:, 10:12] = 30.0
    fluid = lin_models(params)[1]
    assert fluid.switches is not None
    calls = [0]
    real = obs.conditioned

    def counting(*a, **k):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(obs, "conditioned", counting)
    plain = obs.observation(fluid, raw, 1000.0, 2, 20.0, 10, 100)
    cache: dict = {}
    for value in ([[0.0, 0.0], [0.0, 0.0]], [[0.007, -0.006], [-0.007, -0.007]]):
        model = fluid.switches.make(np.array(value))
        got = obs.observation(model, raw, 1000.0, 2, 20.0, 10, 100, cache=cache)
        ref = obs.observation(model, raw, 1000.0, 2, 20.0, 10, 100)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])
    assert plain[0].shape == got[0].shape
    # 1 (plain) + per candidate: 1 cached (the first only) + 1 uncached reference each.
    assert calls[0] == 1 + 1 + 2
