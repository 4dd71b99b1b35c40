"""The station in Foxglove's standard messages, so stock panels show it without configuration:

- events and faults as `foxglove.Log` (`/rig/log`, the Log panel);
- the status and the interlocks as diagnostics (`/diagnostics`, the Diagnostics panel). Foxglove
  has no `foxglove.*` diagnostics schema; its Diagnostics panel reads ROS
  `diagnostic_msgs/msg/DiagnosticArray`, which it accepts JSON-encoded by schema name, so that is
  the schema used (levels OK 0, WARN 1, ERROR 2, STALE 3);
- the bridge's own liveness as one more diagnostic (`hydrig: service`) and a server status.

All JSON-encoded; the `foxglove.*` schemas are Foxglove's own JSON schemas (foxglove_schemas/).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

TOPIC_LOG = "/rig/log"
TOPIC_DIAGNOSTICS = "/diagnostics"
TOPIC_TF = "/tf"
TOPIC_SCENE = "/rig/scene"

LOG_INFO, LOG_WARNING, LOG_ERROR, LOG_FATAL = 2, 3, 4, 5
DIAG_OK, DIAG_WARN, DIAG_ERROR, DIAG_STALE = 0, 1, 2, 3

#: Event kinds that are warnings (data lost or refused), not plain information.
WARNING_KINDS = {"rows_lost", "recorder_error", "lost", "error", "overrun"}


@cache
def foxglove_schema(name: str) -> dict[str, Any]:
    """Foxglove's JSON schema `foxglove.<name>` (vendored from foxglove-sdk)."""
    text = resources.files("daq.bridge").joinpath(f"foxglove_schemas/{name}.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def stamp(ns: int) -> dict[str, int]:
    return {"sec": ns // 1_000_000_000, "nsec": ns % 1_000_000_000}


def log_message(event: Mapping[str, Any], ns: int) -> dict[str, Any]:
    """A telemetry event as a `foxglove.Log` line: faults ERROR (an e-stop FATAL), warnings
    (rows lost, recorder errors) WARNING, the rest INFO."""
    kind = str(event.get("kind", "event"))
    if kind == "fault":
        level = LOG_FATAL if event.get("name") == "ESTOP" else LOG_ERROR
        text = str(event.get("message") or f"fault {event.get('name')} at {event.get('where')}")
    elif kind == "state":
        level = LOG_INFO
        text = f"state {event.get('previous')} → {event.get('state')}"
    else:
        level = LOG_WARNING if kind in WARNING_KINDS else LOG_INFO
        extra = {k: v for k, v in event.items() if k not in ("v", "rig", "kind", "seq", "t")}
        text = kind + (" " + json.dumps(extra, default=str, sort_keys=True) if extra else "")
    return {
        "timestamp": stamp(ns),
        "level": level,
        "message": f"[seq {event.get('seq')}] {text}",
        "name": f"hydrig.{kind}",
        "file": "",
        "line": 0,
    }


DIAGNOSTICS_SCHEMA: dict[str, Any] = {
    "title": "diagnostic_msgs/msg/DiagnosticArray",
    "type": "object",
    "description": "ROS diagnostics (what Foxglove's Diagnostics panel reads)",
    "properties": {
        "header": {
            "type": "object",
            "properties": {
                "stamp": {"type": "object", "properties": {
                    "sec": {"type": "integer"}, "nsec": {"type": "integer"}}},
                "frame_id": {"type": "string"},
            },
        },
        "status": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "level": {"type": "integer", "description": "0 OK, 1 WARN, 2 ERROR, 3 STALE"},
                    "name": {"type": "string"},
                    "message": {"type": "string"},
                    "hardware_id": {"type": "string"},
                    "values": {"type": "array", "items": {"type": "object", "properties": {
                        "key": {"type": "string"}, "value": {"type": "string"}}}},
                },
            },
        },
    },
}  # fmt: skip


def _status(
    level: int, title: str, message: str, rig: str, values: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    values = values or {}
    return {
        "level": level,
        "name": f"hydrig: {title}",
        "message": message,
        "hardware_id": rig,
        "values": [{"key": k, "value": "" if v is None else str(v)} for k, v in values.items()],
    }


def _fault_text(fault: Any) -> str:
    if not isinstance(fault, Mapping):
        return "none"
    return str(fault.get("message") or f"{fault.get('name')} at {fault.get('where')}")


def diagnostics(status: Mapping[str, Any], ns: int) -> dict[str, Any]:
    """The service's status as diagnostics: loop state, interlocks (the latched fault),
    recorder, telemetry, loop timing, each with its level."""
    rig = str(status.get("rig", ""))
    state = str(status.get("state", "?"))
    fault = status.get("fault")
    rec = status.get("recorder") if isinstance(status.get("recorder"), Mapping) else None
    tel = status.get("telemetry") if isinstance(status.get("telemetry"), Mapping) else {}
    tm = status.get("timing") if isinstance(status.get("timing"), Mapping) else {}
    assert isinstance(tel, Mapping) and isinstance(tm, Mapping)
    wake = tm.get("wake_latency_us") if isinstance(tm.get("wake_latency_us"), Mapping) else {}
    assert isinstance(wake, Mapping)
    items = [
        _status(DIAG_ERROR if state in ("FAULT", "ESTOP") else DIAG_OK, "loop", state, rig,
                {"state": state, "seq": status.get("seq"), "t": status.get("t")}),
        _status(DIAG_ERROR if fault else DIAG_OK, "interlocks",
                "tripped: " + _fault_text(fault) if fault else "clear", rig,
                {k: fault.get(k) for k in ("name", "where", "value", "limit")}
                if isinstance(fault, Mapping) else None),
        _status(DIAG_OK if rec is None or not rec.get("error") else DIAG_ERROR, "recorder",
                "off" if rec is None else ("recording" if rec.get("active") else "idle")
                + (f", error: {rec.get('error')}" if rec.get("error") else ""), rig,
                {k: rec.get(k) for k in ("path", "rows_written", "lost", "complete")}
                if rec is not None else None),
        _status(DIAG_OK if tel.get("alive", True) and not tel.get("lost_rows") else DIAG_WARN,
                "telemetry", "alive" if tel.get("alive", True) else "publisher restarting", rig,
                {k: tel.get(k) for k in ("rows_sent", "dropped_batches", "lost_rows")}),
        _status(DIAG_WARN if tm.get("consecutive_overruns") else DIAG_OK, "timing",
                f"overruns {tm.get('overruns', 0)}", rig,
                {"overruns": tm.get("overruns"), "wake_p99_us": wake.get("p99"),
                 "wake_max_us": wake.get("max")}),
    ]  # fmt: skip
    return {"header": {"stamp": stamp(ns), "frame_id": ""}, "status": items}


def liveness(alive: bool, message: str, rig: str, ns: int) -> dict[str, Any]:
    """The bridge's view of the service: OK while its telemetry arrives, STALE once it stops."""
    item = _status(DIAG_OK if alive else DIAG_STALE, "service", message, rig)
    return {"header": {"stamp": stamp(ns), "frame_id": ""}, "status": [item]}
