"""The simulated shunt calibration resistor: a closed relay adds the shunt's *true* equivalent
to the transducer's true input, before the sensor's own gain (a bridge's sensitivity applies to
it as to a pressure), and that equivalent differs from the certificate's as a real resistor's
does: by `shunt.sim_error`, else by a seeded draw of the certificate's σ."""

from __future__ import annotations

from typing import Any

import numpy as np

from daq.backends.base import BackendStatus
from daq.backends.sim import SimBackend
from daq.profile import load_profile, parse_profile
from daq.profile.schema import Profile
from daq.scaling import counts_to_eng
from tests.conftest import PROFILES

REALISTIC = load_profile(PROFILES / "sim-2dof-realistic.toml")


def _profile(seed: int = 1, **shunt: Any) -> Profile:
    data = REALISTIC.model_dump(mode="python", exclude_none=True)
    data["backend"]["sim"]["seed"] = seed
    for c in data["channels"]:
        if c["name"] == "p_rod_1" and shunt:
            c["shunt"] = {**c["shunt"], **shunt}
    return parse_profile(data)


def _eng(b: SimBackend, n: int, mask: np.ndarray) -> np.ndarray:
    assert b.write_shunt(mask) == BackendStatus.OK
    raw = np.zeros((n, b.n_inputs))
    for k in range(n):
        b.read(k * b.period, raw[k])
        b.advance(b.period)
    return np.array([[counts_to_eng(c, x) for c, x in zip(b.inputs, r, strict=True)] for r in raw])


def test_a_closed_shunt_adds_its_true_equivalent_through_the_sensor_gain() -> None:
    profile = _profile(sim_error=0.004)
    plain, shunted = SimBackend.from_profile(profile), SimBackend.from_profile(profile)
    names = [c.name for c in profile.inputs]
    i = names.index("p_rod_1")
    mask = np.zeros(len(names), dtype=bool)
    mask[i] = True
    # Same seed, same plant: the only difference is the shunt.
    diff = _eng(shunted, 50, mask) - _eng(plain, 50, np.zeros_like(mask))
    ch = profile.inputs[i]
    assert ch.shunt is not None and ch.sim_error is not None
    true_eq = ch.shunt.equivalent_pa * 1.004
    assert shunted.true_shunt_equivalent("p_rod_1") == true_eq
    lsb = 20.0 / 65536 * 2.0e6
    np.testing.assert_allclose(diff[:, i], (1.0 + ch.sim_error.gain_error) * true_eq, atol=lsb)
    others = np.delete(diff, i, axis=1)
    assert np.all(others == 0.0)
    # Open again: the reading is the pressure's.
    off = np.zeros_like(mask)
    assert np.all(_eng(shunted, 5, off) == _eng(plain, 5, off))


def test_the_true_equivalent_is_a_seeded_draw_of_the_certificate_sigma() -> None:
    def errors(seed: int) -> np.ndarray:
        b = SimBackend.from_profile(_profile(seed))
        chans = [c for c in b.inputs if c.shunt is not None]
        return np.array([b.true_shunt_equivalent(c.name) / c.shunt.equivalent_pa - 1.0  # type: ignore[union-attr]
                         for c in chans])  # fmt: skip

    e1 = errors(1)
    assert np.array_equal(e1, errors(1))  # the seed repeats it
    assert not np.array_equal(e1, errors(2))
    draws = np.concatenate([errors(s) for s in range(1, 41)])  # 200 draws of σ = 0.1 %
    assert 0.0008 < draws.std() < 0.0012 and abs(draws.mean()) < 0.0003
    assert np.all(e1 != 0.0)


def test_a_channel_without_a_shunt_cannot_be_shunted() -> None:
    b = SimBackend.from_profile(REALISTIC)
    mask = np.array([c.name == "q_1" for c in b.inputs])
    assert b.write_shunt(mask) == BackendStatus.ERROR
    assert not np.any(b._shunt_input)
