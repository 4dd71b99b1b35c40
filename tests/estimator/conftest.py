from __future__ import annotations

from pathlib import Path

import pytest

from estimator.simdata import excite

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def sim1dof_run():
    """20 s of the simulated 1-DOF rig under PD multisine excitation: (profile, layout, rows)."""
    profile, layout, rows, _ = excite(ROOT / "hw_profiles" / "sim-1dof.toml", 20.0)
    return profile, layout, rows
