"""`rigctl monitor`'s view without a terminal: a restarted service's view holds none of the old
one's events; a short terminal gets a note saying what was cut; the channel line never parts a
value from its unit."""

from __future__ import annotations

import io
import re
from typing import Any

import numpy as np
from rich.console import Console

from daq.profile import load_profile
from daq.sample_layout import SampleLayout
from daq.telemetry import Event, Meta, SampleBatch
from rigctl.cmd_monitor import View
from tests.live.conftest import PROFILE_2DOF

COLUMNS = SampleLayout.from_profile(load_profile(PROFILE_2DOF)).to_dict()
NAMES = [c["name"] for c in COLUMNS]


def meta() -> Meta:
    return Meta({"v": 1, "rig": "sim2dof", "layout_id": "L", "period": 1e-3, "columns": COLUMNS})


def batch(seq0: int, n: int = 20, value: float = 1.0) -> SampleBatch:
    data = np.full((len(NAMES), n), value)
    data[NAMES.index("seq")] = np.arange(seq0, seq0 + n)
    data[NAMES.index("state")] = 0
    head = {"v": 1, "rig": "sim2dof", "layout_id": "L", "seq0": seq0, "n": n}
    return SampleBatch(head, data)


def event(seq: int, kind: str, **kw: Any) -> Event:
    return Event({"v": 1, "rig": "sim2dof", "seq": seq, "t": seq * 1e-3, "kind": kind, **kw})


def text(view: View, width: int, height: int | None) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, force_terminal=False).print(view.render(0, width, height))
    return buf.getvalue()


def test_restart_forgets_the_old_services_events() -> None:
    v = View()
    v.update(meta())
    v.update(batch(50_000))
    v.update(event(50_010, "fault", name="PRESSURE"))
    v.update(Event({"v": 1, "rig": "sim2dof", "seq": 50_015, "t": 50.0, "kind": "state",
                    "state": "FAULT"}))  # fmt: skip
    v.sample_history()
    v.update(event(3, "state", state="ARMED"))  # the new service's first event, before its rows
    v.update(batch(0))  # cycle numbers start again: a new service
    assert [e["kind"] for e in v.events] == ["state"] and v.events[0]["seq"] == 3
    assert "PRESSURE" not in text(v, 80, None)
    assert v.history == {} and v.status == {}


def test_short_terminal_says_what_was_cut() -> None:
    v = View()
    v.update(meta())
    v.update(batch(0))
    for k in range(3):
        v.update(event(k, "note", text=f"n{k}"))
    full = text(v, 80, None).rstrip("\n").splitlines()
    out = text(v, 80, 8).rstrip("\n").splitlines()
    assert len(out) == 8
    assert out[:7] == full[:7]
    assert out[-1] == f"… {len(full) - 7} line(s) cut: the terminal has 8 rows"
    assert text(v, 80, len(full)).rstrip("\n").splitlines() == full  # fits: nothing cut


def test_channel_line_keeps_value_and_unit_together() -> None:
    v = View()
    v.update(meta())
    v.update(batch(0, value=12.345))
    for width in (30, 41, 57, 80):
        lines = text(v, width, None).splitlines()
        items = [c for c in COLUMNS if c.get("role") == "cmd" or
                 (c.get("role") == "eng" and c.get("unit") not in ("Pa", "rad"))]  # fmt: skip
        assert items
        for c in items:
            rx = re.compile(rf"(^|  ){re.escape(str(c['channel']))} \S+ \S+")
            assert any(rx.search(line) for line in lines), (width, c["channel"], lines)
