"""The closed-loop replay's compiled sensing and valve write (`estimator.validation_closed_loop`)
against the per-field Python arithmetic they replace: every value bit-equal, with the true
sensors' errors, a calibration, the run's noise, a wrapping resolver, a saturating converter and
a joint without a channel."""

from __future__ import annotations

import dataclasses
import tomllib

import numpy as np

from controller.feedback import Feedback
from controller.plant.dynamics import piston
from daq.profile import parse_profile
from daq.profile.plant import sim_plant
from estimator.validation_closed_loop import (
    SENSED,
    SensorFrame,
    _sensing,
    _sensing_python,
    _write_valves,
    control_setup,
)
from tests.conftest import PROFILES

ROOT = PROFILES.parent


def _setup():
    prof = parse_profile(tomllib.loads((PROFILES / "sim-2dof-realistic.toml").read_text()))
    exp = tomllib.loads((ROOT / "experiments" / "validation-2dof.toml").read_text())
    setup = control_setup(prof, exp)
    n = len(prof.joints)
    rng = np.random.default_rng(7)
    frames = {
        name: SensorFrame(
            1.0 + 0.01 * rng.standard_normal(n),
            0.02 * rng.standard_normal(n),
            1.0 + 0.01 * rng.standard_normal(n),
            0.02 * rng.standard_normal(n),
        )
        for name in ("q", "p_cap", "spool")
    }
    sensing = dict(setup.sensing)
    # Joint 2 has no cap transducer: the loop's Feedback keeps NaN there.
    sensing["p_cap"].missing[1] = True
    return prof, dataclasses.replace(setup, sensors=frames, sensing=sensing), n


def _states(prof, n: int, rng: np.random.Generator, rows: int) -> np.ndarray:
    x = np.zeros((rows, 5 * n + 1))
    x[:, :n] = rng.uniform(0.2, 1.2, (rows, n))
    x[:, 2 * n : 4 * n] = rng.uniform(-1e6, 30e6, (rows, 2 * n))  # some beyond the range
    x[:, 4 * n : 5 * n] = rng.uniform(-12.0, 12.0, (rows, n))  # some beyond the LVDT's
    x[0, 0] = 2 * np.pi + 0.3  # past a resolver's turn: it wraps
    x[1, 2 * n] = np.nan  # a diverged state stays NaN
    return x


def test_compiled_sensing_equals_the_per_field_arithmetic() -> None:
    prof, setup, n = _setup()
    params, _ = sim_plant(prof)
    P = params.pack()
    rng = np.random.default_rng(3)
    rows = 200
    xs = _states(prof, n, rng, rows)
    noise = {name: 1e-3 * rng.standard_normal((rows, n)) for name in ("q", "p_rod", "spool")}
    noise["p_rod"] *= 1e7
    for sensor_noise in (None, noise):
        fb_c, fb_p = Feedback(n), Feedback(n)
        x = np.empty(5 * n + 1)
        sense_c = _sensing(fb_c, x, P, n, prof.period, setup, sensor_noise, rows)
        sense_p = _sensing_python(fb_p, x, P, n, prof.period, setup, sensor_noise)
        for k in range(rows):
            x[:] = xs[k]
            sense_c(k)
            sense_p(k)
            assert fb_c.t == fb_p.t == k * prof.period
            for name in SENSED:
                a, b = getattr(fb_c, name), getattr(fb_p, name)
                assert np.array_equal(a, b, equal_nan=True), (k, name, a, b)
        # What it computes is the readings, not the state: the frames and converters act.
        assert not np.array_equal(fb_c.q, x[:n])
        assert np.isnan(fb_c.p_cap[1]) and np.isfinite(fb_c.p_cap[0])
        assert abs(fb_c.piston[0] - piston(P, 0, x[0])[0]) < 1e-3


def test_compiled_valve_write_equals_the_clamp_and_the_converter() -> None:
    _, setup, n = _setup()
    rng = np.random.default_rng(5)
    rows = 500
    refs, cmds = np.zeros((rows, n)), np.zeros((rows, n))
    for k in range(rows):
        volts = rng.uniform(-15.0, 15.0, n)
        if k == 3:
            volts[0] = np.nan
        ref = rng.standard_normal(n)
        want = np.clip(volts, setup.v_lo, setup.v_hi)
        want = np.floor((want - setup.v_min) / setup.v_lsb + 0.5)
        want *= setup.v_lsb
        want += setup.v_min
        _write_valves(k, ref, volts, setup.v_lo, setup.v_hi, setup.v_min, setup.v_lsb, refs, cmds)
        assert np.array_equal(volts, want, equal_nan=True), (k, volts, want)
        assert np.array_equal(cmds[k], want, equal_nan=True) and np.array_equal(refs[k], ref)
    assert np.isnan(cmds[3, 0])
    # Clamped, then to the nearest code: at most half a step past the clamp.
    ok = np.isfinite(cmds)
    assert (cmds <= setup.v_hi + 0.5 * setup.v_lsb)[ok].all()
    assert (cmds >= setup.v_lo - 0.5 * setup.v_lsb)[ok].all()
