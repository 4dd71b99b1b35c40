"""The service records where each experiment segment began (`segment` events), so the batch can
give the rows of a segment marked `identify = "fluid"` to the fluid equations alone
(estimator.segment_rows)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daq.recording import read_run
from estimator.segment_rows import fluid_only_rows
from tests.live.conftest import record_experiment

pytestmark = pytest.mark.slow

EXPERIMENT = """
name = "marked"
home_deg = [40.0, 30.0]
[[segments]]
name = "wiggle"
duration_s = 1.0
trajectory = { kind = "sine", amplitude_deg = [2.0, 2.0], frequency_hz = [1.0, 1.0] }
controller = { kind = "pid" }
[[segments]]
name = "compress"
duration_s = 0.6
identify = "fluid"
trajectory = { kind = "hold", position_deg = [44.0, 26.0] }
controller = { kind = "valve_sine", amplitude_v = [0.03, 0.03], frequency_hz = [5.0, 5.0], \
centering_v_per_rad = [1.0, 1.0] }
[[segments]]
name = "rest"
duration_s = 0.4
trajectory = { kind = "hold" }
controller = { kind = "pid" }
"""


def test_segment_boundaries_are_recorded_and_give_the_fluid_rows(tmp_path: Path) -> None:
    path = record_experiment(tmp_path, EXPERIMENT, "segments")
    run = read_run(path)
    marks = [(e["name"], e["seq"]) for e in run.events if e["kind"] == "segment"]
    names = [n for n, _ in marks]
    # Every phase the runner entered, in order: the approach moves between segments included.
    assert [n for n in names if not n.startswith("approach:")] == ["wiggle", "compress", "rest"]
    assert names.index("compress") > names.index("wiggle")
    assert any(n == "approach:compress" for n in names), names
    seqs = [q for _, q in marks]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    seq = np.asarray(run.seq)
    rows = fluid_only_rows(run.events, seq)
    assert len(rows) == 1
    # The marked segment's rows: its 0.6 s at 1 kHz, from the row where the runner entered it.
    period = 1.0 / 1000.0
    assert rows[0].stop - rows[0].start == pytest.approx(0.6 / period, abs=3)
    start = dict(marks)["compress"]
    assert seq[rows[0].start] == start
    # While in it the valves run the sine (no PID): the command swings both ways at 5 Hz.
    cmd = np.asarray(run.column("cmd.valve_1"))[rows[0]]
    assert cmd.max() > 0.02 and cmd.min() < -0.02
