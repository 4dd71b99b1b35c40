"""`rigctl identify`'s batch parameter file carries what a controller needs from the batch: a
`[plant]` table of the real-rig family's estimate (as the online file has one), so the service
loads it, and the `[structure]` the batch chose, so `pid_ff` can compensate the valve's null
and lap."""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from daq.param_set import read_param_set
from daq.profile import load_profile
from estimator.structure import Structure
from rigctl.cmd_identify import _write_batch_file
from tests.conftest import PROFILES

#: The online estimate of a `rigctl identify --virtual-time` run on sim-2dof-realistic: the
#: real-rig family with its Stribeck, null-flow and air terms.
DATA = Path(__file__).parent / "data" / "sim2dofreal-lin-stribeck-params.toml"


def _batch_from(path: Path) -> SimpleNamespace:
    """A batch result with the fits of an identified real-rig file (what `_write_batch_file`
    reads of one)."""
    d = tomllib.loads(path.read_text())
    fits = [
        SimpleNamespace(
            name=name,
            names=m["names"],
            theta=np.asarray(m["theta"]),
            sigma_pct=np.asarray(m["sigma_pct"]),
            cov=np.diag(m["cov_diag"]),
            residual_var=m["residual_var"],
        )
        for name, m in d["models"].items()
    ]
    return SimpleNamespace(fits=fits, data=SimpleNamespace(used=1234))


@pytest.mark.parametrize("band", [None, 0.001])
def test_the_batch_file_loads_with_its_plant_and_valve_structure(
    tmp_path: Path, band: float | None
) -> None:
    profile = load_profile(PROFILES / "sim-2dof-realistic.toml")
    batch = _batch_from(DATA)
    structure = Structure(band, (-0.0097, -0.0136), (-0.0071, -0.0071), "the batch of a run")
    out = tmp_path / "batch-params.toml"
    _write_batch_file(out, profile, batch, structure)
    written = tomllib.loads(out.read_text())
    assert written["structure"]["valve_lap_v"] == [-0.0071, -0.0071]
    assert "plant" in written
    params = read_param_set(out, profile).params
    mech = dict(zip(batch.fits[0].names, batch.fits[0].theta, strict=True))
    assert params.inertia.tolist() == pytest.approx([mech["M1"], mech["M2"]])
    assert params.gravity_moment.tolist() == pytest.approx([mech["W1"], mech["W2"]])
    np.testing.assert_array_equal(params.valve_structure, [[-0.0097, -0.0071], [-0.0136, -0.0071]])
