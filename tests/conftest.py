from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

# Tests check behaviour, never wall-clock speed: Hypothesis's per-example deadline (200 ms) is a
# wall-clock check that fails on a loaded machine, so it is off for every property test.
settings.register_profile("hydrig", deadline=None)
settings.load_profile("hydrig")

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "hw_profiles"


@pytest.fixture
def profile_2dof_path() -> Path:
    return PROFILES / "sim-2dof.toml"


@pytest.fixture
def profile_1dof_path() -> Path:
    return PROFILES / "sim-1dof.toml"
