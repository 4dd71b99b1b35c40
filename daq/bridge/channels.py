"""Sample rows, status, events and estimates → Foxglove JSON channels (topic, schema, message).

One `ChannelSet` per column layout (the telemetry `meta`, or a run file's columns). The live
bridge and the MCAP export both use it, so a recording opened in Foxglove shows the same topics,
schemas and fields as the live view (docs/live-view.md lists them).

Units are the profile's display units, not the wire's SI: angles in degrees, pressures in bar,
lengths in mm, times in µs; each schema field says its unit in its `description` and the field
names end in the unit. JSON has no NaN: non-finite values become null (browsers reject `NaN`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from daq.loop.interlocks import Trip
from daq.loop.states import State

#: SI unit on the wire → (display unit, factor).
DISPLAY: dict[str, tuple[str, float]] = {
    "rad": ("deg", 180.0 / math.pi),
    "Pa": ("bar", 1e-5),
    "m": ("mm", 1e3),
    "s": ("us", 1e6),
}

TOPIC_JOINTS = "/rig/joints"
TOPIC_PRESSURES = "/rig/pressures"
TOPIC_VALVES = "/rig/valves"
TOPIC_SENSORS = "/rig/sensors"
TOPIC_STATE = "/rig/state"
TOPIC_TIMING = "/rig/timing"
TOPIC_STATUS = "/rig/status"
TOPIC_EVENTS = "/rig/events"
TOPIC_ESTIMATES = "/estimator/estimates"


def display(unit: str) -> tuple[str, float]:
    return DISPLAY.get(unit, (unit, 1.0))


def finite(x: float) -> float | None:
    """JSON-safe number: NaN/inf → null."""
    return x if math.isfinite(x) else None


def jsonable(obj: Any) -> Any:
    """Maps, lists and numbers made JSON-safe (non-finite floats → null, other objects → str)."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, int | str):
        return obj
    if isinstance(obj, float):
        return finite(obj)
    try:
        return finite(float(obj))
    except (TypeError, ValueError):
        return str(obj)


def dumps(msg: Mapping[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":"), allow_nan=False).encode()


def field_name(name: str) -> str:
    """A parameter or channel name as a plain identifier Foxglove message paths accept
    (`Cf++1` → `Cfpp1`, `Cf+-1` → `Cfpm1`, `1/b` → `inv_b`)."""
    s = name.replace("1/", "inv_").replace("+", "p").replace("-", "m")
    s = re.sub(r"\W+", "_", s)
    return s if s and not s[0].isdigit() else f"_{s}"


def _object(title: str, props: Mapping[str, Any], description: str = "") -> dict[str, Any]:
    return {"title": title, "type": "object", "description": description, "properties": props}


def _num(desc: str) -> dict[str, Any]:
    return {"type": ["number", "null"], "description": desc}


def _group(names: Sequence[str], desc: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": desc,
        "properties": {n: _num(desc) for n in names},
    }


_HEAD = {
    "t": _num("s since the loop started (loop clock)"),
    "seq": {"type": "integer", "description": "loop cycle number of the row"},
}


