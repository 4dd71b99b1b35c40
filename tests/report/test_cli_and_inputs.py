"""`rigctl report` end to end through its subparser, and the report's answers to bad input."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from daq.profile import load_profile
from daq.recording import Recorder
from daq.ring import SampleRing
from daq.sample_layout import SampleLayout
from estimator.report import ReportError, build_report
from estimator.report.runs import longest_block
from rigctl import cmd_report
from tests.report.conftest import PROFILE
from tests.report.simrun import record_sim_run


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rigctl")
    sub = parser.add_subparsers(dest="command", required=True)
    cmd_report.register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_cli_json_without_validation_run_is_labelled(
    sim_runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rep"
    assert _cli(["report", str(sim_runs[0]), "--out", str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["cross_validation"] is False
    assert Path(d["html"]) == out / "report.html"
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "not cross-validation" in page
    for name in d["figures"].values():
        assert Path(name).is_file() and f'src="{Path(name).name}"' in page
    fits = {r["output"]: r for r in d["fit"]}
    assert fits["q1"]["batch"] > 85.0  # validated on the (fault-free part of) the same run


def test_cli_missing_run_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli(["report", str(tmp_path / "nope.rigrun"), "--no-progress"]) == 2
    assert "no such run file" in capsys.readouterr().err


def test_cli_not_a_run_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bogus = tmp_path / "x.rigrun"
    bogus.write_bytes(b"hello, not a run")
    assert _cli(["report", str(bogus)]) == 2
    assert "x.rigrun" in capsys.readouterr().err


def _tiny_run(tmp_path: Path, rows: int, profile_text: str | None) -> Path:
    profile = load_profile(PROFILE)
    layout = SampleLayout.from_profile(profile)
    ring = SampleRing(4096, layout.width)
    rec = Recorder(
        ring, layout, tmp_path, {"rig": "sim2dof", "period": 0.001}, profile_text=profile_text
    )
    rec.start("tiny")
    for k in range(rows):
        r = ring.claim()
        r[:] = 0.0
        r[0], r[1], r[2] = k, k * 1e-3, 2.0
        ring.publish()
    path = rec.stop().path
    assert path is not None
    return path


def test_run_without_profile_asks_for_one(tmp_path: Path) -> None:
    path = _tiny_run(tmp_path, 100, None)
    with pytest.raises(ReportError, match="--profile"):
        build_report(path, None, tmp_path / "out", progress=False)


def test_too_short_run_is_refused(tmp_path: Path) -> None:
    path = _tiny_run(tmp_path, 500, PROFILE.read_text(encoding="utf-8"))
    with pytest.raises(ReportError, match=r"0\.50 s long"):
        build_report(path, None, tmp_path / "out", progress=False)


def test_without_matplotlib_the_message_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib → ImportError
    with pytest.raises(ReportError, match=r"hydrig\[report\]"):
        build_report(tmp_path / "any.rigrun", None, None, progress=False)
    assert not (tmp_path / "any-report").exists()


def test_longest_block_hand_cases() -> None:
    ok = np.array([1, 1, 0, 1, 1, 1, 1, 0, 1], dtype=bool)
    seq = np.arange(9)
    assert longest_block(ok, seq) == slice(3, 7)
    seq_gap = np.array([0, 1, 2, 3, 4, 10, 11, 12, 13])  # rows lost between 4 and 10
    assert longest_block(ok, seq_gap) == slice(0, 2)  # [3, 5) and [5, 7) tie with [0, 2)
    assert longest_block(np.ones(5, dtype=bool), np.array([0, 1, 5, 6, 7])) == slice(2, 5)
    assert longest_block(np.zeros(3, dtype=bool), np.arange(3)) == slice(0, 0)


def test_user_model_declaring_plant_names_is_validated(tmp_path: Path) -> None:
    """estimator.examples.one_joint names its parameters M, Fv, W… and declares the reference
    parameter each stands for (LinearModel.plant_names): validation simulates it."""
    profile = PROFILE.parent / "sim-1dof.toml"  # names estimator.examples.one_joint:models
    run = record_sim_run(profile, tmp_path, "user", 4.0)
    result = build_report(run, None, tmp_path / "out", progress=False)
    fits = [r for r in result.fit_table if str(r["kind"]).startswith("FIT")]
    assert {r["output"] for r in fits} >= {"q1", "s1", "p_cap1", "p_rod1"}, result.fit_table
    assert all(np.isfinite(r["batch"]) for r in fits)


def test_user_model_report_without_validation(tmp_path: Path) -> None:
    """A user model whose parameters cannot drive the shared physics (no plant_names): the
    report still shows the identification (tables, convergence, SVD, timing), says why
    validation is missing, and draws no validation figure."""
    rig = tmp_path / "rig"
    rig.mkdir()
    (rig / "nomap.py").write_text(
        "from dataclasses import replace\n"
        "from estimator.examples.one_joint import models as named\n\n\n"
        "def models(params):\n"
        "    return [replace(m, plant_names=None) for m in named(params)]\n",
        encoding="utf-8",
    )
    text = (PROFILE.parent / "sim-1dof.toml").read_text(encoding="utf-8")
    text = text.replace('"estimator.examples.one_joint:models"', '"nomap:models"')
    assert '"nomap:models"' in text
    profile = rig / "sim-1dof.toml"
    profile.write_text(text, encoding="utf-8")
    run = record_sim_run(profile, tmp_path, "user", 4.0)
    # The profile given, so its directory is where the model is looked for.
    result = build_report(run, None, tmp_path / "out", profile=profile, progress=False)
    assert set(result.figures) == {"convergence", "singular_values", "timing"}
    assert [r["name"] for r in result.parameter_table] == ["M", "Fv", "W", "1/b"] + [
        f"Cf{s}" for s in ("++", "+-", "-+", "--")
    ]
    assert result.fit_table == []
    page = result.html.read_text(encoding="utf-8")
    assert "No model validation" in page
    assert "cannot drive the shared physics" in page
    for path in result.figures.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f'src="{path.name}"' in page


def test_the_online_replay_runs_on_the_structure_this_batch_chose(
    sim_runs: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rigctl report` hands the batch's choice (Coulomb band, valve null and lap) to the
    online replay as `rigctl identify` does; without a choice (or given one) it leaves it."""
    from types import SimpleNamespace

    import estimator.report.build as build
    from estimator.structure import Structure

    seen: list[object] = []

    class Stop(Exception):
        pass

    def replay(*a: object, structure: object = None) -> None:
        seen.append(structure)
        raise Stop

    monkeypatch.setattr(build, "online_replay", replay)
    chose = SimpleNamespace(
        shape_value=1.3e-3, switch_value=np.array([[0.007, -0.006], [-0.0066, -0.0072]]),
        names=[], theta=[], identifiable=[],
    )  # fmt: skip
    none = SimpleNamespace(shape_value=None, switch_value=None, names=[], theta=[], identifiable=[])
    ident, _ = sim_runs
    for fits in ([none, chose], [none]):
        batch = SimpleNamespace(data=SimpleNamespace(summary=lambda p: ""), notes=[], warnings=[],
                                fits=fits)  # fmt: skip
        with pytest.raises(Stop):
            build_report(ident, None, tmp_path / "out", progress=False, batch=batch)  # type: ignore[arg-type]
    given = Structure(2e-3, None, None, "given")
    with pytest.raises(Stop):
        build_report(ident, None, tmp_path / "out", progress=False, batch=batch,  # type: ignore[arg-type]
                     online_structure=given)  # fmt: skip
    first, second, third = seen
    assert isinstance(first, Structure) and first.coulomb_band_m_s == 1.3e-3
    assert first.valve_null_offset_v == (0.007, -0.006)
    assert first.valve_lap_v == (-0.0066, -0.0072)
    assert "the batch of" in first.source and second is None and third is given
