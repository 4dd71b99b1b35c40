"""The simulator against a scipy reference on the same equations (issue: simulator accuracy).

A proportional law on the *measured* joint angles tracks 5°, 1 Hz sines around the home pose
for 10 s; the valve commands it produced, held constant over each cycle, then drive `solve_ivp`
(rtol 1e-9). The simulator's true states must stay within 0.05° and 20 kPa of the reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from controller.plant import dynamics
from daq.backends.sim import SimRig
from daq.profile import load_profile
from daq.scaling import counts_to_units, units_to_counts
from tests.conftest import PROFILES

SECONDS = 10.0


def _run_sim(profile_path):  # type: ignore[no-untyped-def]
    profile = load_profile(profile_path)
    rig = SimRig(profile)
    n = rig.true_params.n
    q_idx = [rig.index(f"q_{i + 1}") for i in range(n)]
    home = np.radians([j.home_deg for j in profile.joints])
    amp = np.radians(5.0)
    steps = int(SECONDS / rig.period)
    volts = np.zeros((steps, n))
    states = np.zeros((steps + 1, 5 * n))
    states[0] = rig.backend.true_state()
    eng = rig.eng
    for k in range(steps):
        t = k * rig.period
        ref = home + amp * np.sin(2 * np.pi * 1.0 * t)
        command = 2.0 * (ref - eng[q_idx])
        eng = rig.step(command)
        # What the plant saw: the command through the 12-bit D/A, held for the cycle.
        volts[k] = [
            counts_to_units(c.converter, units_to_counts(c.converter, float(u)))
            for c, u in zip(rig.outputs, command, strict=True)
        ]
        states[k + 1] = rig.backend.true_state()
    return rig, volts, states


@pytest.mark.parametrize("name", ["sim-2dof.toml", "sim-1dof.toml"])
def test_simulator_matches_solve_ivp_reference(name: str) -> None:
    rig, volts, states = _run_sim(PROFILES / name)
    params = rig.true_params
    n = params.n
    # The run must stay off the end stops and inside the pressure bounds, where the reference
    # equations (no constraints) are the same model.
    s, _ = dynamics.cylinder(params, states[:, :n])
    assert np.abs(s).max() < 0.9 * params.stroke.min() / 2
    assert states[:, 2 * n : 4 * n].min() > 0.0
    assert states[:, 2 * n : 4 * n].max() < params.supply_pressure

    x = states[0].copy()
    dt = rig.period
    worst_q = 0.0
    worst_p = 0.0
    for k in range(volts.shape[0]):
        v = volts[k]
        sol = solve_ivp(
            lambda _t, y, v=v: dynamics.state_derivative(params, y, v),
            (0.0, dt),
            x,
            method="DOP853",
            rtol=1e-9,
            atol=1e-12,
        )
        x = sol.y[:, -1]
        worst_q = max(worst_q, float(np.abs(np.degrees(states[k + 1, :n] - x[:n])).max()))
        worst_p = max(worst_p, float(np.abs(states[k + 1, 2 * n : 4 * n] - x[2 * n : 4 * n]).max()))
    assert worst_q < 0.05, f"joint error {worst_q:.4f} deg"
    assert worst_p < 20e3, f"pressure error {worst_p:.0f} Pa"
    # The excitation really moved the arm (a test of nothing would pass trivially).
    assert np.degrees(np.ptp(states[:, 0])) > 5.0
