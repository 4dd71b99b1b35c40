"""Closed-loop validation (DIDIM's simulation, estimator.validation_closed_loop): the simulator's
own true plant, every effect on, replayed with the run's controller, reproduces the run; a wrong
model does not.

The run is made by the loop's own data path (`daq.sim_closed_loop.SimLoop`) on the realistic
profile with its sensors ideal (no noise, no calibration error): what remains between the run and
its replay is then the validation path's own error, which must be nil.
"""

from __future__ import annotations

import copy
import dataclasses
import tomllib

import numpy as np
import pytest

from daq.profile import parse_profile
from daq.profile.plant import sim_plant
from daq.service.control_api import make_hold_runner
from daq.sim_closed_loop import SimLoop
from estimator.validation import Measured
from estimator.validation_closed_loop import (
    control_setup,
    initial_velocity,
    simulate_closed_loop,
    validate_closed_loop,
)
from tests.conftest import PROFILES

ROOT = PROFILES.parent
SETTLE_S = 2.0
SECONDS = 30.0  # the whole validation experiment: approach, multisine, 3 Hz valve sine


def _ideal_realistic() -> object:
    data = tomllib.loads((PROFILES / "sim-2dof-realistic.toml").read_text())
    data = copy.deepcopy(data)
    for c in data["channels"]:
        c.pop("sim_error", None)
        c["sim_noise"] = 0.0
    return parse_profile(data)


@pytest.fixture(scope="module")
def run() -> dict:
    prof = _ideal_realistic()
    exp = tomllib.loads((ROOT / "experiments" / "validation-2dof.toml").read_text())
    setup = control_setup(prof, exp)
    loop = SimLoop(prof)
    runner = setup.runner(prof.period)
    steps = round(SECONDS / prof.period)
    n = len(prof.joints)  # type: ignore[attr-defined]
    names = ("q", "p_cap", "p_rod", "spool", "piston")
    rec = {k: np.zeros((steps, n)) for k in names}
    true = np.zeros((steps, 5 * n))
    # As on the service: the arm held ARMED (PID hold) before the run starts, not released
    # from the simulator's initial state.
    _, _, q_held = loop.run(make_hold_runner(prof, setup.gains), SETTLE_S)
    oil_c = loop.rig.backend.true_oil_temperature()
    runner.enable(loop.fb)
    for k in range(steps):
        for key in names:
            rec[key][k] = getattr(loop.fb, key)
        true[k] = loop.rig.backend.true_state()
        runner.step(loop.fb, loop.ref, loop.volts)
        np.clip(loop.volts, setup.v_lo, setup.v_hi, out=loop.volts)  # the interlocks' clamp
        loop.map.to_channels(loop.volts, loop.out)
        loop.map.fill(loop.rig.step(loop.out), loop.fb, loop.rig.t)
    t = np.arange(steps) * prof.period  # type: ignore[attr-defined]
    m = Measured(t, rec["q"], rec["p_cap"], rec["p_rod"], rec["spool"], rec["piston"])
    both = np.vstack([q_held, rec["q"]])
    qd0 = initial_velocity(both, len(q_held), prof.period)  # type: ignore[attr-defined]
    return {
        "profile": prof,
        "setup": setup,
        "measured": m,
        "true": true,
        "oil_c": oil_c,
        "qd0": qd0,
    }


def test_the_true_plant_replays_its_own_run_exactly(run: dict) -> None:
    """From the run's true initial state the replay is the run, cycle for cycle: same runner,
    same clamp, same converter resolution, same integrator."""
    prof = run["profile"]
    params, effects = sim_plant(prof)
    states, _, _ = simulate_closed_loop(
        params,
        prof.period,
        run["true"][0],
        run["setup"],
        run["true"].shape[0],
        effects,
        run["oil_c"],
    )
    assert np.abs(states - run["true"]).max() == pytest.approx(0.0, abs=1e-9)


def test_validation_of_the_true_plant_scores_its_truth(run: dict) -> None:
    """Through the whole path (initial state from the measured channels): FIT ≥ 99 % on every
    output — the yardstick that the open-loop replay fails on this plant."""
    prof = run["profile"]
    params, effects = sim_plant(prof)
    r = validate_closed_loop(
        params, prof.period, run["measured"], run["setup"], effects, run["oil_c"], run["qd0"]
    )
    assert set(r.fit) == {f"{o}{j}" for o in ("q", "u", "p_cap", "p_rod", "s") for j in (1, 2)}
    worst = min(r.fit, key=lambda k: r.fit[k])
    assert r.fit[worst] >= 99.0, f"{worst}: {r.fit[worst]:.2f} % (all: {sorted(r.fit.items())})"


def test_a_wrong_model_scores_lower(run: dict) -> None:
    """The same path judges a model: flow gains 25 % high lose FIT on the pressures/spool."""
    prof = run["profile"]
    params, effects = sim_plant(prof)
    truth = validate_closed_loop(
        params, prof.period, run["measured"], run["setup"], effects, run["oil_c"], run["qd0"]
    )
    wrong = dataclasses.replace(params, flow_gains=1.25 * params.flow_gains)
    r = validate_closed_loop(
        wrong, prof.period, run["measured"], run["setup"], effects, run["oil_c"], run["qd0"]
    )
    assert r.worst[1] < truth.worst[1] - 5.0, (r.fit, truth.fit)


def test_recorded_gains_override_the_profile(run: dict) -> None:
    """The gains a run recorded (set_gains between runs) are the ones replayed."""
    prof = run["profile"]
    exp = tomllib.loads((ROOT / "experiments" / "validation-2dof.toml").read_text())
    exp.pop("pid")
    setup = control_setup(prof, exp, gains=[{"p": 0.7}, {"p": 0.9}])
    assert [g.p for g in setup.gains] == [0.7, 0.9]
