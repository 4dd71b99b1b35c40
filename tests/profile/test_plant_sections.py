"""The plant's profile sections: known geometry vs the simulator's truth, and the effects beyond
the model refused at load when malformed or physically impossible (message names the key)."""

from __future__ import annotations

import copy
import json
import math
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daq.profile import ProfileError, load_profile, parse_profile, plant_params
from daq.profile.plant import has_identified_values, known_params, sim_plant
from rigctl.main import main
from tests.conftest import PROFILES
from tests.report.simrun import record_sim_run

REALISTIC = tomllib.loads((PROFILES / "sim-2dof-realistic.toml").read_text())


def _with(path: str, value: Any) -> dict[str, Any]:
    """The realistic profile with one key (dotted path, [i] for list items) set to value."""
    data = copy.deepcopy(REALISTIC)
    node: Any = data
    parts = path.replace("]", "").replace("[", ".").split(".")
    for p in parts[:-1]:
        node = node[int(p)] if p.isdigit() else node[p]
    node[parts[-1]] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "fragments"),
    [
        (
            "backend.sim.plant.joints[0].leakage.internal_m3_s_per_pa",
            -1e-12,
            ["backend.sim.plant.joints[0].leakage.internal_m3_s_per_pa", "greater than or equal"],
        ),
        (
            "backend.sim.plant.joints[1].leakage.external_m3_s_per_pa",
            -1e-13,
            ["joints[1].leakage.external_m3_s_per_pa"],
        ),
        (
            "backend.sim.plant.joints[0].friction.stiction_pos_n",
            100.0,
            ["backend.sim.plant.joints[0].friction", "stiction_pos_n (100.0) must be ≥ coulomb"],
        ),
        ("backend.sim.plant.fluid.air_content", 1.0, ["backend.sim.plant.fluid.air_content"]),
        ("backend.sim.plant.fluid.polytropic_index", 2.0, ["fluid.polytropic_index"]),
        ("backend.sim.plant.thermal.heat_capacity_j_per_k", 0.0, ["thermal.heat_capacity_j_per_k"]),
        ("backend.sim.plant.joints[0].valve.lap_v", 0.9, ["joints[0].valve.lap_v"]),
        (
            "backend.sim.plant.joints[0].friction.smoothing_velocity_m_s",
            1e-6,
            ["friction.smoothing_velocity_m_s"],
        ),
        ("backend.sim.plant.joints[0].dead_volume_cap", -1e-5, ["joints[0].dead_volume_cap"]),
        ("backend.sim.plant.joints[0].friction.stiction", 1.0, ["unknown key", "stiction_pos_n"]),
        ("channels[0].sim_error.gain_error", 0.7, ["channels[0:p_cap_1].sim_error.gain_error"]),
        ("backend.sim.plant.joints[0].leakage.internal_m3_s_per_pa", "1e-12", ["valid number"]),
        ("plant.oil.viscosity_100c_cst", 60.0, ["plant.oil", "must exceed viscosity_100c_cst"]),
        ("plant.oil.bulk_modulus_per_k", -0.01, ["plant.oil.bulk_modulus_per_k"]),
    ],
)
def test_impossible_effects_are_refused_naming_the_key(
    path: str, value: Any, fragments: list[str]
) -> None:
    with pytest.raises(ProfileError) as err:
        parse_profile(_with(path, value))
    for f in fragments:
        assert f in str(err.value)


def test_a_null_bias_beyond_the_spool_travel_is_refused() -> None:
    data = _with("backend.sim.plant.joints[0].valve.null_bias_v", 0.3)
    data["plant"]["joints"][0]["spool_max"] = 0.2
    with pytest.raises(ProfileError, match=r"joints\[0\]\.valve\.null_bias_v .* spool travel"):
        parse_profile(data)


def test_a_simulated_backend_needs_its_truth() -> None:
    data = copy.deepcopy(REALISTIC)
    del data["backend"]["sim"]["plant"]
    with pytest.raises(ProfileError, match=r"needs a \[backend\.sim\.plant\] section"):
        parse_profile(data)


def test_the_realistic_profile_has_every_effect_on() -> None:
    profile = load_profile(PROFILES / "sim-2dof-realistic.toml")
    params, fx = sim_plant(profile)
    assert fx.active and fx.thermal and fx.air_content > 0.0
    for j, nominal_v0 in zip(fx.joints, params.dead_volume, strict=True):
        assert j.coulomb_pos != j.coulomb_neg and j.stiction_pos > j.coulomb_pos
        assert j.viscous_pos != j.viscous_neg
        assert j.leak_internal > 0 and j.leak_external > 0
        assert j.null_bias != 0 and j.lap != 0 and j.null_leak_opening > 0
        assert j.null_shift_per_k != 0
        assert j.dead_volume_cap is not None and j.dead_volume_cap > nominal_v0
        assert j.dead_volume_rod is not None and j.dead_volume_rod > nominal_v0
    assert all(c.sim_error is not None for c in profile.inputs)


def test_the_estimator_is_told_the_nominal_geometry_not_the_hoses() -> None:
    profile = load_profile(PROFILES / "sim-2dof-realistic.toml")
    told = plant_params(profile)
    true, fx = sim_plant(profile)
    assert np.array_equal(told.dead_volume, [7.9e-5, 6.3e-5])
    assert [j.dead_volume_cap for j in fx.joints] == [9.5e-5, 7.6e-5]
    # Identified values are the truth only for the comparison columns …
    assert np.array_equal(told.theta_mech(), true.theta_mech())
    # … and never reach what the profile itself knows.
    assert not has_identified_values(known_params(profile))


