"""The handover of model structure from batch to online (estimator.structure): what the batch
chose (Coulomb band, valve null offset and lap per joint) is written into its parameter file's
[structure], read back, and run by the online estimator, which says which structure it ran."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from daq.profile import load_profile
from daq.sample_layout import SampleLayout
from estimator.chain import JACKKNIFE_GROUPS
from estimator.jackknife import jackknife_from_normal, merge_groups
from estimator.online import OnlineIdentifier
from estimator.paramfile import read_param_file, write_param_file
from estimator.simdata import excite
from estimator.structure import Structure, batch_structure, read_structure

ROOT = Path(__file__).resolve().parents[2]
REALISTIC = ROOT / "hw_profiles" / "sim-2dof-realistic.toml"
BAND = 1.3e-3
NULL = [0.0071, -0.0058]
LAP = [-0.0066, -0.0072]


#: Parameters the batch flagged, and the values it used.
HELD = {"dFs+1": 98.6, "Q0++1": 1.55e-8}


def _fits() -> list[SimpleNamespace]:
    """What batch.identify_run leaves on its fits (estimator.wls.ModelFit): the mechanical
    model's chosen band, the fluid model's chosen [b₀; d], and one flagged parameter each."""
    return [
        SimpleNamespace(shape_value=BAND, switch_value=None, names=["M1", "dFs+1"],
                        theta=[4.4, HELD["dFs+1"]], identifiable=[True, False]),
        SimpleNamespace(shape_value=None, switch_value=np.array([NULL, LAP]),
                        names=["Cf++1", "Q0++1"], theta=[6.3e-7, HELD["Q0++1"]],
                        identifiable=[True, False]),
    ]  # fmt: skip


def _batch_file(tmp_path: Path) -> Path:
    path = tmp_path / "batch-params.toml"
    chosen = batch_structure(_fits(), "test batch")
    models = {"m": {"names": ["a"], "theta": [1.0], "sigma_pct": [1.0], "cov_diag": [0.1],
                    "residual_var": 1.0}}  # fmt: skip
    write_param_file(path, "sim2dofreal", 10, models, source="test", structure=chosen.table())
    return path


def test_the_online_estimator_runs_the_batchs_structure(tmp_path: Path) -> None:
    path = _batch_file(tmp_path)
    assert read_param_file(path)["structure"]["coulomb_band_m_s"] == BAND
    profile = load_profile(REALISTIC)
    structure = read_structure(path, len(profile.joints))
    layout = SampleLayout.from_profile(profile)
    online = OnlineIdentifier(profile, layout.names, structure=structure)
    mech, fluid = (c.model for c in online.chains)
    assert mech.shape is not None and mech.shape.value == pytest.approx(BAND)
    assert fluid.switches is not None
    np.testing.assert_allclose(fluid.switches.value, [NULL, LAP])
    said = online.estimate().structure
    assert "1.3 mm/s" in said and "7.10, -5.80" in said and str(path) in said
    assert "2 parameters held at the batch's values (dFs+1, Q0++1)" in said
    # Without it: the profile's (here none: the family's own zeros and 5 mm/s).
    own = OnlineIdentifier(profile, layout.names)
    fluid0 = own.chains[1].model
    assert fluid0.switches is not None and not np.any(fluid0.switches.value)
    # ... and then every estimate says, in words, that it is conditional on a structure no
    # data chose (its σ cannot carry that); on the batch's structure it does not.
    assert online.estimate().warnings == []
    said = own.estimate().warnings
    assert len(said) == 1 and "not chosen from data" in said[0]
    assert "mechanical_lin" in said[0] and "fluid_lin" in said[0]
    assert "family's own" in own.estimate().structure


def test_the_estimators_file_carries_its_warnings(tmp_path: Path) -> None:
    path = tmp_path / "online-params.toml"
    models = {"m": {"names": ["a"], "theta": [1.0], "sigma_pct": [1.0], "cov_diag": [0.1],
                    "residual_var": 1.0}}  # fmt: skip
    words = ['every parameter of m is conditional on "x" (σ)', "second"]
    write_param_file(path, "sim2dofreal", 10, models, warnings=words)
    assert read_param_file(path)["warnings"] == words
    write_param_file(path, "sim2dofreal", 10, models)
    assert "warnings" not in read_param_file(path)


def test_the_online_estimator_holds_the_flagged_parameters(tmp_path: Path) -> None:
    """On the batch's structure the parameters it flagged stay at its values whatever the
    rows say, print no %σ, and leave the jackknife (16 groups of 1 s) to the others; without
    it the same rows move them."""
    path = _batch_file(tmp_path)
    assert read_param_file(path)["structure"]["held_names"] == list(HELD)
    profile, layout, rows, _ = excite(REALISTIC, 20.0, seed=3)
    structure = read_structure(path, len(profile.joints))
    assert structure.held_values() == HELD
    held = OnlineIdentifier(profile, layout.names, running_only=False, structure=structure)
    free = OnlineIdentifier(
        profile, layout.names, running_only=False,
        structure=replace(structure, held=()),
    )  # fmt: skip
    for ident in (held, free):
        for k in range(0, len(rows), 100):  # 0.1 s at a time, as telemetry arrives
            ident.update_rows(rows[k : k + 100])
    a, b = held.estimate(), free.estimate()
    for name, value in HELD.items():
        k = a.names.index(name)
        assert a.theta[k] == pytest.approx(value, rel=1e-6), name
        assert np.isnan(a.sigma_pct[k]) and np.isfinite(b.sigma_pct[k]), name
        assert b.theta[k] != pytest.approx(value, rel=1e-3), name
    measured = [k for k, n in enumerate(a.names) if n not in HELD]
    assert np.all(np.isfinite(a.sigma_pct[measured]))
    mech = held.chains[0]
    assert mech.held.tolist() == [n == "dFs+1" for n in mech.model.names]
    jack = mech.jackknife_variance()
    assert jack is not None and jack[mech.held].tolist() == [0.0]
    assert np.all(jack[~mech.held] > 0.0)
    # ... the jackknife of the others' equations with the held column's share known: each
    # group's Aθ = b with θ_held moved to the right-hand side. (The test's name avoids "batch":
    # the mutation run of chain.py deselects -k "batch".)
    A, b = merge_groups(np.stack(mech._A), np.stack(mech._b), JACKKNIFE_GROUPS)
    f, h = ~mech.held, mech.held
    rhs = b[:, f] - A[:, f][:, :, h] @ (np.array([HELD["dFs+1"]]) / mech.scale[h])
    want = jackknife_from_normal(A[:, f][:, :, f], rhs)
    assert want is not None
    np.testing.assert_allclose(jack[f], want, rtol=1e-9)


def test_models_given_as_built_hold_nothing_of_a_structure(tmp_path: Path) -> None:
    """`structure` is ignored when the models are given (OnlineIdentifier's docstring): its
    held parameters too."""
    profile = load_profile(REALISTIC)
    names = SampleLayout.from_profile(profile).names
    structure = read_structure(_batch_file(tmp_path), len(profile.joints))
    models = [c.model for c in OnlineIdentifier(profile, names).chains]
    given = OnlineIdentifier(profile, names, models=models, structure=structure)
    assert not any(c.held.any() for c in given.chains)
    assert any(c.held.any() for c in OnlineIdentifier(profile, names, structure=structure).chains)


def test_a_bad_structure_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('format = "hydrig-params/1"\n[structure]\nvalve_lap_v = [0.1]\n')
    with pytest.raises(ValueError, match=r"valve_lap_v .* need 2 numbers"):
        read_structure(path, 2)
    path.write_text('format = "hydrig-params/1"\n')
    with pytest.raises(ValueError, match="no \\[structure\\] table"):
        read_structure(path, 2)
    path.write_text('[structure]\nheld_names = ["dFs+1", "Kx9"]\nheld_values = [1.0, 2.0]\n')
    profile = load_profile(REALISTIC)
    with pytest.raises(ValueError, match=r"held_names \['Kx9'\] are no parameters of this"):
        OnlineIdentifier(profile, SampleLayout.from_profile(profile).names,
                         structure=read_structure(path, 2))  # fmt: skip
    path.write_text("[structure]\ncoulomb_band = 0.001\n")
    with pytest.raises(ValueError, match="unknown key"):
        read_structure(path, 2)
    for bad in (
        'held_names = ["a", "b"]\nheld_values = [1.0]',
        'held_names = ["a", "a"]\nheld_values = [1.0, 2.0]',
        'held_names = ["a"]\nheld_values = [nan]',
        'held_names = ["a"]',
    ):
        path.write_text(f"[structure]\n{bad}\n")
        with pytest.raises(ValueError, match=r"held_names .* need two lists of the same length"):
            read_structure(path, 2)


def test_an_empty_structure_leaves_the_profile_in_charge() -> None:
    assert Structure().empty()
    measured = SimpleNamespace(
        shape_value=None, switch_value=None, names=["a"], theta=[1.0], identifiable=[True]
    )
    assert batch_structure([measured], "x").empty()
