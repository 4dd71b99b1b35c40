"""`rigctl monitor`: a live terminal view of the rig that fits 80×24.

State (coloured: FAULT/ESTOP red, RUNNING green, ARMED yellow), the latched fault, experiment
progress (segment, repeat, time left), joints (position, reference, error in degrees, with a
sparkline of the last seconds), pressures in bar with sparklines, the other channels in their
display units, loop timing and the last events. When telemetry stops, the view says
**NO DATA** (with the age of the last sample) within `STALE_S` + one redraw, and goes back to
live when the service returns (ZeroMQ reconnects by itself); a restarted service (its cycle
numbers start again) clears the previous one's events, status and sparklines. Rows that do not
fit the terminal are cut with a note saying how many; `--json` prints one JSON object per
refresh instead (SI units, for scripts); `--duration` ends it.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import sys
import time
from typing import Any

from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from daq.bridge.channels import display
from daq.loop.states import State
from daq.telemetry import Event, Meta, SampleBatch, Status, TelemetrySubscriber
from rigctl.common import (
    EXIT_OK,
    EXIT_UNREACHABLE,
    add_connection_options,
    add_json_option,
    client_keys,
    fault_text,
)

#: Seconds without a sample batch after which the view says NO DATA (batches come every 20 ms).
STALE_S = 0.5
SPARK = "▁▂▃▄▅▆▇█"
SPARK_LEN = 28
STATE_STYLE = {"FAULT": "bold white on red", "ESTOP": "bold white on red", "RUNNING": "bold green",
               "ARMED": "bold yellow", "IDLE": "bold"}  # fmt: skip


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("monitor", help="live view of state, progress, joints, pressures")
    add_connection_options(p, telemetry=True)
    add_json_option(p)
    p.add_argument("--rate", type=float, default=4.0, help="refreshes per second (default 4)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.set_defaults(func=run)


def sparkline(values: collections.abc.Iterable[float]) -> str:
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    span = hi - lo
    top = len(SPARK) - 1
    return "".join(
        SPARK[0 if span <= 0 or not math.isfinite(v) else round((v - lo) / span * top)]
        for v in values
    )


def _fmt(v: float, spec: str) -> str:
    return format(v, spec) if math.isfinite(v) else "-"


def _us(d: dict[str, Any], k: str) -> str:
    v = d.get(k)
    return f"{v:.0f}" if isinstance(v, float | int) and math.isfinite(v) else "-"


def progress(runner: dict[str, Any] | None) -> dict[str, Any] | None:
    """Experiment progress from the status' `runner` map: segment, repeat, time left."""
    if not runner or runner.get("kind") != "ExperimentRunner":
        return None
    total, elapsed = runner.get("total_duration"), runner.get("elapsed")
    out: dict[str, Any] = {
        "segment": runner.get("segment_name"),
        "index": runner.get("segment_index"),
        "elapsed_s": elapsed,
        "left_s": max(0.0, total - elapsed) if isinstance(total, float | int) and
        isinstance(elapsed, float | int) else None,
    }  # fmt: skip
    dur, reps = runner.get("segment_duration"), runner.get("segment_repeats")
    tin = runner.get("time_in_segment")
    if isinstance(dur, float | int) and dur > 0 and isinstance(tin, float | int) and reps:
        out["repeat"] = min(int(reps), int(tin // dur) + 1)
        out["repeats"] = int(reps)
    return out


def progress_text(p: dict[str, Any] | None) -> str:
    if p is None:
        return "no experiment running"
    rep = f", repeat {p['repeat']}/{p['repeats']}" if p.get("repeats", 1) > 1 else ""
    left = p.get("left_s")
    left_text = f", {left:.1f} s left" if isinstance(left, float | int) else ""
    index = p["index"] + 1 if isinstance(p.get("index"), int) else "?"
    return f"'{p['segment']}' (segment {index}){rep}: {p['elapsed_s']:.1f} s in{left_text}"


class View:
    """What the monitor knows, updated message by message."""

    def __init__(self, history: int = SPARK_LEN) -> None:
        self.meta: Meta | None = None
        self.last_row: dict[str, float] = {}
        self.status: dict[str, Any] = {}
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=3)
        self.rows = 0
        self.last_seq: int | None = None
        self.last_data: float | None = None  # monotonic time of the last sample batch
        self.history: dict[str, collections.deque[float]] = {}
        self._hist_len = history

    def update(self, msg: Any) -> None:
        if isinstance(msg, Meta):
            self.meta = msg
        elif isinstance(msg, SampleBatch):
            if self.last_seq is not None and msg.seq0 <= self.last_seq:
                self._restarted(msg.seq0 + msg.n)
            self.rows += msg.n
            self.last_seq = msg.seq0 + msg.n - 1
            self.last_data = time.monotonic()
            if self.meta is not None and self.meta.layout_id == msg.layout_id:
                self.last_row = dict(zip(self.meta.names, msg.data[:, -1].tolist(), strict=True))
        elif isinstance(msg, Status):
            self.status = msg.header
        elif isinstance(msg, Event):
            self.events.append(msg.header)

    def _restarted(self, seq_end: int) -> None:
        """The service started again (cycle numbers went back): forget what the old one said;
        keep only events numbered within the new one's rows (they may come before its first
        batch)."""
        kept = [e for e in self.events if isinstance(e.get("seq"), int) and e["seq"] < seq_end]
        self.events.clear()
        self.events.extend(kept)
        self.status = {}
        self.history.clear()
        self.last_row = {}

    def age(self, now: float | None = None) -> float | None:
        if self.last_data is None:
            return None
        return (time.monotonic() if now is None else now) - self.last_data

    def stale(self, now: float | None = None) -> bool:
        age = self.age(now)
        return age is None or age > STALE_S

    def sample_history(self) -> None:
        """Append the newest value of every plotted column (called once per redraw)."""
        if self.stale():
            return
        for name, value in self.last_row.items():
            if name.startswith(("eng.", "ref.")):
                h = self.history.setdefault(name, collections.deque(maxlen=self._hist_len))
                h.append(value)

    def state_name(self) -> str:
        code = self.last_row.get("state")
        if code is not None and int(code) in State._value2member_map_:
            return State(int(code)).name
        return str(self.status.get("state", "?"))

    def snapshot(self, lost: int) -> dict[str, Any]:
        age = self.age()
        return {
            "state": self.status.get("state"),
            "fault": self.status.get("fault"),
            "station": self.status.get("station"),
            "seq": self.last_seq,
            "rows": self.rows,
            "lost_rows": lost,
            "stale": self.stale(),
            "age_s": age,
            "progress": progress(self.status.get("runner")),
            "timing": self.status.get("timing", {}),
            "channels": {k: v for k, v in self.last_row.items() if "." in k},
            "events": list(self.events),
        }

    # ------------------------------------------------------------------ rendering

    def _columns(self) -> list[dict[str, Any]]:
        return list(self.meta.header["columns"]) if self.meta is not None else []

    def _head(self, lost: int) -> Text:
        rig = str(
            self.status.get("rig") or (self.meta.header.get("rig") if self.meta else "") or "?"
        )
        age = self.age()
        if self.stale():
            since = "never" if age is None else f"for {age:.1f} s"
            t = Text(f" NO DATA {since} ", style="bold white on red")
            t.append(f"  {rig}  last: {self.state_name()} seq {self.last_seq}", style="dim")
            return t
        state = self.state_name()
        t = Text(f"{rig}  ")
        t.append(f" {state} ", style=STATE_STYLE.get(state, "bold"))
        t.append(f"  seq {self.last_seq}  lost {lost}")
        station = self.status.get("station") or {}
        if station.get("power"):
            t.append(
                f"  power {station['power']}" + (" (jogging)" if station.get("jogging") else "")
            )
        if station.get("shunt"):
            t.append(f"  SHUNTED {', '.join(station['shunt'])}", style="bold yellow")
        fault = self.status.get("fault")
        if fault:
            t.append(f"\nfault: {fault_text(fault)}", style="bold red")
        return t

    def _joints(self) -> Table:
        tab = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
        for head in ("joint", "pos °", "ref °", "err °", "position (last s)"):
            tab.add_column(head, justify="right" if "°" in head else "left", no_wrap=True)
        for c in self._columns():
            if c.get("role") == "ref":
                j = c["joint"]
                pos_col = next(
                    (x["name"] for x in self._columns()
                     if x.get("role") == "eng" and x.get("joint") == j and x.get("unit") == "rad"),
                    None,
                )  # fmt: skip
                k = display("rad")[1]
                pos = self.last_row.get(pos_col, math.nan) * k if pos_col else math.nan
                ref = self.last_row.get(c["name"], math.nan) * k
                spark = sparkline(self.history.get(pos_col or "", []))
                tab.add_row(
                    str(j), _fmt(pos, ".2f"), _fmt(ref, ".2f"), _fmt(ref - pos, "+.2f"), spark
                )
        return tab

    def _pressures(self) -> Table:
        tab = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
        for head in ("pressure", "bar", "last s"):
            tab.add_column(head, justify="right" if head == "bar" else "left", no_wrap=True)
        for c in self._columns():
            if c.get("role") == "eng" and c.get("unit") == "Pa":
                v = self.last_row.get(c["name"], math.nan) * display("Pa")[1]
                tab.add_row(
                    str(c["channel"]), f"{v:.2f}", sparkline(self.history.get(c["name"], []))
                )
        return tab

    def _others(self, width: int) -> Text:
        """`channel value unit` items packed into lines of `width`, never split inside an item
        (rich would wrap at any space, parting a value from its unit)."""
        parts = []
        for c in self._columns():
            role, unit = c.get("role"), str(c.get("unit"))
            if (role == "eng" and unit not in ("Pa", "rad")) or role == "cmd":
                disp, k = display(unit)
                v = self.last_row.get(c["name"], math.nan) * k
                parts.append(f"{c['channel']} {_fmt(v, '.3g')} {disp}")
        lines: list[str] = []
        for part in parts:
            if lines and len(lines[-1]) + 2 + len(part) <= width:
                lines[-1] += "  " + part
            else:
                lines.append(part)
        return Text("\n".join(lines), no_wrap=True, overflow="ellipsis")

    def _timing(self) -> Text:
        tm = self.status.get("timing") or {}
        wake, comp = tm.get("wake_latency_us") or {}, tm.get("compute_time_us") or {}
        f = _us
        return Text(
            f"timing µs: wake p99 {f(wake, 'p99')} max {f(wake, 'max')}  compute p99 "
            f"{f(comp, 'p99')} max {f(comp, 'max')}  overruns {tm.get('overruns', '-')}",
            style="dim",
        )

    def _events(self) -> Text:
        lines = []
        for e in self.events:
            detail = {k: v for k, v in e.items() if k not in ("v", "rig", "seq", "t", "kind")}
            text = f"{e.get('seq')} {e.get('kind')} {json.dumps(detail, default=str)}"
            lines.append(text[:78])
        return Text("\n".join(lines), style="dim")

    def render(self, lost: int, width: int = 80, height: int | None = None) -> Group:
        """The view for a terminal of `width` × `height`; what does not fit is cut from the
        bottom and a last line says how many lines were cut."""
        from rich.console import Console

        style = "dim" if self.stale() else "cyan"  # as of the last data
        prog = Text(progress_text(progress(self.status.get("runner"))), style=style)
        group = Group(
            self._head(lost), prog, self._joints(), self._pressures(), self._others(width),
            self._timing(), self._events(),
        )  # fmt: skip
        if height is None:
            return group
        console = Console(width=width, height=height, force_terminal=True, color_system=None)
        lines = console.render_lines(group, console.options, pad=False, new_lines=False)
        if len(lines) <= height:
            return group
        keep = max(0, height - 1)
        cut = len(lines) - keep
        out = Text()
        for line in lines[:keep]:
            for seg in line:
                out.append(seg.text, seg.style)
            out.append("\n")
        out.append(f"… {cut} line(s) cut: the terminal has {height} rows", style="bold yellow")
        return Group(out)


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
        live = None
        if not args.json:
            live = Live(view.render(0), auto_refresh=False, vertical_overflow="crop")

        def screen() -> Group:
            assert live is not None
            size = live.console.size
            return view.render(sub.lost_rows, size.width, size.height)

        try:
            if live is not None:
                live.start()
            while end is None or time.monotonic() < end:
                next_draw = time.monotonic() + dt
                while (left := next_draw - time.monotonic()) > 0:
                    msg = sub.recv(timeout=left)
                    if msg is not None:
                        view.update(msg)
                view.sample_history()
                if args.json:
                    print(json.dumps(view.snapshot(sub.lost_rows), default=str), flush=True)
                elif live is not None:
                    live.update(screen(), refresh=True)
        finally:
            if live is not None:
                live.stop()
    return EXIT_OK
