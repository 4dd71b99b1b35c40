from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "hw_profiles"


@pytest.fixture
def profile_2dof_path() -> Path:
    return PROFILES / "sim-2dof.toml"


@pytest.fixture
def profile_1dof_path() -> Path:
    return PROFILES / "sim-1dof.toml"
