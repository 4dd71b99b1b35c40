from __future__ import annotations

import pytest

from controller.limits import JointLimits
from controller.pid import PidParams
from controller.plant.params import PlantParams
from daq.profile.plant import plant_params
from tests.controller.simloop import gains_limits, profile


@pytest.fixture(scope="session")
def params2() -> PlantParams:
    return plant_params(profile("sim-2dof"))


@pytest.fixture(scope="session")
def params1() -> PlantParams:
    return plant_params(profile("sim-1dof"))


@pytest.fixture(scope="session")
def rig2() -> tuple[list[PidParams], list[JointLimits]]:
    return gains_limits(profile("sim-2dof"))


@pytest.fixture(scope="session")
def rig1() -> tuple[list[PidParams], list[JointLimits]]:
    return gains_limits(profile("sim-1dof"))
