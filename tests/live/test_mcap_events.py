"""MCAP export: every event lands on the row it belongs to (within one cycle), whatever its
own wall-clock field says, in virtual time (wall minutes away from the rows) and real time (wall
lagging by the recorder's queueing); recorded status and estimates go to their own topics."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daq.bridge.mcap_export import write_mcap
from daq.profile import load_profile
from daq.recording.reader import Run
from daq.sample_layout import SampleLayout
from tests.live.conftest import PROFILE_2DOF

mcap_reader = pytest.importorskip("mcap.reader")

PERIOD = 1e-3
START_WALL = 1_700_000_000.0


def make_run(t: np.ndarray, seq: np.ndarray, events: list[dict[str, Any]]) -> Run:
    columns = SampleLayout.from_profile(load_profile(PROFILE_2DOF)).to_dict()
    names = tuple(str(c["name"]) for c in columns)
    data = np.zeros((len(t), len(names)))
    data[:, names.index("t")] = t
    data[:, names.index("seq")] = seq
    meta = {"columns": columns, "period": PERIOD, "start_wall": START_WALL, "rig": "x"}
    return Run(Path("x.rigrun"), meta, names, data, events, None, False, [], 0, seq)


def export(run: Run) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    buf = io.BytesIO()
    write_mcap(run, buf)
    buf.seek(0)
    out: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for _, ch, m in mcap_reader.make_reader(buf).iter_messages():
        out.setdefault(ch.topic, []).append((m.log_time, json.loads(m.data)))
    return out


@pytest.mark.parametrize("virtual", [True, False])
def test_events_are_stamped_on_their_rows(virtual: bool) -> None:
    seq = np.arange(1000, 3000)
    rng = np.random.default_rng(1)
    # Virtual time: t exactly seq·period, the wall clock runs 100× faster; real time: t with
    # wake-up jitter, events' wall 8–258 ms after their row (the recorder's queueing).
    t = seq * PERIOD + (0.0 if virtual else rng.uniform(0, 2e-4, len(seq)))
    events = []
    for s in (1000, 1500, 2999):
        row_t = float(t[s - 1000])
        wall = START_WALL + (row_t - t[0]) * (0.01 if virtual else 1.0)
        wall += 0.0 if virtual else rng.uniform(0.008, 0.258)
        events.append({"kind": "state", "seq": s, "t": row_t, "wall": wall, "state": "ARMED"})
    # A recorder event names the next row to be published: one past the last recorded row.
    events.append({"kind": "recording_stopped", "seq": 3000, "wall": START_WALL + 99.0})
    out = export(make_run(t, seq, events))
    rows = {m["seq"]: stamp for stamp, m in out["/rig/joints"]}
    evs = out["/rig/events"]
    assert len(evs) == 4
    for stamp, ev in evs:
        s = ev["seq"]
        row = rows.get(s, rows[max(rows)] + round((s - max(rows)) * PERIOD * 1e9))
        assert abs(stamp - row) <= PERIOD * 1e9, (ev, stamp - row)


def test_recorded_status_and_estimates_go_to_their_topics() -> None:
    seq = np.arange(0, 100)
    status = {"kind": "status", "seq": 50, "t": 0.05, "state": "IDLE", "fault": None}
    estimate = {"kind": "estimate", "seq": 60, "t": 0.06, "data_seq": 58, "names": ["1/b", "m"],
                "theta": [2.0, 3.0], "cov": [[0.04, 0.0], [0.0, 0.09]]}  # fmt: skip
    out = export(make_run(seq * PERIOD, seq, [status, estimate]))
    (st,) = out["/rig/status"]
    assert st[1]["state"] == "IDLE"
    (est,) = out["/estimator/estimates"]
    assert est[1]["theta"] == {"inv_b": 2.0, "m": 3.0}
    assert est[1]["sigma"]["m"] == pytest.approx(0.3)
    rows = {m["seq"]: stamp for stamp, m in out["/rig/joints"]}
    assert st[0] == rows[50] and est[0] == rows[60]
    assert "/rig/events" not in out
