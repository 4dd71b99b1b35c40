"""`rigctl tune` end to end: gains from an identified parameter file, written as a gains file
that `rigctl gains load` applies to the rig it is for, and refuses for another rig or when the
model predicts the set unstable."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller import tuning
from daq.commands import ClientIdentity, CommandServer
from rigctl.main import main

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "hw_profiles" / "sim-2dof-realistic.toml"
PARAMS = ROOT / "tests" / "params" / "data" / "sim2dofreal-lin-params.toml"


class Rig:
    """A command server that describes a rig (`rig` id, joints j1, j2) and notes set_gains."""

    def __init__(self, rig: str) -> None:
        self.rig = rig
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, cmd: str, args: dict[str, Any], who: ClientIdentity) -> dict[str, Any]:
        self.calls.append((cmd, args))
        if cmd == "describe":
            return {"rig": self.rig, "joints": [{"name": "j1"}, {"name": "j2"}]}
        return {}


@pytest.fixture
def rig(ctx, request) -> Iterator[tuple[str, Rig]]:
    fake = Rig(getattr(request, "param", "sim2dofreal"))
    srv = CommandServer(ctx, "tcp://127.0.0.1:*", fake)
    srv.start()
    yield srv.endpoint, fake
    srv.stop()


def _tune(tmp_path: Path, capsys) -> tuple[Path, dict[str, Any]]:
    out = tmp_path / "gains.toml"
    argv = ["tune", "--profile", str(PROFILE), "--params", str(PARAMS), "--out", str(out)]
    assert main([*argv, "--json"]) == 0
    return out, json.loads(capsys.readouterr().out)


def test_tune_reports_its_prediction_and_writes_a_file_gains_load_applies(
    rig, tmp_path: Path, capsys
) -> None:
    ep, fake = rig
    out, report = _tune(tmp_path, capsys)
    assert [row["joint"] for row in report["joints"]] == ["j1", "j2"]
    for row in report["joints"]:
        assert row["gain_margin"] >= 2.0
        assert 0.0 <= row["predicted_step_overshoot_pct"] <= tuning.MAX_STEP_OVERSHOOT_PCT
        assert row["gains"]["p"] > 0.0 and row["gains"]["ff1"] > 0.0
    assert main(["gains", "load", str(out), "--endpoint", ep]) == 0
    sent = {a["joint"]: a["gains"] for c, a in fake.calls if c == "set_gains"}
    assert sent.keys() == {"j1", "j2"}
    for row in report["joints"]:
        assert sent[row["joint"]]["p"] == pytest.approx(row["gains"]["p"])
        assert sent[row["joint"]]["dp"] == pytest.approx(row["gains"]["dp"])


@pytest.mark.parametrize("rig", ["sim2dof"], indirect=True)
def test_gains_load_refuses_another_rigs_file(rig, tmp_path: Path, capsys) -> None:
    ep, fake = rig
    out, _ = _tune(tmp_path, capsys)
    assert main(["gains", "load", str(out), "--endpoint", ep]) == 2
    err = capsys.readouterr().err
    assert "for rig 'sim2dofreal', this rig is 'sim2dof'" in err
    assert not [c for c, _ in fake.calls if c == "set_gains"]


def test_gains_load_refuses_a_set_the_model_predicts_unstable(rig, tmp_path: Path, capsys) -> None:
    ep, fake = rig
    out, _ = _tune(tmp_path, capsys)
    text = out.read_text(encoding="utf-8")
    bad = tmp_path / "bad.toml"
    # Joint 1's position gain ×20, no ΔP: the oil column's resonance goes unstable.
    d = tuning.read_gains_file(tomllib.loads(text), "sim2dofreal", ["j1", "j2"])
    p1 = d["j1"]["p"]
    bad.write_text(text.replace(f"p = {p1!r}", f"p = {20 * p1!r}", 1), encoding="utf-8")
    argv = ["gains", "load", str(bad), "--profile", str(PROFILE), "--params", str(PARAMS)]
    assert main([*argv, "--endpoint", ep]) == 2
    err = capsys.readouterr().err
    assert "refused" in err and "predicted unstable" in err and "joint" in err
    assert not [c for c, _ in fake.calls if c == "set_gains"]
