"""A recorded run as MCAP with the live bridge's channels, so Foxglove and PlotJuggler open it.

Every row of the run becomes one message on each row topic (`/rig/joints`, `/rig/pressures`,
…; the same JSON schemas and display units as `rig-bridge`), recorded events go to
`/rig/events` (events of kind `status` or `estimate`, when the run holds any, to `/rig/status`
and `/estimator/estimates`). Log times are the recording's wall-clock start (`start_wall`) plus
each row's `t` from the first row, so rows keep the loop's own spacing (anchors §4, pitfall 4).
An event is stamped on the row it belongs to (its `seq`; the loop clock, never its own `wall`
field, which in virtual time is minutes away from the rows and in real time lags them by the
recorder's queueing), extrapolated by whole periods when that row is not in the file. Two
metadata records carry the run's description (`hydrig.run`) and the SI unit of every recorded
column (`hydrig.units`), so nothing of the original is only in the `.rigrun`.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any, BinaryIO

import numpy as np

from daq.bridge.channels import (
    TOPIC_ESTIMATES,
    TOPIC_EVENTS,
    TOPIC_STATUS,
    ChannelSet,
    dumps,
    jsonable,
)
from daq.recording.reader import Run

PROFILE = "hydrig"


def run_roles(run: Run) -> dict[str, str]:
    """Channel name → profile role, from the profile text the run file carries."""
    try:
        prof = tomllib.loads(str(run.meta.get("profile") or ""))
    except tomllib.TOMLDecodeError:
        return {}
    return {str(c.get("name")): str(c.get("role")) for c in prof.get("channels", [])}


class RunClock:
    """Log times of a run's rows and events on one epoch: `start_wall` + loop time from the
    first row."""

    def __init__(self, run: Run) -> None:
        t_col = run.columns.index("t")
        self.start_ns = int(float(run.meta.get("start_wall", 0.0)) * 1e9)
        self.period = float(run.meta.get("period", 1e-3))
        self.seq = np.asarray(run.seq, dtype=np.int64)
        t = run.data[:, t_col] if len(run.data) else np.zeros(0)
        self.t0 = float(t[0]) if len(t) else 0.0
        self.stamps = self.start_ns + np.round((t - self.t0) * 1e9).astype(np.int64)
        self.start_wall = float(run.meta.get("start_wall", 0.0))

    def row(self, t: float) -> int:
        return self.start_ns + round((t - self.t0) * 1e9)

    def event(self, ev: dict[str, Any]) -> int:
        """The stamp of the row an event belongs to: its `seq` (the row itself, or the nearest
        recorded row ± whole periods), else its `t`, else its wall clock from the start."""
        s = ev.get("seq")
        if isinstance(s, int) and not isinstance(s, bool) and s >= 0 and len(self.seq):
            i = int(np.searchsorted(self.seq, s))
            if i < len(self.seq) and self.seq[i] == s:
                return int(self.stamps[i])
            j = min(max(i - 1, 0), len(self.seq) - 1)
            return int(self.stamps[j]) + round((s - int(self.seq[j])) * self.period * 1e9)
        t = ev.get("t")
        if isinstance(t, int | float) and not isinstance(t, bool):
            return self.row(float(t))
        wall = ev.get("wall")
        if isinstance(wall, int | float) and not isinstance(wall, bool):
            return self.start_ns + round((float(wall) - self.start_wall) * 1e9)
        return self.start_ns


#: Event kinds that are not events but a recorded copy of another channel's message.
_ROUTED = {"status": TOPIC_STATUS, "estimate": TOPIC_ESTIMATES}


def write_mcap(run: Run, f: BinaryIO) -> None:
    from mcap.writer import CompressionType, Writer

    cs = ChannelSet(run.meta["columns"], run_roles(run))
    w = Writer(f, compression=CompressionType.ZSTD)
    w.start(profile=PROFILE, library="hydrig")
    ids: dict[str, int] = {}

    def channel(topic: str, schema: dict[str, Any]) -> None:
        sid = w.register_schema(schema["title"], "jsonschema", json.dumps(schema).encode())
        ids[topic] = w.register_channel(topic, "json", sid)

    for topic, schema in cs.schemas().items():
        channel(topic, schema)
    clock = RunClock(run)
    seqs: dict[str, int] = {}
    for row, stamp in zip(run.data.tolist(), clock.stamps.tolist(), strict=True):
        for topic, msg in cs.row_messages(row).items():
            k = seqs[topic] = seqs.get(topic, -1) + 1
            w.add_message(ids[topic], stamp, dumps(msg), stamp, k)
    for ev in run.events:
        kind = ev.get("kind")
        topic = _ROUTED.get(str(kind), TOPIC_EVENTS)
        if topic == TOPIC_ESTIMATES:
            names = [str(n) for n in ev.get("names", [])]
            if topic not in ids:
                channel(topic, ChannelSet.estimate_schema(names))
            body = dumps(ChannelSet.estimate_message(ev))
        else:
            body = dumps(jsonable(ev))
        stamp = clock.event(ev)
        k = seqs[topic] = seqs.get(topic, -1) + 1
        w.add_message(ids[topic], stamp, body, stamp, k)
    info = {k: v for k, v in run.meta.items() if k not in ("columns", "profile")}
    w.add_metadata("hydrig.run", {k: json.dumps(jsonable(v)) for k, v in info.items()})
    w.add_metadata("hydrig.units", dict(zip(run.columns, run.units, strict=True)))
    w.finish()


def read_units(path: Any) -> dict[str, str]:
    """The `hydrig.units` metadata of an exported MCAP file (column → SI unit)."""
    from mcap.reader import make_reader

    with open(path, "rb") as f:
        for rec in make_reader(f).iter_metadata():
            if rec.name == "hydrig.units":
                return dict(rec.metadata)
    return {}
