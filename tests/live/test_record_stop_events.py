"""`record_stop` right after an experiment ends keeps the ending's events: the loop reports
them to the service asynchronously, so the recorder must take every event the loop has
already posted before it writes the trailer."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from daq.recording import read_run
from rigctl.session import RigSession
from tests.live.conftest import PROFILE_2DOF
from tests.live.test_run import SHORT
from tests.telemetry.conftest import wait_until

pytestmark = pytest.mark.slow


def test_events_posted_before_record_stop_are_in_the_file(tmp_path: Path) -> None:
    with RigSession(PROFILE_2DOF, tmp_path / "rig", virtual_time=True, estimator=False) as s:
        path = Path(s.command("record_start", {"name": "ending"})["path"])
        s.command("arm")
        s.command("run", {"experiment": tomllib.loads(SHORT)})
        # The status block shows the end as soon as the loop reaches it; the events may
        # still be on their way to the service. Stop the recording at once.
        assert wait_until(lambda: s.request("status")["state"] != "RUNNING", 300)
        s.command("record_stop")
    run = read_run(path)
    kinds = [e["kind"] for e in run.events]
    assert "experiment_done" in kinds, kinds
    states = [e.get("state") for e in run.events if e["kind"] == "state"]
    assert states[-1] == "ARMED", states  # RUNNING → ARMED at the experiment's end
