from __future__ import annotations

from pathlib import Path

import pytest

from estimator.report import ReportResult, build_report
from tests.conftest import PROFILES
from tests.report.simrun import record_sim_run

PROFILE = PROFILES / "sim-2dof.toml"
FAULT_AT = 5.5


@pytest.fixture(scope="session")
def sim_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(identification run, validation run): 6 s of sines at 0.7/1.1 Hz ending in a fault at
    5.5 s, and 4 s at 0.4/1.6 Hz with larger amplitudes (a different trajectory)."""
    d = tmp_path_factory.mktemp("runs")
    ident = record_sim_run(PROFILE, d, "ident", 6.0, fault_at=FAULT_AT)
    valid = record_sim_run(PROFILE, d, "valid", 4.0, freqs=(0.4, 1.6), amp_deg=(6.0, 5.0))
    return ident, valid


@pytest.fixture(scope="session")
def cross_report(
    sim_runs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> ReportResult:
    ident, valid = sim_runs
    return build_report(ident, valid, tmp_path_factory.mktemp("report"), progress=False)
