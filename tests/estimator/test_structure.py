"""The handover of model structure from batch to online (estimator.structure): what the batch
chose (Coulomb band, valve null offset and lap per joint) is written into its parameter file's
[structure], read back, and run by the online estimator, which says which structure it ran."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from daq.profile import load_profile
from daq.sample_layout import SampleLayout
from estimator.online import OnlineIdentifier
from estimator.paramfile import read_param_file, write_param_file
from estimator.structure import Structure, batch_structure, read_structure

ROOT = Path(__file__).resolve().parents[2]
REALISTIC = ROOT / "hw_profiles" / "sim-2dof-realistic.toml"
BAND = 1.3e-3
NULL = [0.0071, -0.0058]
LAP = [-0.0066, -0.0072]


def _fits() -> list[SimpleNamespace]:
    """What batch.identify_run leaves on its fits (estimator.wls.ModelFit): the mechanical
    model's chosen band, the fluid model's chosen [b₀; d]."""
    return [
        SimpleNamespace(shape_value=BAND, switch_value=None),
        SimpleNamespace(shape_value=None, switch_value=np.array([NULL, LAP])),
    ]


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


def test_a_bad_structure_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('format = "hydrig-params/1"\n[structure]\nvalve_lap_v = [0.1]\n')
    with pytest.raises(ValueError, match=r"valve_lap_v .* need 2 numbers"):
        read_structure(path, 2)
    path.write_text('format = "hydrig-params/1"\n')
    with pytest.raises(ValueError, match="no \\[structure\\] table"):
        read_structure(path, 2)
    path.write_text("[structure]\ncoulomb_band = 0.001\n")
    with pytest.raises(ValueError, match="unknown key"):
        read_structure(path, 2)


def test_an_empty_structure_leaves_the_profile_in_charge() -> None:
    assert Structure().empty()
    assert batch_structure([SimpleNamespace(shape_value=None, switch_value=None)], "x").empty()
