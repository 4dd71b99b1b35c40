"""`run` against the service (simulator, real time): refusals list every violation exactly as
`rigctl check` does; `rigctl run --wait` returns with the experiment's exit status; replies
carry absolute recording paths."""

from __future__ import annotations

import threading
import tomllib
from pathlib import Path

import pytest

from daq.recording import read_run
from rigctl.cmd_check import check_file
from rigctl.main import main
from rigctl.session import RigSession
from tests.live.conftest import PROFILE_2DOF
from tests.live.test_check import BROKEN, BROKEN_LINES
from tests.telemetry.conftest import wait_until

pytestmark = pytest.mark.slow

SHORT = """
name = "short"
home_deg = [40.0, 30.0]
[[segments]]
name = "wiggle"
duration_s = 1.0
repeats = 2
trajectory = { kind = "sine", amplitude_deg = [2.0, 2.0], frequency_hz = [1.0, 1.0] }
controller = { kind = "pid" }
"""


def test_refusal_names_every_violation_like_rigctl_check(rig: RigSession, tmp_path: Path) -> None:
    rig.command("arm")
    reply = rig.request("run", {"experiment": tomllib.loads(BROKEN)})
    assert reply["ok"] is False and reply["error"] == "rejected"
    assert reply["message"] == "run: 5 violation(s) of the profile's limits:\n  " + "\n  ".join(
        BROKEN_LINES
    )
    f = tmp_path / "broken.toml"
    f.write_text(BROKEN)
    assert check_file(f, PROFILE_2DOF)[1] == BROKEN_LINES
    # Issue 16 item 3: a 1e9 s hold used to end in `internal` after a MemoryError.
    hold = {"name": "h", "home_deg": [40.0, 30.0], "segments": [
        {"name": "hold", "duration_s": 1e9, "trajectory": {"kind": "hold"},
         "controller": {"kind": "pid"}}]}  # fmt: skip
    reply = rig.request("run", {"experiment": hold})
    assert reply["error"] == "rejected"
    assert reply["message"] == (
        "run: 2 violation(s) of the profile's limits:\n"
        "  segment 'hold': duration_s = 1e+09 s is outside the allowed range (0, 86400] s\n"
        "  experiment: total duration (duration_s × repeats) = 1e+09 s is outside the allowed "
        "range (0, 604800] s"
    )
    assert rig.request("status")["state"] == "ARMED"


def test_run_wait_returns_with_the_experiments_exit_status(
    rig: RigSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = rig.command("record_start", {"name": "wait"})
    assert Path(rec["path"]).is_absolute() and Path(rec["path"]).exists()
    rig.command("arm")
    f = tmp_path / "short.toml"
    f.write_text(SHORT)
    ep = ["--endpoint", rig.commands, "--telemetry", rig.telemetry, "--timeout", "30"]
    assert main(["run", str(f), "--wait", *ep]) == 0
    assert "experiment finished" in capsys.readouterr().out
    status = rig.request("status")
    assert status["state"] == "ARMED", status.get("fault")  # a trip says which

    # Stopped before its end: exit 1, saying so.
    long_ = SHORT.replace("repeats = 2", "repeats = 600")
    f.write_text(long_)
    codes: list[int] = []
    waiter = threading.Thread(target=lambda: codes.append(main(["run", str(f), "--wait", *ep])))
    waiter.start()
    try:
        assert wait_until(lambda: rig.request("status")["state"] == "RUNNING", 60)
        rig.command("stop")
    finally:
        waiter.join(120)
    assert codes == [1]
    assert "stopped before its end" in capsys.readouterr().err
    stats = rig.command("record_stop")
    assert Path(stats["path"]).is_absolute()
    # Each run leaves what drove it in the recording, for closed-loop validation: the
    # experiment as sent and the gains it ran over.
    recorded = read_run(stats["path"])
    started = [e for e in recorded.events if e["kind"] == "experiment"]
    assert [e["name"] for e in started] == ["short", "short"]
    assert started[0]["experiment"]["segments"] == tomllib.loads(SHORT)["segments"]
    assert started[1]["experiment"]["segments"][0]["repeats"] == 600
    gains = rig.request("describe")["joints"]
    assert [g["p"] for g in started[0]["gains"]] == [j["pid"]["p"] for j in gains]


def test_run_wait_listens_where_the_environment_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "short.toml"
    f.write_text(SHORT)
    # Virtual time: what is tested is where --wait listens, not the loop's timing under load.
    with RigSession(PROFILE_2DOF, tmp_path / "rig", virtual_time=True, estimator=False) as rig:
        rig.command("arm")
        monkeypatch.setenv("RIG_TELEMETRY", rig.telemetry)
        monkeypatch.setenv("RIG_COMMANDS", rig.commands)
        code = main(["run", str(f), "--wait", "--timeout", "30"])
    assert code == 0
    out = capsys.readouterr()
    assert "experiment finished" in out.out
    assert "no telemetry" not in out.err  # it heard the experiment's end, not the state alone
