"""Model validation: the FIT ratio, and the validation path itself checked on the simulator
with the true parameters on a trajectory different from any identification run."""

from __future__ import annotations

import numpy as np
import pytest

from daq.backends.sim import SimRig
from daq.profile import load_profile
from estimator.validation import Measured, fit_ratio, validate
from tests.conftest import PROFILES


def test_fit_ratio_hand_computed() -> None:
    y = np.array([1.0, 2.0, 3.0, 4.0])
    y_hat = np.array([1.0, 2.0, 3.0, 5.0])
    # ‖y − ŷ‖ = 1; ‖y − mean‖ = sqrt(2.25 + 0.25 + 0.25 + 2.25) = sqrt(5)
    assert fit_ratio(y, y_hat) == pytest.approx(100 * (1 - 1 / np.sqrt(5)))
    assert fit_ratio(y, y) == 100.0
    assert fit_ratio(y, np.full(4, y.mean())) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="constant"):
        fit_ratio(np.ones(3), np.zeros(3))


def _validation_run(seconds: float = 8.0) -> tuple[SimRig, Measured]:
    rig = SimRig(load_profile(PROFILES / "sim-2dof.toml"))
    names = [c.name for c in rig.inputs]

    def cols(role: str) -> list[int]:
        return [names.index(f"{role}_{i}") for i in (1, 2)]

    home = np.radians([40.0, 30.0])
    n = int(seconds / rig.period)
    rows = np.zeros((n, len(names)))
    eng = rig.eng
    for k in range(n):
        t = k * rig.period
        ref = home + np.radians([5.0, 4.0]) * np.array(
            [np.sin(2 * np.pi * 0.7 * t), np.sin(2 * np.pi * 1.1 * t + 1.0)]
        )
        rows[k] = eng
        eng = rig.step(2.0 * (ref - eng[cols("q")]))
    m = Measured(
        np.arange(n) * rig.period,
        rows[:, cols("q")],
        rows[:, cols("p_cap")],
        rows[:, cols("p_rod")],
        rows[:, cols("spool")],
        rows[:, cols("piston")],
    )
    return rig, m


def test_true_parameters_validate_with_high_fit() -> None:
    rig, m = _validation_run()
    r = validate(rig.true_params, rig.period, m)
    for key in ("q1", "q2", "s1", "s2"):
        assert r.fit[key] >= 95.0, (key, r.fit[key])
    for key in ("p_cap1", "p_cap2", "p_rod1", "p_rod2"):
        assert r.fit[key] >= 90.0, (key, r.fit[key])
    # Torque residuals are a few percent of the gravity load (~84 N·m on joint 1).
    assert r.torque_rms[0] < 15.0 and r.torque_rms[1] < 8.0


def test_wrong_parameters_lower_the_fit() -> None:
    """The check can fail: a bulk modulus off by 3× and flow gains off by 20 % show."""
    rig, m = _validation_run(4.0)
    good = validate(rig.true_params, rig.period, m)
    theta = rig.true_params.theta_fluid() * 1.2
    theta[0] *= 3.0
    bad = validate(rig.true_params.with_identified(theta_fluid=theta), rig.period, m)
    assert bad.fit["p_cap1"] < good.fit["p_cap1"] - 5.0
    assert bad.fit["q1"] < good.fit["q1"]


def test_simulation_restarts_from_the_measured_state_each_window() -> None:
    rig, m = _validation_run(4.0)
    r = validate(rig.true_params, rig.period, m, window_s=1.0)
    for k0 in (0, 1000, 2000, 3000):  # window starts: the model is put on the measurement
        np.testing.assert_array_equal(r.simulated["p_cap"][k0], m.p_cap[k0])
        np.testing.assert_array_equal(r.simulated["q"][k0], m.q[k0])
    # …and in between it runs free: one sample later it differs.
    assert not np.array_equal(r.simulated["p_cap"][1001], m.p_cap[1001])


def test_measured_head_is_the_first_rows_of_every_signal() -> None:
    from estimator.validation import Measured

    rows = np.arange(20.0).reshape(10, 2)
    m = Measured(rows[:, 0], rows, rows + 1, rows + 2, rows + 3, rows + 4)
    h = m.head(4)
    for name in ("q", "p_cap", "p_rod", "spool", "piston"):
        assert np.array_equal(getattr(h, name), getattr(m, name)[:4]), name
    assert np.array_equal(h.t, m.t[:4])
    assert Measured(m.t, m.q, m.p_cap, m.p_rod, m.spool).head(3).piston is None
