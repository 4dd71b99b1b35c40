"""Trajectories: the loop's scalar `eval` matches the vectorised `sample`, derivatives are
consistent, MFS meet their boundary conditions, moves respect their limits."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller import moves
from controller import trajectories as tr


def _all_kinds() -> list[tr.Trajectory]:
    rng = np.random.default_rng(0)
    a, b = tr.mfs_coefficients(rng.standard_normal((2, 4)) * 0.1, rng.standard_normal((2, 3)) * 0.1)
    return [
        tr.Hold([0.7, 0.5], 1.0),
        tr.sine([0.7, 0.5], [0.1, 0.05], [1.0, 2.0], [0.0, 0.3]),
        tr.multisine([0.7, 0.5], [[0.5, 1.0, 2.0], [0.3, 0.9, 1.7]], [[0.1, 0.05, 0.01]] * 2),
        tr.chirp([0.7, 0.5], [0.05, 0.02], 0.2, 3.0, 5.0),
        tr.fourier_series(
            [0.7, 0.5], 0.2, rng.standard_normal((2, 4)) * 0.1, rng.standard_normal((2, 4)) * 0.1
        ),
        tr.modified_fourier_series([0.7, 0.5], 0.1, a, b),
        moves.trapezoid([0.7, 0.5], [0.9, 0.2], [0.5, 0.4], [3.0, 2.0]),
        moves.sweep([0.7, 0.5], 1, 0.1, 0.8, 0.5, 4.0, cycles=2),
    ]


@pytest.mark.parametrize("traj", _all_kinds(), ids=lambda t: type(t).__name__)
def test_eval_matches_sample_and_derivatives_are_consistent(traj: tr.Trajectory) -> None:
    dur = traj.duration or 1.0
    t = np.linspace(0.0, dur, 4001)
    q, qd, qdd = traj.sample(t)
    qe, qde, qdde = np.zeros(traj.n), np.zeros(traj.n), np.zeros(traj.n)
    for k in range(0, t.size, 97):
        traj.eval(float(t[k]), qe, qde, qdde)
        np.testing.assert_allclose(qe, q[k], atol=1e-12)
        np.testing.assert_allclose(qde, qd[k], atol=1e-10)
        np.testing.assert_allclose(qdde, qdd[k], atol=1e-9)
    h = t[1] - t[0]
    # Velocity integrates to position; acceleration integrates to velocity (trapezoid rule).
    np.testing.assert_allclose(
        q[0] + np.cumsum((qd[1:] + qd[:-1]) * h / 2, axis=0), q[1:], atol=1e-4
    )
    # (moves switch acceleration a few times: each switch costs at most h·|q̈| here)
    np.testing.assert_allclose(
        qd[0] + np.cumsum((qdd[1:] + qdd[:-1]) * h / 2, axis=0),
        qd[1:],
        atol=1e-3 + 12 * h * np.abs(qdd).max(),
    )
    np.testing.assert_allclose(traj.start(), q[0], atol=1e-12)


@settings(max_examples=50, deadline=None)
@given(
    n_h=st.integers(3, 8),
    base=st.floats(0.05, 2.0),
    seed=st.integers(0, 2**32 - 1),
    c=st.lists(st.floats(-1, 1), min_size=1, max_size=2),
)
def test_mfs_starts_and_ends_at_rest(n_h: int, base: float, seed: int, c: list[float]) -> None:
    rng = np.random.default_rng(seed)
    n = len(c)
    a, b = tr.mfs_coefficients(rng.standard_normal((n, n_h - 1)), rng.standard_normal((n, n_h - 2)))
    m = tr.modified_fourier_series(c, base, a, b)
    q, qd, qdd = m.sample(np.array([0.0, 1.0 / base]))
    scale = 1.0 + np.abs(a).max() + np.abs(b).max()
    np.testing.assert_allclose(q, [c, c], atol=1e-9 * scale)
    np.testing.assert_allclose(qd, 0.0, atol=1e-9 * scale)
    np.testing.assert_allclose(qdd, 0.0, atol=1e-8 * scale * base * n_h)
    # ... and the motion is not trivial
    qm, _, _ = m.sample(np.linspace(0, 1 / base, 50))
    assert np.ptp(qm, axis=0).min() > 0


def test_mfs_rejects_coefficients_off_the_boundary_conditions() -> None:
    a = np.array([[1.0, 0.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="boundary conditions"):
        tr.modified_fourier_series([0.0], 0.1, a, a)


def test_mfs_projects_rounded_coefficients() -> None:
    a, b = tr.mfs_coefficients(np.array([[0.3, -0.2, 0.5]]), np.array([[0.4, 0.1]]))
    m = tr.modified_fourier_series([0.5], 0.2, np.round(a, 5), np.round(b, 5), tolerance=1e-4)
    q, qd, _ = m.sample(np.array([0.0, 5.0]))
    np.testing.assert_allclose(qd, 0.0, atol=1e-12)
    np.testing.assert_allclose(q, 0.5, atol=1e-12)


def test_fourier_series_is_not_at_rest_in_general() -> None:
    f = tr.fourier_series([0.0], 0.5, np.array([[0.2, 0.1]]), np.array([[0.3, 0.0]]))
    _, qd, _ = f.sample(np.array([0.0]))
    assert abs(qd[0, 0]) > 0.1


def test_trapezoid_respects_velocity_and_acceleration() -> None:
    m = moves.trapezoid([0.0, 0.0], [1.0, -0.01], [0.5, 0.5], [2.0, 2.0])
    t = np.linspace(0, m.duration + 0.5, 20001)
    q, qd, qdd = m.sample(t)
    assert np.abs(qd).max() <= 0.5 + 1e-12 and np.abs(qdd).max() <= 2.0 + 1e-12
    np.testing.assert_allclose(q[-1], [1.0, -0.01], atol=1e-12)
    np.testing.assert_allclose(qd[-1], 0.0, atol=1e-12)
    assert m.duration == pytest.approx(1.0 / 0.5 + 0.5 / 2.0)  # d/v + v/a
    assert np.abs(qd[:, 1]).max() < 0.5  # short move: triangular profile


def test_sweep_runs_both_directions_at_constant_velocity() -> None:
    s = moves.sweep([0.5, 0.3], 0, 0.1, 0.9, 0.4, 4.0)
    t = np.linspace(0, s.duration, 20001)
    q, qd, _ = s.sample(t)
    assert np.allclose(q[:, 1], 0.3) and np.allclose(qd[:, 1], 0.0)
    cruise_up = np.isclose(qd[:, 0], 0.4).mean()
    cruise_down = np.isclose(qd[:, 0], -0.4).mean()
    assert cruise_up > 0.3 and cruise_down > 0.3
    assert q[:, 0].max() == pytest.approx(0.9) and q[:, 0].min() == pytest.approx(0.1)
    np.testing.assert_allclose(q[-1], [0.5, 0.3], atol=1e-12)


def test_replan_in_place() -> None:
    m = moves.trapezoid([0.0], [1.0], [0.5], [2.0])
    m.replan(np.array([1.0]), np.array([0.5]))
    q, _, _ = m.sample(np.array([0.0, m.duration]))
    np.testing.assert_allclose(q[:, 0], [1.0, 0.5])


def test_chirp_sweeps_frequency() -> None:
    c = tr.chirp([0.0], [1.0], 1.0, 5.0, 4.0)
    t = np.linspace(0, 4.0, 400001)
    q, qd, _ = c.sample(t)
    zc = t[np.where(np.diff(np.sign(q[1:, 0])) != 0)[0] + 1]
    # Zero crossings where the phase f0·t + k·t²/2 is a multiple of 1/2 (k = (f1 − f0)/T).
    phase = 1.0 * zc + 0.5 * 1.0 * zc**2
    np.testing.assert_allclose(phase * 2, np.round(phase * 2), atol=1e-3)
    assert len(zc) == round(2 * (1.0 * 4.0 + 0.5 * 4.0**2)) - 1
    # Peak velocity grows with frequency: A·2πf.
    assert np.abs(qd[-2000:, 0]).max() == pytest.approx(2 * np.pi * 5.0, rel=0.01)


def test_bad_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="amplitude"):
        tr.sine([0.0, 0.0], [0.1], [1.0, 1.0])
    with pytest.raises(ValueError, match="frequency_hz must be > 0"):
        tr.sine([0.0], [0.1], [0.0])
    with pytest.raises(ValueError, match="at least 3 harmonics"):
        tr.mfs_basis(2)
    with pytest.raises(ValueError, match="low < center < high"):
        moves.sweep([0.5], 0, 0.6, 0.9, 0.1, 1.0)
    with pytest.raises(ValueError, match="chirp"):
        tr.chirp([0.0], [0.1], 0.0, 1.0, 1.0)
    assert math.isfinite(tr.multisine([0.0], [[1.0]], [[0.1]]).duration)
