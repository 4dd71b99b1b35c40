"""`rigctl run --wait` listens on the telemetry endpoint the other rigctl commands would use:
--telemetry, else the --profile's, else $RIG_TELEMETRY, else the default."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rigctl.cmd_run import telemetry_endpoint
from tests.live.conftest import PROFILE_2DOF


def args(**kw: object) -> argparse.Namespace:
    return argparse.Namespace(**{"telemetry": None, "profile": None, **kw})


def test_endpoint_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = PROFILE_2DOF.read_text()
    assert 'telemetry = "tcp://127.0.0.1:5555"' in text
    prof = tmp_path / "p.toml"
    prof.write_text(text.replace("tcp://127.0.0.1:5555", "tcp://*:5599", 1))
    monkeypatch.setenv("RIG_TELEMETRY", "tcp://127.0.0.1:6001")
    assert telemetry_endpoint(args(telemetry="tcp://127.0.0.1:7")) == "tcp://127.0.0.1:7"
    assert telemetry_endpoint(args(profile=str(prof))) == "tcp://127.0.0.1:5599"
    assert telemetry_endpoint(args()) == "tcp://127.0.0.1:6001"
    monkeypatch.delenv("RIG_TELEMETRY")
    assert telemetry_endpoint(args()) == "tcp://127.0.0.1:5555"