def _map(desc: str, props: Mapping[str, Any] | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {"type": ["object", "null"], "description": desc}
    if props:
        m["properties"] = dict(props)
    return m


_PERCENTILES = _map("µs", {k: _num("µs") for k in ("p50", "p99", "p99.9", "max")})
#: The status message's keys (docs/protocol.md, `status`), so Foxglove offers them as paths.
STATUS_FIELDS: dict[str, Any] = {
    "v": {"type": "integer", "description": "protocol version"},
    "rig": {"type": "string", "description": "rig id"},
    "state": {"type": "string", "enum": [s.name for s in State]},
    "fault": _map("latched fault (as the fault event), null if none", {
        "code": {"type": "integer"}, "name": {"type": "string"}, "where": {"type": "string"},
        "value": _num("measured value"), "limit": _num("limit"),
        "message": {"type": "string"},
    }),
    "seq": {"type": "integer", "description": "newest executed cycle"},
    "t": _num("s, loop clock of that cycle"),
    "timing": _map("loop timing", {
        "cycles": {"type": "integer"}, "period_us": _num("µs"),
        "overruns": {"type": "integer"}, "consecutive_overruns": {"type": "integer"},
        "max_consecutive_overruns": {"type": "integer"}, "skipped_cycles": {"type": "integer"},
        "wake_latency_us": _PERCENTILES, "compute_time_us": _PERCENTILES,
    }),
    "recorder": _map("recording state", {
        "active": {"type": "boolean"}, "path": {"type": ["string", "null"]},
        "rows_written": {"type": "integer"}, "lost": {"type": "integer"},
        "bytes_written": {"type": "integer"}, "error": {"type": ["string", "null"]},
        "complete": {"type": "boolean"},
    }),
    "telemetry": _map("publisher counters and health", {
        k: {"type": "integer"} for k in ("batches_sent", "rows_sent", "dropped_batches",
                                         "lost_rows", "lapped", "events_sent",
                                         "dropped_events", "dropped_other", "restarts")
    } | {"alive": {"type": "boolean"}, "last_error": {"type": ["string", "null"]}}),
    "commands": _map("command socket counters", {
        "requests": {"type": "integer"}, "errors": {"type": "integer"}}),
    "runner": _map("the active runner, null if none", {
        "kind": {"type": "string"}, "segment_index": {"type": "integer"},
        "segment_name": {"type": "string"}, "elapsed": _num("s"),
        "total_duration": _num("s"), "time_in_segment": _num("s"),
        "segment_duration": _num("s, one repeat"), "segment_repeats": {"type": "integer"},
    }),
}  # fmt: skip


@dataclass(frozen=True)
class _Field:
    key: str  # name in the message group
    col: int
    factor: float


class ChannelSet:
    """The channels of one column layout and the messages of one row."""

    def __init__(
        self, columns: Sequence[Mapping[str, Any]], roles: Mapping[str, str] | None = None
    ):
        """`columns`: meta's column maps (name, unit, role, channel, joint); `roles`: channel
        name → profile role (`lvdt` marks a spool position), optional."""
        roles = dict(roles or {})
        names = [str(c["name"]) for c in columns]
        self.width = len(names)
        idx = {n: i for i, n in enumerate(names)}
        self._seq, self._t = idx["seq"], idx["t"]
        self.t_col = self._t
        self._state, self._fault, self._flags = idx["state"], idx["fault"], idx["flags"]
        self._wake, self._compute = idx["wake_latency"], idx["compute_time"]
        self.joints: list[str] = []
        pos: list[_Field] = []
        ref: list[_Field] = []
        press: list[_Field] = []
        spool: list[_Field] = []
        other: list[_Field] = []
        valves: list[_Field] = []
        for i, c in enumerate(columns):
            role, unit, joint = c.get("role"), str(c.get("unit", "")), c.get("joint")
            ch = c.get("channel")
            disp, k = display(unit)
            if role == "ref" and joint is not None:
                ref.append(_Field(f"{joint}", i, k))
                if joint not in self.joints:
                    self.joints.append(str(joint))
            elif role == "cmd":
                valves.append(_Field(f"{ch}_{disp}", i, k))
            elif role == "eng":
                f = _Field(f"{ch}_{disp}", i, k)
                if unit == "rad" and joint is not None and all(p.key != joint for p in pos):
                    pos.append(_Field(str(joint), i, k))
                elif unit == "Pa":
                    press.append(f)
                elif roles.get(str(ch)) == "lvdt" or "spool" in str(ch):
                    spool.append(f)
                else:
                    other.append(f)
        self._pos, self._ref, self._press = pos, ref, press
        self._spool, self._other, self._valves = spool, other, valves

    # ------------------------------------------------------------------ schemas

    def schemas(self) -> dict[str, dict[str, Any]]:
        """topic → JSON schema (its `title` is the schema name)."""
        keys = lambda fs: [f.key for f in fs]  # noqa: E731
        return {
            TOPIC_JOINTS: _object(
                "hydrig.JointStates",
                {
                    **_HEAD,
                    "position_deg": _group(keys(self._pos), "measured joint angle, deg"),
                    "reference_deg": _group(keys(self._ref), "controller reference, deg"),
                    "error_deg": _group(keys(self._ref), "reference − position, deg"),
                },
                "joint angles and references per joint name",
            ),
            TOPIC_PRESSURES: _object(
                "hydrig.Pressures",
                {**_HEAD, "bar": _group(keys(self._press), "chamber pressure, bar")},
            ),
            TOPIC_VALVES: _object(
                "hydrig.Valves",
                {
                    **_HEAD,
                    "command": _group(keys(self._valves), "valve command (D/A), V"),
                    "spool": _group(keys(self._spool), "spool position sensor (unit in name)"),
                },
            ),
            TOPIC_SENSORS: _object(
                "hydrig.Sensors",
                {**_HEAD, "values": _group(keys(self._other), "other inputs (unit in name)")},
            ),
            TOPIC_STATE: _object(
                "hydrig.LoopState",
                {
                    **_HEAD,
                    "state": {"type": "string", "enum": [s.name for s in State]},
                    "state_code": {"type": "integer"},
                    "fault": {"type": "string", "description": "latched fault, NONE if none"},
                    "fault_code": {"type": "integer"},
                    "flags": {"type": "integer", "description": "interlocks tripping (bits)"},
                },
            ),
            TOPIC_TIMING: _object(
                "hydrig.LoopTiming",
                {
                    **_HEAD,
                    "wake_latency_us": _num("wake-up time minus deadline, µs"),
                    "compute_time_us": _num("read → outputs written, µs"),
                },
            ),
            TOPIC_STATUS: _object(
                "hydrig.Status",
                STATUS_FIELDS,
                "the service's 1 Hz status (docs/protocol.md, status); more keys may appear",
            )
            | {"additionalProperties": True},
            TOPIC_EVENTS: {
                "title": "hydrig.Event",
                "type": "object",
                "description": "state changes, faults, recorder events (docs/protocol.md, event)",
                "additionalProperties": True,
            },
        }

    @staticmethod
    def estimate_schema(names: Sequence[str]) -> dict[str, Any]:
        keys = [field_name(n) for n in names]
        return _object(
            "hydrig.Estimates",
            {
                **_HEAD,
                "data_seq": {"type": "integer"},
                "theta": _group(keys, "estimate, SI"),
                "sigma": _group(keys, "standard deviation, SI"),
                "low_3sigma": _group(keys, "θ − 3σ"),
                "high_3sigma": _group(keys, "θ + 3σ"),
                "sigma_pct": _group(keys, "relative standard deviation, %"),
            },
            "online RLS estimates with their uncertainty",
        )

    # ------------------------------------------------------------------ messages

    def row_messages(self, row: Sequence[float]) -> dict[str, dict[str, Any]]:
        """topic → message for one sample row (width floats)."""
        g = lambda fs: {f.key: finite(row[f.col] * f.factor) for f in fs}  # noqa: E731
        head = {"t": finite(row[self._t]), "seq": int(row[self._seq])}
        pos = g(self._pos)
        ref = g(self._ref)
        err = {
            k: (None if v is None or pos.get(k) is None else v - pos[k])  # type: ignore[operator]
            for k, v in ref.items()
        }
        state, fault = int(row[self._state]), int(row[self._fault])
        us = DISPLAY["s"][1]
        return {
            TOPIC_JOINTS: {**head, "position_deg": pos, "reference_deg": ref, "error_deg": err},
            TOPIC_PRESSURES: {**head, "bar": g(self._press)},
            TOPIC_VALVES: {**head, "command": g(self._valves), "spool": g(self._spool)},
            TOPIC_SENSORS: {**head, "values": g(self._other)},
            TOPIC_STATE: {
                **head,
                "state": State(state).name if state in State._value2member_map_ else str(state),
                "state_code": state,
                "fault": Trip(fault).name if fault in Trip._value2member_map_ else str(fault),
                "fault_code": fault,
                "flags": int(row[self._flags]),
            },
            TOPIC_TIMING: {
                **head,
                "wake_latency_us": finite(row[self._wake] * us),
                "compute_time_us": finite(row[self._compute] * us),
            },
        }

    @staticmethod
    def estimate_message(h: Mapping[str, Any]) -> dict[str, Any]:
        """An estimator `estimate` header (docs/protocol.md) → the estimates channel's message;
        σ from the covariance diagonal (from `sigma_pct` where there is no covariance). A NaN
        `sigma_pct` is a parameter the estimator does not measure (one held at the batch's
        value, estimator.structure): no σ and no band, whatever its tiny prior variance says."""
        names = [str(n) for n in h.get("names", [])]
        theta = [float(x) for x in h.get("theta", [])]
        cov = h.get("cov") or []
        given = [float(x) for x in h.get("sigma_pct") or []]
        pct = given or [math.nan] * len(names)
        sig = []
        for i, th in enumerate(theta):
            if i < len(given) and math.isnan(given[i]):
                sig.append(math.nan)
            elif i < len(cov) and i < len(cov[i]) and float(cov[i][i]) >= 0:
                sig.append(math.sqrt(float(cov[i][i])))
            else:
                sig.append(abs(th) * pct[i] / 100.0 if i < len(pct) else math.nan)
        keys = [field_name(n) for n in names]
        z = lambda xs: {k: finite(x) for k, x in zip(keys, xs, strict=False)}  # noqa: E731
        return {
            "t": finite(float(h.get("t", math.nan))),
            "seq": int(h.get("seq", 0)),
            "data_seq": int(h.get("data_seq", -1)),
            "theta": z(theta),
            "sigma": z(sig),
            "low_3sigma": z([a - 3 * s for a, s in zip(theta, sig, strict=False)]),
            "high_3sigma": z([a + 3 * s for a, s in zip(theta, sig, strict=False)]),
            "sigma_pct": z(pct),
        }


def decimation_step(period: float, rate_hz: float) -> int:
    """Rows per published row: every k-th loop cycle (k ≥ 1) for about `rate_hz` messages/s."""
    if not rate_hz > 0:
        raise ValueError(f"rate must be > 0 Hz, got {rate_hz}")
    return max(1, round(1.0 / (period * rate_hz)))
