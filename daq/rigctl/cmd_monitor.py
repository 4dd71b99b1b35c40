"""`rigctl monitor`: a live terminal view of channels, state, faults and loop timing.

Reads telemetry (samples, meta, events, status) and redraws a few times a second. `--json`
prints one JSON object per refresh instead (for scripts); `--duration` ends it.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from typing import Any

from rich.console import Group
from rich.live import Live
from rich.table import Table

from daq.rigctl.common import (
    EXIT_OK,
    EXIT_UNREACHABLE,
    add_connection_options,
    add_json_option,
    client_keys,
    fault_text,
)
from daq.telemetry import Event, Meta, SampleBatch, Status, TelemetrySubscriber


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("monitor", help="live view of channels, state, faults, timing")
    add_connection_options(p, telemetry=True)
    add_json_option(p)
    p.add_argument("--rate", type=float, default=4.0, help="refreshes per second (default 4)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.set_defaults(func=run)


class View:
    """What the monitor knows, updated message by message."""

    def __init__(self) -> None:
        self.meta: Meta | None = None
        self.last_row: dict[str, float] = {}
        self.status: dict[str, Any] = {}
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=6)
        self.rows = 0
        self.last_seq: int | None = None

    def update(self, msg: Any) -> None:
        if isinstance(msg, Meta):
            self.meta = msg
        elif isinstance(msg, SampleBatch):
            self.rows += msg.n
            self.last_seq = msg.seq0 + msg.n - 1
            if self.meta is not None and self.meta.layout_id == msg.layout_id:
                self.last_row = dict(zip(self.meta.names, msg.data[:, -1].tolist(), strict=True))
        elif isinstance(msg, Status):
            self.status = msg.header
        elif isinstance(msg, Event):
            self.events.append(msg.header)

    def snapshot(self, lost: int) -> dict[str, Any]:
        return {
            "state": self.status.get("state"),
            "fault": self.status.get("fault"),
            "seq": self.last_seq,
            "rows": self.rows,
            "lost_rows": lost,
            "timing": self.status.get("timing", {}),
            "channels": {k: v for k, v in self.last_row.items() if "." in k},
            "events": list(self.events),
        }

    def render(self, lost: int) -> Group:
        s = self.snapshot(lost)
        head = Table.grid(padding=(0, 2))
        head.add_row("state", str(s["state"]), "fault", fault_text(s["fault"]))
        head.add_row("seq", str(s["seq"]), "lost rows", str(lost))
        timing = Table("timing", "value", title="loop timing")
        for k, v in (s["timing"] or {}).items():
            timing.add_row(str(k), f"{v:.6g}" if isinstance(v, float) else str(v))
        units = {c["name"]: c["unit"] for c in self.meta.header["columns"]} if self.meta else {}
        chans = Table("channel", "value", "unit", title="channels")
        for k, v in s["channels"].items():
            if k.startswith(("eng.", "cmd.", "ref.")):
                chans.add_row(k, f"{v:.6g}", units.get(k, ""))
        events = Table("seq", "kind", "detail", title="events")
        for e in s["events"]:
            detail = {k: v for k, v in e.items() if k not in ("v", "rig", "seq", "t", "kind")}
            events.add_row(str(e.get("seq")), str(e.get("kind")), json.dumps(detail, default=str))
        return Group(head, timing, chans, events)


def run(args: argparse.Namespace) -> int:
    if args.rate <= 0:
        print("rigctl: --rate must be positive", file=sys.stderr)
        return 2
    view = View()
    with TelemetrySubscriber(args.endpoint, keys=client_keys(args)) as sub:
        first = sub.recv(timeout=args.timeout)
        if first is None:
            print(
                f"rigctl: no telemetry from {args.endpoint} within {args.timeout:g} s",
                file=sys.stderr,
            )
            return EXIT_UNREACHABLE
        view.update(first)
        end = None if args.duration is None else time.monotonic() + args.duration
        dt = 1.0 / args.rate
        live = None if args.json else Live(view.render(0), refresh_per_second=args.rate)
        try:
            if live is not None:
                live.start()
            while end is None or time.monotonic() < end:
                next_draw = time.monotonic() + dt
                while (left := next_draw - time.monotonic()) > 0:
                    msg = sub.recv(timeout=left)
                    if msg is not None:
                        view.update(msg)
                if args.json:
                    print(json.dumps(view.snapshot(sub.lost_rows), default=str), flush=True)
                elif live is not None:
                    live.update(view.render(sub.lost_rows))
        finally:
            if live is not None:
                live.stop()
    return EXIT_OK
