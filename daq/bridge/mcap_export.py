"""A recorded run as MCAP with the live bridge's channels, so Foxglove and PlotJuggler open it.

Every row of the run becomes one message on each row topic (`/rig/joints`, `/rig/pressures`,
…; the same JSON schemas and display units as `rig-bridge`), recorded events go to
`/rig/events`. Log times are the recording's wall-clock start (`start_wall`) plus each row's
`t` from the first row, so rows keep the loop's own spacing (anchors §4, pitfall 4). Two
metadata records carry the run's description (`hydrig.run`) and the SI unit of every recorded
column (`hydrig.units`), so nothing of the original is only in the `.rigrun`.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any, BinaryIO

from daq.bridge.channels import TOPIC_EVENTS, ChannelSet, dumps, jsonable
from daq.recording.reader import Run

PROFILE = "hydrig"


def _roles(run: Run) -> dict[str, str]:
    """Channel name → profile role, from the profile text the run file carries."""
    try:
        prof = tomllib.loads(str(run.meta.get("profile") or ""))
    except tomllib.TOMLDecodeError:
        return {}
    return {str(c.get("name")): str(c.get("role")) for c in prof.get("channels", [])}


def write_mcap(run: Run, f: BinaryIO) -> None:
    from mcap.writer import CompressionType, Writer

    cs = ChannelSet(run.meta["columns"], _roles(run))
    w = Writer(f, compression=CompressionType.ZSTD)
    w.start(profile=PROFILE, library="hydrig")
    ids: dict[str, int] = {}
    for topic, schema in cs.schemas().items():
        sid = w.register_schema(schema["title"], "jsonschema", json.dumps(schema).encode())
        ids[topic] = w.register_channel(topic, "json", sid)
    start_ns = int(float(run.meta.get("start_wall", 0.0)) * 1e9)
    t0 = float(run.data[0, 1]) if len(run.data) else 0.0
    seqs = dict.fromkeys(ids, 0)
    for row in run.data.tolist():
        stamp = start_ns + round((row[1] - t0) * 1e9)
        for topic, msg in cs.row_messages(row).items():
            w.add_message(ids[topic], stamp, dumps(msg), stamp, seqs[topic])
            seqs[topic] += 1
    for k, ev in enumerate(run.events):
        wall = ev.get("wall")
        stamp = int(float(wall) * 1e9) if isinstance(wall, int | float) else start_ns
        w.add_message(ids[TOPIC_EVENTS], stamp, dumps(jsonable(ev)), stamp, k)
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
