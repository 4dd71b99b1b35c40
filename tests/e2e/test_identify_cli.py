"""Fast tier: the identified-parameter table and `rigctl identify RUN` (batch of a recording)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from daq.profile import load_profile, plant_params
from rigctl.identify_table import ParameterRow, format_table, rows_from
from rigctl.main import main
from tests.conftest import PROFILES
from tests.report.simrun import record_sim_run

PROFILE = PROFILES / "sim-2dof.toml"


# ------------------------------------------------------------------------ table formatting


def _rows() -> list[ParameterRow]:
    return [
        # online 2 % high with 1 %σ (inside 3σ), batch 5 % low with 1 %σ (outside).
        ParameterRow("M1", 4.0, 4.08, 1.0, 3.8, 1.0),
        # negative truth: the error is relative to |truth|.
        ParameterRow("Fv1", -2.0, -2.01, 0.1, -1.99, 0.5),
    ]


def test_row_errors_and_three_sigma() -> None:
    m1, fv = _rows()
    assert m1.error_pct(m1.online) == pytest.approx(2.0)
    assert m1.error_pct(m1.batch) == pytest.approx(-5.0)
    assert m1.within_3_sigma(m1.online, m1.online_sigma_pct) is True  # 0.08 ≤ 3·0.0408
    assert m1.within_3_sigma(m1.batch, m1.batch_sigma_pct) is False  # 0.2 > 3·0.038
    assert fv.error_pct(fv.online) == pytest.approx(-0.5)
    assert fv.within_3_sigma(fv.online, fv.online_sigma_pct) is False  # 0.01 > 3·0.00201
    d = m1.to_dict()
    assert d["online_error_pct"] == pytest.approx(2.0) and d["batch_within_3sigma"] is False
    assert ParameterRow("x", None, 1.0, 1.0, 1.0, 1.0).error_pct(1.0) is None
    assert ParameterRow("x", 1.0, 1.0, math.nan, 1.0, 1.0).within_3_sigma(1.0, math.nan) is None


def test_table_with_truth_online_and_batch() -> None:
    lines = format_table(_rows(), online=True).splitlines()
    head = ["parameter", "true", "online", "%σ", "err", "%", "batch", "%σ", "err", "%"]
    assert lines[0].split() == head
    assert set(lines[1]) == {"-"} and len(lines[1]) == len(lines[0])
    m1 = lines[2].split()
    assert m1 == ["M1", "4", "4.08", "1.00", "+2.00", "3.8", "1.00", "-5.00"]
    assert lines[3].split()[-1] == "+0.50"
    assert lines[-2] == "online: max |error| 2.00 %, truth within ±3σ for 1/2"
    assert lines[-1] == "batch: max |error| 5.00 %, truth within ±3σ for 1/2"


def test_table_batch_only_without_truth() -> None:
    rows = [ParameterRow("W1", None, None, None, 8.5, 0.25)]
    lines = format_table(rows, online=False).splitlines()
    assert lines[0].split() == ["parameter", "batch", "%σ"]
    assert lines[2].split() == ["W1", "8.5", "0.25"]
    assert len(lines) == 3  # no summary without truth


def test_rows_from_pairs_truth_with_names() -> None:
    params = plant_params(load_profile(PROFILE))
    names = params.mech_names() + params.fluid_names()
    truth = np.concatenate([params.theta_mech(), params.theta_fluid()])
    rows = rows_from(names, None, truth * 1.01, np.full(len(names), 0.5), truth)
    assert [r.name for r in rows] == names
    assert all(r.error_pct(r.batch) == pytest.approx(1.0) for r in rows)
    assert all(r.online is None for r in rows)


# ------------------------------------------------------------------------ rigctl identify RUN


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """6 s of closed-loop sines plus valve dither, recorded by the real recorder."""
    return record_sim_run(PROFILE, tmp_path_factory.mktemp("runs"), "short", 6.0)


def test_identify_recorded_run_json(short_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["identify", str(short_run), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    params = plant_params(load_profile(PROFILE))
    assert [p["name"] for p in out["parameters"]] == params.mech_names() + params.fluid_names()
    assert out["run"] == str(short_run)
    for p in out["parameters"]:
        assert p["online"] is None and p["online_sigma_pct"] is None
        assert math.isfinite(p["batch"]) and 0.0 < p["batch_sigma_pct"] < 10.0
        # The run's profile is the simulator's: its truth is in the table.
        assert p["truth"] is not None and abs(p["batch_error_pct"]) < 5.0, p
    assert "online" not in out["table"].splitlines()[0]


def test_identify_recorded_run_table(short_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["identify", str(short_run)]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].split()[:3] == ["parameter", "true", "batch"]
    assert "batch: max |error|" in text and "R12" in text
    data = next(ln for ln in text.splitlines() if ln.startswith("data: "))
    assert "used" in data and "rows" in data


def test_identify_says_which_batch_estimate_and_link_by_link(
    short_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`batch_methods` per model and `batch_method` per parameter say which estimate is
    printed; `--no-refine` prints least squares only; `--link-by-link` adds Lin's estimate."""
    assert main(["identify", str(short_run), "--json", "--link-by-link"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["batch_methods"]["mechanical"] == "WLS"
    assert out["batch_methods"]["fluid"] in ("WLS", "IV")
    for p in out["parameters"]:
        assert (
            p["batch_method"]
            == out["batch_methods"][
                "fluid" if p["name"].startswith(("1/b", "Cf")) else "mechanical"
            ]
        )
        if p["batch_method"] == "IV":
            assert math.isfinite(p["batch_ls"])
    lw = out["linkwise"]["mechanical"]
    assert lw["names"] == [p["name"] for p in out["parameters"][: len(lw["names"])]]
    assert sorted(set(lw["stage"])) == [1, 2]
    assert main(["identify", str(short_run), "--json", "--no-refine"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(out["batch_methods"].values()) == {"WLS"} and out["linkwise"] == {}


def test_identify_bad_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["identify", str(tmp_path / "nope.rigrun")]) == 2
    assert "nope.rigrun" in capsys.readouterr().err
    assert main(["identify"]) == 2
    assert "--profile is required" in capsys.readouterr().err


def test_rigctl_does_not_load_the_estimator_for_other_commands() -> None:
    """`rigctl status` etc. must not pay for importing the estimator (numba, scipy)."""
    import subprocess
    import sys

    code = (
        "import sys; import rigctl.main as m; m.build_parser(); "
        "print(sorted(n for n in sys.modules if n.split('.')[0] == 'estimator'))"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=root,
        check=True,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------ faults and exit codes


class _FakeSession:
    """Stands in for `RigSession`: hands out pre-recorded runs, writes the estimator's parameter
    file from them, and faults the rig where the test says (issue 13, item 5)."""

    runs: ClassVar[dict[str, Path]] = {}
    fault_in: str = "validation"  # "identification" or "validation"

    def __init__(self, profile: Path, out: Path, *, virtual_time: bool) -> None:
        self.profile = load_profile(profile)
        self.param_file = out / "online-params.toml"
        self.experiments = 0
        self.log: list[str] = []
        self.gains_sent: list[dict] = []
        self.experiments_sent: list[dict] = []

    def __enter__(self) -> _FakeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def command(self, cmd: str, args: dict | None = None) -> dict:
        self.log.append(cmd)
        if cmd == "set_gains":
            self.gains_sent.append(args)
        if cmd == "record_start":
            return {"ok": True, "path": str(self.runs[args["name"]])}
        if cmd == "disarm" and self.experiments > 1 and self.fault_in == "validation":
            from rigctl.session import SessionError

            raise SessionError("disarm refused (invalid_state): FAULT is latched")
        return {"ok": True}

    def request(self, cmd: str, args: dict | None = None) -> dict:
        self.log.append(f"request:{cmd}")
        return {"ok": True, "state": "FAULT", "fault": {"code": 4}, "seq": 5999, "t": 6.0}

    def run_experiment(self, experiment: dict, timeout: float) -> dict:
        from rigctl.session import SessionError

        self.experiments += 1
        self.experiments_sent.append(experiment)
        which = "identification" if self.experiments == 1 else "validation"
        if which == self.fault_in:
            raise SessionError("the rig faulted during the experiment: PRESSURE p_cap_1")
        return {"seq": 5999, "t": 6.0}

    def wait_estimate(self, done, *, timeout: float, what: str) -> dict:
        return {"data_seq": 5999}

    def stop_estimator(self) -> None:
        from daq.recording import read_run
        from estimator.online import OnlineIdentifier
        from estimator.service import write_estimate

        run = read_run(self.runs["identification"])
        ident = OnlineIdentifier(self.profile, run.columns)
        ident.update_rows(run.data)
        write_estimate(self.param_file, self.profile.rig.id, ident)


@pytest.fixture
def fake_session(monkeypatch: pytest.MonkeyPatch, short_run: Path, tmp_path: Path):
    import rigctl.cmd_identify as cmd

    faulted = record_sim_run(PROFILE, tmp_path, "faulted", 6.0, fault_at=4.0)
    _FakeSession.runs = {"identification": short_run, "validation": short_run}
    monkeypatch.setattr(cmd, "RigSession", _FakeSession)
    made: list[_FakeSession] = []

    def session(*a, **kw) -> _FakeSession:
        made.append(_FakeSession(*a, **kw))
        return made[-1]

    monkeypatch.setattr(cmd, "RigSession", session)
    _FakeSession.made = made  # type: ignore[attr-defined]
    return _FakeSession, faulted


def test_fault_after_the_experiment_keeps_the_identification(
    fake_session, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session, _ = fake_session
    session.fault_in = "validation"
    code = main(
        ["identify", "--profile", str(PROFILE), "--json", "--no-report", "--out", str(tmp_path)]
    )
    from rigctl.cmd_identify import EXIT_FAULT_AFTER

    captured = capsys.readouterr()
    assert code == EXIT_FAULT_AFTER == 4
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert "faulted after the experiment" in captured.err and "PRESSURE" in captured.err
    assert any("faulted after the identification experiment" in w for w in out["warnings"])
    assert out["fault_after"] and out["validation_run"] is None
    assert len(out["parameters"]) == 16 and Path(out["online_param_file"]).is_file()
    for p in out["parameters"]:
        assert math.isfinite(p["batch"]) and math.isfinite(p["online"])
        assert isinstance(p["identifiable"], bool)


def test_fault_during_the_experiment_is_a_refusal(
    fake_session, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session, faulted = fake_session
    session.fault_in = "identification"
    session.runs = {"identification": faulted, "validation": faulted}
    code = main(["identify", "--profile", str(PROFILE), "--no-report", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1
    assert "cut the experiment short" in err and "Traceback" not in err


def test_json_has_warnings_and_identifiable(
    short_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["identify", str(short_run), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert isinstance(out["warnings"], list)
    assert all(isinstance(w, str) for w in out["warnings"])
    assert out["data"]["rows"] > 0 and out["data"]["used"] > 0
    for p in out["parameters"]:
        assert p["identifiable"] is True and "batch_sigma_pct" in p


def _gains_toml(tmp_path: Path, rig: str) -> Path:
    from controller.tuning import GAINS_FORMAT, dumps_gains

    d = {
        "format": GAINS_FORMAT,
        "version": 1,
        "rig": rig,
        "meta": {"params": "x"},
        "joints": [
            {"name": "j1", "p": 3.3, "i": 2.7, "ff1": 0.25, "dp": 0.03, "dp_hp_hz": 1.0},
            {"name": "j2", "p": 2.3, "i": 2.3, "ff1": 0.15, "dp": 0.05, "dp_hp_hz": 1.0},
        ],
    }
    path = tmp_path / f"gains-{rig}.toml"
    path.write_text(dumps_gains(d), encoding="utf-8")
    return path


def test_identify_with_a_gains_file_applies_it_and_runs_over_it(
    fake_session, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session, _ = fake_session
    session.fault_in = "neither"
    gains = _gains_toml(tmp_path, "sim2dof")
    argv = ["identify", "--profile", str(PROFILE), "--json", "--no-report", "--no-verify"]
    assert main([*argv, "--out", str(tmp_path / "o"), "--gains", str(gains)]) == 0
    s = session.made[-1]
    assert [g["joint"] for g in s.gains_sent] == ["j1", "j2"]
    assert s.gains_sent[0]["gains"]["p"] == 3.3 and s.gains_sent[1]["gains"]["dp"] == 0.05
    # Applied before the identification is recorded, and the experiments' own pid is gone
    # (the standard experiment's p = 1.5 would override the file's p otherwise).
    assert s.log.index("set_gains") < s.log.index("record_start")
    assert len(s.experiments_sent) == 2
    assert all("pid" not in e for e in s.experiments_sent)
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["gains_file"] == str(gains)


def test_identify_refuses_another_rigs_gains_file_before_starting(
    fake_session, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session, _ = fake_session
    gains = _gains_toml(tmp_path, "sim2dofreal")
    argv = ["identify", "--profile", str(PROFILE), "--no-report", "--gains", str(gains)]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "gains file is for rig 'sim2dofreal', this rig is 'sim2dof'" in err
    assert session.made == []  # refused before any service started
