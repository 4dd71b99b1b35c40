from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from controller.plant.chain.profile import ChainProfile, load_chain_profile

EXCAVATOR = Path(__file__).resolve().parents[2] / "hw_profiles" / "sim-excavator.toml"


@pytest.fixture(scope="session")
def excavator() -> ChainProfile:
    return load_chain_profile(EXCAVATOR)


@pytest.fixture(scope="session")
def excavator_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The multisine identification experiment recorded through rig-daq (virtual time, its
    simulator the profile's chain): ~10 s of wall time."""
    from rigctl.session import RigSession

    experiment = EXCAVATOR.parents[1] / "experiments" / "excavator-multisine.toml"
    out = tmp_path_factory.mktemp("excavator")
    with RigSession(EXCAVATOR, out, virtual_time=True, estimator=False) as s:
        path = Path(s.command("record_start", {"name": "identification"})["path"])
        status = s.run_experiment(tomllib.loads(experiment.read_text()), timeout=600.0)
        assert status["fault"] is None
        s.command("record_stop")
    return path