@pytest.mark.parametrize("name", ["ni-2dof.toml", "ni-serial-2dof.toml"])
def test_real_rig_profiles_carry_geometry_but_no_answers(name: str) -> None:
    profile = load_profile(PROFILES / name)
    assert profile.plant is not None
    params = plant_params(profile)
    assert np.isfinite(params.area_cap).all() and np.isfinite(params.dead_volume).all()
    assert params.supply_pressure > 0
    assert all(math.isnan(x) for x in params.theta_mech())
    assert all(math.isnan(x) for x in params.theta_fluid())
    for j in profile.plant.joints:
        assert j.inertia is None and j.viscous_friction is None and j.flow_gains is None
    assert profile.plant.bulk_modulus_pa is None


def test_initial_guesses_in_plant_reach_plant_params_of_a_real_rig() -> None:
    data = tomllib.loads((PROFILES / "ni-2dof.toml").read_text())
    data["plant"]["bulk_modulus_pa"] = 2.0e8
    data["plant"]["joints"][0]["inertia"] = 4.0
    params = plant_params(parse_profile(data))
    assert params.bulk_modulus == 2.0e8 and params.inertia[0] == 4.0
    assert math.isnan(params.inertia[1])


def test_identify_a_recorded_run_with_a_profile_without_truth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rigctl identify RUN --profile ni-2dof.toml`: batch estimates, and no truth columns."""
    run = record_sim_run(PROFILES / "sim-2dof.toml", tmp_path, "short", 6.0)
    assert main(["identify", str(run), "--profile", str(PROFILES / "ni-2dof.toml"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(out["parameters"]) == 16
    for p in out["parameters"]:
        assert p["truth"] is None and p["batch_error_pct"] is None
        assert math.isfinite(p["batch"])
    assert out["table"].splitlines()[0].split() == ["parameter", "batch", "%σ"]


@pytest.mark.parametrize("name", ["ni-2dof.toml", "ni-serial-2dof.toml"])
def test_the_online_estimator_starts_on_a_profile_without_answers(name: str) -> None:
    """What `rig-estimator --profile` builds first: models over the known geometry, no truth."""
    from daq.sample_layout import SampleLayout
    from estimator.online import OnlineIdentifier

    profile = load_profile(PROFILES / name)
    ident = OnlineIdentifier(profile, SampleLayout.from_profile(profile).names)
    assert [c.model.name for c in ident.chains] == ["mechanical", "fluid"]
    assert all(c.model.truth is None for c in ident.chains)
    assert ident.estimate().truth is None


def test_the_oil_law_refers_parameters_from_the_measured_temperature(tmp_path: Path) -> None:
    """The realistic profile declares its oil ([plant.oil]) and measures it (oil_temp): the
    batch says which parameters it referred to 40 °C and from what temperatures. Without the
    temperature channel it warns that they are the unmeasured run temperature's instead."""
    from estimator.batch import identify_run
    from estimator.models import load_models
    from estimator.report.runs import load_run

    path = PROFILES / "sim-2dof-realistic.toml"
    profile = load_profile(path)
    run = load_run(record_sim_run(path, tmp_path, "oil", 6.0), profile)
    known = known_params(profile)
    models = load_models(profile.estimator.model if profile.estimator else None, known, PROFILES)
    res = identify_run(run.columns, known, profile=profile, models=models)
    note = next(n for n in res.notes if n.startswith("oil at "))
    temps = run.columns["eng.oil_temp"]
    assert f"{np.min(temps):.1f}" in note and "referred to 40 °C" in note
    assert "1/b" in note and "Cint1" in note and "Fv+2" in note
    # The stiction bumps, which the velocity filter biases beyond their σ, and the Coulomb
    # forces fitted on the same rows are named in words, never printed as plain measurements.
    said = [w for w in res.warnings if "stiction bumps" in w]
    assert len(said) == 1
    for name in [f"{k}{s}{j}" for k in ("dFs", "Fc") for s in "+-" for j in (1, 2)]:
        assert name in said[0], name
    # and the bumps flagged in the table, their values kept (the Coulomb forces printed)
    names = list(res.names)
    for name in [f"dFs{s}{j}" for s in "+-" for j in (1, 2)]:
        assert not res.identifiable[names.index(name)], name
        assert np.isfinite(res.theta[names.index(name)]), name
    # The null flows, conditional on the null offset and lap the search chose, likewise.
    flows = [f"{k}{e}{j}" for k in ("Q0", "QL") for e in ("++", "+-", "-+", "--") for j in (1, 2)]
    said = [w for w in res.warnings if "the null flows" in w]
    assert len(said) == 1 and all(nm in said[0] for nm in flows)
    for name in flows:
        assert not res.identifiable[names.index(name)], name
        assert np.isfinite(res.theta[names.index(name)]), name
    assert res.identifiable[names.index("Cf++1")]  # the metering edges' gains stay measured
    blind = profile.model_copy(
        update={"channels": [c for c in profile.channels if c.role != "temperature"]}
    )
    res = identify_run(run.columns, known, profile=blind, models=models)
    assert not any(n.startswith("oil at ") for n in res.notes)
    assert any("no 'temperature' channel" in w for w in res.warnings)
