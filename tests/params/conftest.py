from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from daq.backends.factory import make_backend
from daq.profile import load_profile, plant_params
from daq.service import Service
from estimator.paramfile import write_param_file
from tests.conftest import PROFILES


def write_params(path: Path, profile_name: str, scale: float = 1.0) -> Path:
    """An estimator-format parameter file with the profile's plant (inertias × `scale`)."""
    profile = load_profile(PROFILES / profile_name)
    p = plant_params(profile)
    models = {
        "mechanical": {
            "names": p.mech_names(),
            "theta": list(p.theta_mech()),
            "sigma_pct": [1.0] * len(p.mech_names()),
            "cov_diag": [0.0] * len(p.mech_names()),
            "residual_var": 1.0,
        }
    }
    from dataclasses import replace

    write_param_file(path, profile.rig.id, 1000, models, replace(p, inertia=p.inertia * scale))
    return path


def start_service(profile_name: str, tmp: Path) -> Service:
    profile = load_profile(PROFILES / profile_name)
    service = Service(
        profile,
        make_backend(profile),
        virtual_time=True,
        network=False,
        run_dir=tmp / "runs",
        profile_text=(PROFILES / profile_name).read_text(),
    )
    service.start()
    return service


@pytest.fixture
def service_2dof(tmp_path: Path) -> Iterator[Service]:
    service = start_service("sim-2dof.toml", tmp_path)
    try:
        yield service
    finally:
        service.shutdown()


@pytest.fixture
def service_1dof(tmp_path: Path) -> Iterator[Service]:
    service = start_service("sim-1dof.toml", tmp_path)
    try:
        yield service
    finally:
        service.shutdown()
