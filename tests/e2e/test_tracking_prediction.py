"""The tracking check's prediction (rigctl.tracking_check): the PID-only sine simulated in closed
loop with the loaded model says how close to the following-error interlock the check will run,
and the check lowers its amplitude where that is too close — a healthy rig whose plant is far
from the reference must not fault on its own demonstration."""

from __future__ import annotations

import copy
import tomllib

import numpy as np
import pytest

from daq.profile import parse_profile
from daq.profile.plant import sim_plant
from daq.sim_closed_loop import SimLoop
from estimator.validation_closed_loop import control_setup
from rigctl.tracking_check import (
    AMPLITUDE_DEG,
    MARGIN,
    predicted_margin,
    safe_amplitude,
    sine_experiment,
)
from tests.conftest import PROFILES

BASE = tomllib.loads((PROFILES / "sim-2dof.toml").read_text())


def _profile(flow_factor: float = 1.0) -> object:
    data = copy.deepcopy(BASE)
    for j in data["backend"]["sim"]["plant"]["joints"]:
        j["flow_gains"] = [flow_factor * g for g in j["flow_gains"]]
    return parse_profile(data)


def _measured_margin(prof: object, amplitude_deg: float) -> list[float]:
    """The same ratio measured on the simulator through the loop's own data path (noise on)."""
    home = [j.home_deg for j in prof.joints]  # type: ignore[attr-defined]
    setup = control_setup(prof, sine_experiment(home, "pid", amplitude_deg))
    loop = SimLoop(prof)  # type: ignore[arg-type]
    runner = setup.runner(prof.period)  # type: ignore[attr-defined]
    _, ref, q = loop.run(runner, runner.total_duration + 0.5)
    period = prof.period  # type: ignore[attr-defined]
    vel = np.abs(np.diff(ref, axis=0, prepend=ref[:1])) / period
    lim = [j.limits for j in prof.joints]  # type: ignore[attr-defined]
    base = np.radians([x.following_error_deg for x in lim])
    per_v = np.array([x.following_error_per_velocity_s for x in lim])
    return list(np.max(np.abs(ref - q) / (base + per_v * vel), axis=0))


def test_the_prediction_matches_the_loop() -> None:
    """Predicted with the plant's own parameters, measured through the loop's data path."""
    prof = _profile(0.7)
    params, _ = sim_plant(prof)
    predicted = predicted_margin(prof, params, AMPLITUDE_DEG)
    measured = _measured_margin(prof, AMPLITUDE_DEG)
    assert predicted == pytest.approx(measured, rel=0.15)


def test_the_reference_rig_runs_the_full_sine() -> None:
    prof = _profile()
    params, _ = sim_plant(prof)
    assert max(predicted_margin(prof, params, AMPLITUDE_DEG)) < MARGIN
    assert safe_amplitude(prof, params) == (AMPLITUDE_DEG, "")


def test_a_slow_valve_gets_a_smaller_sine_inside_the_margin() -> None:
    """Flow gains at half the reference: the 5° sine is predicted past the interlock's limit;
    the check runs a smaller one predicted inside the margin, and says why."""
    prof = _profile(0.5)
    params, _ = sim_plant(prof)
    assert max(predicted_margin(prof, params, AMPLITUDE_DEG)) > 1.0
    amplitude, why = safe_amplitude(prof, params)
    assert 0.5 < amplitude < AMPLITUDE_DEG
    assert max(predicted_margin(prof, params, amplitude)) <= MARGIN
    assert "following-error limit" in why and f"{amplitude:.2f}°" in why
