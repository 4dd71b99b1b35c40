"""No command sequence breaks the simulator (issue: simulator robustness), on the nominal plant
and with every effect beyond the model on (hw_profiles/sim-2dof-realistic.toml)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.plant import dynamics
from daq.backends.sim import SimRig
from daq.profile import load_profile
from tests.conftest import PROFILES

PROFILE = load_profile(PROFILES / "sim-2dof.toml")
REALISTIC = load_profile(PROFILES / "sim-2dof-realistic.toml")

# A command program: segments of (kind, volts, cycles); bang-bang ±10 V drives the pistons
# into the end stops and the chambers to supply pressure and cavitation.
segment = st.tuples(
    st.sampled_from(["hold", "bang", "random", "sine"]),
    st.floats(-10.0, 10.0),
    st.floats(-10.0, 10.0),
    st.integers(1, 800),
)


@pytest.mark.parametrize("profile", [PROFILE, REALISTIC], ids=["nominal", "realistic"])
@settings(max_examples=25, deadline=None)
@given(program=st.lists(segment, min_size=1, max_size=8), seed=st.integers(0, 2**16))
def test_states_stay_physical_for_any_commands(profile, program, seed) -> None:  # type: ignore[no-untyped-def]
    rig = SimRig(profile)
    p = rig.true_params
    fx = rig.backend.true_effects
    t_low = min(fx.initial_c, fx.ambient_c) - 1e-9
    n = p.n
    rng = np.random.default_rng(seed)
    half = p.stroke / 2
    for kind, a, b, cycles in program:
        for k in range(cycles):
            if kind == "hold":
                v = np.array([a, b])
            elif kind == "bang":
                v = np.where(rng.random(2) < 0.5, -10.0, 10.0)
            elif kind == "random":
                v = rng.uniform(-10.0, 10.0, 2)
            else:
                v = np.array([a, b]) * np.sin(2 * np.pi * 5.0 * k * rig.period)
            rig.step(v)
            x = rig.backend.true_state()
            assert np.isfinite(x).all()
            pressures = x[2 * n : 4 * n]
            assert pressures.min() >= 0.0
            assert pressures.max() <= 1.1 * p.supply_pressure
            s, _ = dynamics.cylinder(p, x[:n])
            assert (np.abs(s) <= half + 1e-9).all()
            assert np.isfinite(rig.eng).all()
            # Oil is only heated by losses and cooled towards ambient; never below either start.
            temp = rig.backend.true_oil_temperature()
            assert math.isfinite(temp) and t_low <= temp < 150.0


@pytest.mark.parametrize("profile", [PROFILE, REALISTIC], ids=["nominal", "realistic"])
def test_bang_bang_reaches_the_end_stops_and_stays_there(profile) -> None:  # type: ignore[no-untyped-def]
    """The stops really act: full command for 2 s parks both pistons on a stop."""
    rig = SimRig(profile)
    p = rig.true_params
    for _ in range(2000):
        rig.step(np.array([10.0, -10.0]))
    s, _ = dynamics.cylinder(p, rig.backend.true_state()[: p.n])
    np.testing.assert_allclose(np.abs(s), p.stroke / 2, rtol=1e-6)
