"""A recorded run as MCAP with the live bridge's channels, so Foxglove and PlotJuggler open it.

The live bridge's `Station` writes it (the same topics, schemas and bodies as `rig-bridge` and
its replay): every row of the run on each row topic (`/rig/joints`, `/rig/pressures`, …),
recorded events on `/rig/events` and `/rig/log` (events of kind `status` or `estimate`, when the
run holds any, on `/rig/status` + `/diagnostics` and `/estimator/estimates`), and with the
profile's geometry the arm (`/tf`, `/rig/scene`) every `EXPORT_ARM_STEP`-th row. Log times are
the recording's wall-clock start (`start_wall`) plus each row's `t` from the first row, so rows
keep the loop's own spacing (anchors §4, pitfall 4). An event is stamped on the row it belongs
to (its `seq`; the loop clock, never its own `wall` field, which in virtual time is minutes away
from the rows and in real time lags them by the recorder's queueing), extrapolated by whole
periods when that row is not in the file. Two metadata records carry the run's description
(`hydrig.run`) and the SI unit of every recorded column (`hydrig.units`), so nothing of the
original is only in the `.rigrun`.
"""

from __future__ import annotations

import json
import logging
import tomllib
from collections.abc import Sequence
from typing import Any, BinaryIO

import numpy as np

from daq.bridge.channels import jsonable
from daq.bridge.station import Station
from daq.recording.reader import Run
from daq.telemetry.wire import SCHEMA_VERSION

log = logging.getLogger(__name__)

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


ROW, EVENT, STATUS, ESTIMATE = 0, 1, 2, 3
#: Event kinds that are not events but a recorded copy of another channel's message.
_ROUTED = {"status": STATUS, "estimate": ESTIMATE}
#: Rows per arm pose in an export (the arm's messages are large; 50 Hz at 1 kHz).
EXPORT_ARM_STEP = 20


def run_items(
    run: Run, step: int = 1, *, keep_wall: bool = False
) -> list[tuple[int, int, int, Any]]:
    """A run as a timeline `(log time, order, kind, body)`, sorted: every `step`-th row (by
    `seq`, as the live bridge decimates) and every event, shaped as the telemetry's (`v`,
    `rig`; the recorder's own `wall` only if `keep_wall`); status and estimate events as their
    own kinds."""
    clock = RunClock(run)
    rig = str(run.meta.get("rig", ""))
    rows = run.data.tolist()
    items: list[tuple[int, int, int, Any]] = [
        (int(clock.stamps[i]), 1, ROW, rows[i])
        for i in np.flatnonzero(run.seq % step == 0).tolist()
    ]
    for ev in run.events:
        body = {"v": SCHEMA_VERSION, "rig": rig,
                **{k: v for k, v in ev.items() if keep_wall or k != "wall"}}  # fmt: skip
        items.append((clock.event(ev), 0, _ROUTED.get(str(ev.get("kind")), EVENT), body))
    items.sort(key=lambda x: (x[0], x[1]))
    return items


def play(station: Station, item: tuple[int, int, int, Any], arm: bool = True) -> None:
    """Send one timeline item to the station's channels."""
    ns, _, kind, body = item
    if kind == ROW:
        station.rows(body, ns, arm)
    elif kind == EVENT:
        station.event(body, ns)
    elif kind == STATUS:
        station.status(body, ns)
    else:
        station.estimate(body, ns)


def run_arm(run: Run) -> Any:
    """The arm model from the profile the run carries (None if it has no plant geometry)."""
    from daq.bridge.arm3d import arm_from_profile
    from daq.profile import ProfileError
    from daq.profile.loader import parse_profile

    try:
        profile = parse_profile(tomllib.loads(str(run.meta.get("profile") or "")), run.path)
    except (ProfileError, tomllib.TOMLDecodeError, ValueError) as e:
        log.warning("%s: its profile does not load (%s): no 3-D arm", run.path, e)
        return None
    return arm_from_profile(profile)


class McapSink:
    """The station's channels into an MCAP writer (statuses are the live server's only)."""

    def __init__(self, writer: Any) -> None:
        self.w = writer
        self.seq: dict[int, int] = {}

    def add_channel(self, topic: str, schema: dict[str, Any]) -> int:
        sid = self.w.register_schema(schema["title"], "jsonschema", json.dumps(schema).encode())
        cid: int = self.w.register_channel(topic, "json", sid)
        return cid

    def remove_channels(self, ids: Sequence[int]) -> None:
        pass

    def log(self, channel_id: int, payload: bytes, log_time: int) -> None:
        k = self.seq[channel_id] = self.seq.get(channel_id, -1) + 1
        self.w.add_message(channel_id, log_time, payload, log_time, k)

    def publish_status(self, message: str, level: int, status_id: str) -> None:
        pass

    def remove_status(self, status_id: str) -> None:
        pass


def write_mcap(run: Run, f: BinaryIO) -> None:
    from mcap.writer import CompressionType, Writer

    w = Writer(f, compression=CompressionType.ZSTD)
    w.start(profile=PROFILE, library="hydrig")
    station = Station(McapSink(w), str(run.meta.get("rig", "")))
    station.set_layout(run.meta["columns"], run_roles(run), run_arm(run))
    seq_col = run.columns.index("seq")
    for item in run_items(run, keep_wall=True):
        arm = item[2] == ROW and int(item[3][seq_col]) % EXPORT_ARM_STEP == 0
        play(station, item, arm)
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
