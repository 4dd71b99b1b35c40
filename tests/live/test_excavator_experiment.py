"""The excavator's link-by-link experiment through the service and its command API: rig-daq on
the [chain] profile in virtual time, armed and run as `rigctl` does, finishes fault-free within
the interlocks' limits, and its recording holds every row (84 s of loop time, ≈ 1 min)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daq.loop.states import State
from daq.recording import read_run
from rigctl.session import RigSession

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "hw_profiles" / "sim-excavator.toml"
EXPERIMENT = ROOT / "experiments" / "excavator-linkwise.toml"


def run_recorded(experiment: dict, tmp_path: Path, name: str) -> Any:
    """Run `experiment` through rig-daq and its command API, fault-free; its recording."""
    with RigSession(PROFILE, tmp_path / "rig", virtual_time=True, estimator=False) as s:
        path = Path(s.command("record_start", {"name": name})["path"])
        status = s.run_experiment(experiment, timeout=600.0)
        assert status["fault"] is None
        s.command("record_stop")
    return read_run(path)


def test_the_link_by_link_experiment_runs_through_the_service(tmp_path: Path) -> None:
    experiment = tomllib.loads(EXPERIMENT.read_text())
    run = run_recorded(experiment, tmp_path, "linkwise")
    assert run.complete
    seq = run.column("seq")
    np.testing.assert_array_equal(seq, np.arange(seq[0], seq[0] + len(seq)))
    running = run.column("state") == State.RUNNING
    assert running.sum() >= 84_000  # the whole plan (2 + 4 × 2 × 10 + 2 s)
    assert not np.any(run.column("fault"))
    for j in ("swing", "boom", "stick", "bucket"):
        q, ref = run.column(f"eng.q_{j}")[running], run.column(f"ref.{j}")[running]
        assert np.ptp(ref) > np.radians(5.0), j  # each joint was moved in its segment …
        assert np.max(np.abs(q - ref)) < np.radians(3.0), j  # … and followed


def test_the_model_feed_forward_runs_through_the_service(tmp_path: Path) -> None:
    """`pid_ff` on the excavator: the service builds the law on the profile's chain (no
    parameter file describes a chain) and the loop runs it on its Python path, fault-free,
    following one period of the multisine far closer than the PID's 3° limit."""
    experiment = tomllib.loads((ROOT / "experiments" / "excavator-multisine.toml").read_text())
    settle, sine = experiment["segments"][:2]
    experiment["segments"] = [settle, dict(sine, repeats=1, controller={"kind": "pid_ff"})]
    run = run_recorded(experiment, tmp_path, "ff")
    assert run.complete and not np.any(run.column("fault"))
    running = np.flatnonzero(run.column("state") == State.RUNNING)
    assert running.size >= 12_000  # the settle's 2 s and the multisine's 10 s
    moving = running[2_500:]  # after the settle hold and into the multisine
    for j in ("swing", "boom", "stick", "bucket"):
        q, ref = run.column(f"eng.q_{j}")[moving], run.column(f"ref.{j}")[moving]
        assert np.ptp(ref) > np.radians(3.0), j
        assert np.max(np.abs(q - ref)) < np.radians(0.6), (j, np.degrees(np.abs(q - ref).max()))
