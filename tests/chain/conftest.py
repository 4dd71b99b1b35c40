from __future__ import annotations

from pathlib import Path

import pytest

from controller.plant.chain.profile import ChainProfile, load_chain_profile

EXCAVATOR = Path(__file__).resolve().parents[2] / "hw_profiles" / "sim-excavator.toml"


@pytest.fixture(scope="session")
def excavator() -> ChainProfile:
    return load_chain_profile(EXCAVATOR)
