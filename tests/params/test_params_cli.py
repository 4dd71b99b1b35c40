"""`rigctl params load` / `show` against a service on loopback sockets."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from daq.backends.factory import make_backend
from daq.profile import load_profile
from daq.service import Service
from rigctl.main import main
from rigctl.session import free_endpoint
from tests.conftest import PROFILES
from tests.params.conftest import write_params


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[str]:
    profile = load_profile(PROFILES / "sim-2dof.toml")
    commands = free_endpoint()
    service = Service(
        profile,
        make_backend(profile),
        virtual_time=True,
        run_dir=tmp_path / "runs",
        telemetry_endpoint=free_endpoint(),
        command_endpoint=commands,
    )
    service.start()
    try:
        yield commands
    finally:
        service.shutdown()


def test_load_then_show(endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conn = ["--endpoint", endpoint, "--timeout", "30"]
    assert main(["params", "show", *conn]) == 0
    assert "none loaded" in capsys.readouterr().out
    f = write_params(tmp_path / "p.toml", "sim-2dof.toml")
    sha = hashlib.sha256(f.read_bytes()).hexdigest()
    assert (
        main(["params", "load", str(f), "--profile", str(PROFILES / "sim-2dof.toml"), *conn]) == 0
    )
    assert sha[:16] in capsys.readouterr().out
    assert main(["params", "show", *conn]) == 0
    out = capsys.readouterr().out
    assert sha in out and str(f.resolve()) in out and "inertia" in out


def test_refusals_exit_codes(
    endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conn = ["--endpoint", endpoint, "--timeout", "30"]
    one = write_params(tmp_path / "one.toml", "sim-1dof.toml")
    assert main(["params", "load", str(one), *conn]) == 1  # the service refuses
    err = capsys.readouterr().err
    assert "load_params refused (rejected)" in err and "'sim1dof'" in err
    assert main(["params", "load", str(tmp_path / "missing.toml"), *conn]) == 2
    assert "no such parameter file" in capsys.readouterr().err


def test_rig_daq_params_default_comes_from_the_units_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from daq.service import build_parser

    monkeypatch.setenv("RIG_PARAMS", "/var/lib/rig/params.toml")
    assert build_parser().parse_args(["--profile", "p.toml"]).params == "/var/lib/rig/params.toml"
    monkeypatch.setenv("RIG_PARAMS", "")
    assert build_parser().parse_args(["--profile", "p.toml"]).params is None


def test_rig_daq_refuses_to_start_with_another_rigs_parameters(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from daq.service import main as rig_daq

    two = write_params(tmp_path / "two.toml", "sim-2dof.toml")
    args = ["--profile", str(PROFILES / "sim-1dof.toml"), "--params", str(two), "--no-network"]
    assert rig_daq([*args, "--virtual-time", "--duration", "0.01"]) == 2
    assert "'sim2dof'" in caplog.text and "'sim1dof'" in caplog.text
