"""Lin eq. 37's gravity + friction PD with Lin's Coulomb terms (seed 001 eq. 20), the friction
taken from a parameter file identified on the realistic simulated rig (never its truth)."""

from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest

from controller.experiment import Experiment
from controller.feedforward import COULOMB_SMOOTH_M_S, PlantModel
from controller.plant.params import PlantParams
from controller.runner import ExperimentRunner
from daq.param_set import read_param_set
from daq.profile import load_profile
from daq.sim_closed_loop import SimLoop, gains_limits, rms_deg, sine_experiment
from estimator.models_lin import SMOOTH_SIGN_M_S
from tests.conftest import PROFILES
from tests.params.conftest import write_params

LIN_FILE = Path(__file__).parent / "data" / "sim2dofreal-lin-params.toml"
REALISTIC = "sim-2dof-realistic.toml"
# Gains for the realistic plant: kp stiff enough that the seals' Coulomb band (~40 N·m at
# r ≈ 0.1 m) is a fraction of a degree, the force loop kf well inside its stability range.
GAINS = {"kind": "gravity_pd", "kp": [5000.0] * 2, "kd": [200.0] * 2, "kf": [5e-4] * 2}


def _lin_params() -> PlantParams:
    profile = load_profile(PROFILES / REALISTIC)
    return read_param_set(LIN_FILE, profile).params  # as the service loads it


def test_the_lin_file_carries_its_identified_friction_and_the_reference_file_none(
    tmp_path: Path,
) -> None:
    params = _lin_params()
    data = tomllib.loads(LIN_FILE.read_text())["models"]["mechanical_lin"]
    theta = dict(zip(data["names"], data["theta"], strict=True))
    assert params.friction_lin is not None
    for i in range(2):
        want = [theta[f"{k}{i + 1}"] for k in ("Fv+", "Fv-", "Fc+", "Fc-")]
        assert params.friction_lin[i] == pytest.approx([max(w, 0.0) for w in want])
    ref = write_params(tmp_path / "ref.toml", "sim-2dof.toml")
    ref_params = read_param_set(ref, load_profile(PROFILES / "sim-2dof.toml")).params
    assert ref_params.friction_lin is None  # the reference model: viscous Fv only, as before
    m = PlantModel(ref_params)
    tau = [0.0, 0.0]
    m.gravity_friction([0.7, 0.5], [0.3, -0.2], tau)
    g = ref_params.gravity
    g12 = ref_params.gravity_moment[1] * g * math.sin(1.2)
    assert tau[1] == pytest.approx(g12 + ref_params.viscous_friction[1] * -0.2)


def test_the_coulomb_term_is_lins_smooth_sign_of_the_piston_velocity() -> None:
    assert COULOMB_SMOOTH_M_S == SMOOTH_SIGN_M_S  # compensated exactly as identified
    params = _lin_params()
    m = PlantModel(params)
    assert params.friction_lin is not None
    fv_p, fv_m, fc_p, fc_m = params.friction_lin[0]
    q = 0.7
    _, r = m.cylinder(0, q)
    for qd in (0.5, -0.5, 1e-3, -1e-3):
        fv, fc = (fv_p, fc_p) if qd >= 0 else (fv_m, fc_m)
        want = fv * qd + fc * r * math.tanh(r * qd / SMOOTH_SIGN_M_S)
        assert m.friction(0, q, qd) == pytest.approx(want, rel=1e-12)
    assert m.friction(0, q, 0.0) == 0.0  # no torque demanded at rest (smooth zero region)


def _track(params: PlantParams) -> list[float]:
    p = load_profile(PROFILES / REALISTIC)
    d = sine_experiment(p, GAINS, seconds=3.0, amp_deg=5.0, freq=0.5)
    d["pid"] = {"p": 1.5}
    r = ExperimentRunner(Experiment.from_dict(d), *gains_limits(p), p.period, params)
    _, ref, q = SimLoop(p).run(r, 3.0)
    return rms_deg(ref, q, skip=1000)


def test_coulomb_compensation_tracks_better_on_the_realistic_plant() -> None:
    """The realistic simulator has asymmetric Coulomb + Stribeck seal friction
    (hw_profiles/sim-2dof-realistic.toml); with the identified Fc± compensated the PD tracks a
    0.5 Hz 5° sine with at most 0.8× the RMS error of the same PD compensating viscous friction
    only (measured 0.63/0.52° against 1.06/0.74°)."""
    lin = _lin_params()
    viscous_only = dataclasses.replace(lin, friction_lin=None)
    with_fc, without = _track(lin), _track(viscous_only)
    for j in range(2):
        assert with_fc[j] <= 0.8 * without[j], (with_fc, without)
    assert max(with_fc) < 1.0 and np.isfinite(without).all()
