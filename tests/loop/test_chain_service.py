"""`rig-daq` runs the excavator (a [chain] profile, four joints) end to end: armed in virtual
time it holds every joint at home, fault-free, and records every row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from daq.loop.states import State

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "hw_profiles" / "sim-excavator.toml"
JOINTS = ["swing", "boom", "stick", "bucket"]
HOME = np.radians([0.0, 0.0, 0.0, 30.0])


def _rig_daq(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "daq.service", "--profile", str(PROFILE), "--no-network"]
    cmd += ["--run-dir", str(tmp / "runs"), "--status-out", str(tmp / "status.json"), *args]
    return subprocess.run(
        cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=600, check=False
    )


def test_the_excavator_is_held_at_home_and_every_row_recorded(tmp_path: Path) -> None:
    recording = pytest.importorskip("daq.recording")
    proc = _rig_daq(tmp_path, "--virtual-time", "--duration", "2", "--record", "--arm")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["fault"] is None and status["state"] == "ARMED"
    (path,) = sorted((tmp_path / "runs").iterdir())
    run = recording.read_run(path)
    seq = run.column("seq")
    assert run.complete
    np.testing.assert_array_equal(seq, np.arange(2000))
    assert not np.any(run.column("fault"))
    armed = run.column("state") == State.ARMED
    assert armed.sum() >= 1900  # armed within the first 100 cycles, then held
    for i, j in enumerate(JOINTS):
        # Arming holds where the joint is (bumpless): the angle read then, i.e. home.
        ref = run.column(f"ref.{j}")[armed]
        assert np.ptp(ref) == 0.0 and abs(np.degrees(ref[0] - HOME[i])) < 0.1
        err = np.degrees(run.column(f"eng.q_{j}")[armed] - ref)
        # The resolver reads 0.02° of noise (1σ) on a 0.022° step: the arm itself barely moves.
        assert np.max(np.abs(err)) < 0.15, (j, np.max(np.abs(err)))
        # The reference is one noisy reading (0.02° 1σ), which the PID then holds: the arm
        # stays between home and it (the mean of 2000 readings within 3σ of home).
        drift = np.degrees(np.mean(run.column(f"eng.q_{j}")[armed]) - HOME[i])
        assert abs(drift) < 0.06, (j, drift)
    for j in ("boom", "stick", "bucket"):  # each jack joint's piston transducer is recorded
        assert np.all(np.isfinite(run.column(f"eng.piston_{j}")))


def test_arm_needs_virtual_time(tmp_path: Path) -> None:
    proc = _rig_daq(tmp_path, "--duration", "1", "--arm")
    assert proc.returncode == 2
    assert "--arm needs --virtual-time" in proc.stderr


SINE = """
name = "short-sine"
home_deg = [0.0, 0.0, 0.0, 30.0]
[[segments]]
name = "sine"
duration_s = 2.0
controller = { kind = "%s" }
[segments.trajectory]
kind = "sine"
amplitude_deg = [2.0, 2.0, 2.0, 2.0]
frequency_hz = [0.5, 0.5, 0.5, 0.5]
# A cosine below home: it starts and ends at home at rest (no approach move, no stop at speed)
center_deg = [-2.0, -2.0, -2.0, 28.0]
phase_deg = [90.0, 90.0, 90.0, 90.0]
"""


def test_run_arms_runs_each_experiment_in_order_and_ends(tmp_path: Path) -> None:
    """`--run A --run B`: both run through the command handler, fault-free, and the service
    ends when the last is over (no --duration), every row recorded."""
    recording = pytest.importorskip("daq.recording")
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text(SINE % "pid")
    # The model feed-forward on the profile's chain, from 2° above home on every joint: the
    # runner's approach move (a trapezoid at half the limits) takes the arm there first.
    b.write_text((SINE % "pid_ff").replace("[-2.0, -2.0, -2.0, 28.0]", "[0.0, 0.0, 0.0, 30.0]"))
    proc = _rig_daq(tmp_path, "--virtual-time", "--record", "--run", str(a), "--run", str(b))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--run: 2 experiment(s) ended fault-free" in proc.stderr
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["fault"] is None and status["state"] == "ARMED"
    (path,) = sorted((tmp_path / "runs").iterdir())
    run = recording.read_run(path)
    assert run.complete and not np.any(run.column("fault"))
    running = run.column("state") == State.RUNNING
    assert running.sum() >= 4000  # both 2 s sines (and their approach moves)
    done = [e for e in run.events if e.get("kind") == "experiment_done"]
    assert len(done) == 2
    # Ended when the last was over: not long after it (the hold between is a few cycles).
    assert len(run.column("seq")) < running.sum() + 2000


def test_run_exits_4_when_an_experiment_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "two-joints.toml"
    bad.write_text((SINE % "pid").replace("[0.0, 0.0, 0.0, 30.0]", "[0.0, 0.0]")
                   .replace("[2.0, 2.0, 2.0, 2.0]", "[2.0, 2.0]")
                   .replace("[0.5, 0.5, 0.5, 0.5]", "[0.5, 0.5]")
                   .replace("[90.0, 90.0, 90.0, 90.0]", "[90.0, 90.0]")
                   .replace("[-2.0, -2.0, -2.0, 28.0]", "[-2.0, -2.0]"))  # fmt: skip
    proc = _rig_daq(tmp_path, "--virtual-time", "--run", str(bad))
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert f"--run: {bad}: refused" in proc.stderr and "2 joints, the rig 4" in proc.stderr


def test_run_refuses_a_missing_file_and_real_time(tmp_path: Path) -> None:
    proc = _rig_daq(tmp_path, "--virtual-time", "--run", str(tmp_path / "nope.toml"))
    assert proc.returncode == 2 and "nope.toml" in proc.stderr
    proc = _rig_daq(tmp_path, "--duration", "1", "--run", str(tmp_path / "nope.toml"))
    assert proc.returncode == 2 and "--run needs --virtual-time" in proc.stderr
