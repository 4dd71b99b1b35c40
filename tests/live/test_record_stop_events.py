"""`record_stop` right after an experiment ends keeps the ending's events: the loop reports
them to the service asynchronously, so the recorder must take every event the loop has
already posted before it writes the trailer."""

from __future__ import annotations

from pathlib import Path

import pytest

from daq.recording import read_run
from tests.live.conftest import record_experiment
from tests.live.test_run import SHORT

pytestmark = pytest.mark.slow


def test_events_posted_before_record_stop_are_in_the_file(tmp_path: Path) -> None:
    # The status block shows the end as soon as the loop reaches it; the events may still be
    # on their way to the service when the recording stops.
    path = record_experiment(tmp_path, SHORT, "ending")
    run = read_run(path)
    kinds = [e["kind"] for e in run.events]
    assert "experiment_done" in kinds, kinds
    states = [e.get("state") for e in run.events if e["kind"] == "state"]
    assert states[-1] == "ARMED", states  # RUNNING → ARMED at the experiment's end
