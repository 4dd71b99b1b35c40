"""Events as foxglove.Log and status as diagnostics: valid against Foxglove's own schema (Log)
and ours (DiagnosticArray), with the levels the stock panels colour."""

from __future__ import annotations

import pytest

from daq.bridge.standard import (
    DIAG_ERROR,
    DIAG_OK,
    DIAG_STALE,
    DIAGNOSTICS_SCHEMA,
    LOG_ERROR,
    LOG_FATAL,
    LOG_INFO,
    diagnostics,
    foxglove_schema,
    liveness,
    log_message,
)

jsonschema = pytest.importorskip("jsonschema")


def test_events_as_log_lines() -> None:
    fault = {"kind": "fault", "seq": 12, "t": 0.012, "name": "PRESSURE", "where": "p_cap_1",
             "message": "p_cap_1 above 75 bar"}  # fmt: skip
    estop = {"kind": "fault", "seq": 13, "name": "ESTOP", "message": "estop: by view"}
    state = {"kind": "state", "seq": 14, "state": "ARMED", "previous": "IDLE"}
    msgs = [log_message(e, 3_000_000_007) for e in (fault, estop, state)]
    for m in msgs:
        jsonschema.validate(m, foxglove_schema("Log"))
    assert [m["level"] for m in msgs] == [LOG_ERROR, LOG_FATAL, LOG_INFO]
    assert msgs[0]["message"] == "[seq 12] p_cap_1 above 75 bar"
    assert msgs[2]["message"] == "[seq 14] state IDLE → ARMED"
    assert msgs[0]["timestamp"] == {"sec": 3, "nsec": 7} and msgs[0]["name"] == "hydrig.fault"


def test_status_as_diagnostics() -> None:
    status = {"rig": "sim2dof", "state": "FAULT", "seq": 5, "t": 0.005,
              "fault": {"name": "PRESSURE", "where": "p_cap_1", "value": 8e6, "limit": 7.5e6,
                        "message": "p_cap_1 above 75 bar"},
              "recorder": None, "telemetry": {"alive": True, "lost_rows": 0},
              "timing": {"overruns": 0, "wake_latency_us": {"p99": 20.0, "max": 40.0}}}  # fmt: skip
    d = diagnostics(status, 1_000_000_000)
    jsonschema.validate(d, DIAGNOSTICS_SCHEMA)
    by = {s["name"]: s for s in d["status"]}
    assert by["hydrig: loop"]["level"] == DIAG_ERROR
    assert by["hydrig: interlocks"]["message"] == "tripped: p_cap_1 above 75 bar"
    assert {"key": "limit", "value": "7500000.0"} in by["hydrig: interlocks"]["values"]
    assert by["hydrig: timing"]["level"] == DIAG_OK
    assert all(s["hardware_id"] == "sim2dof" for s in d["status"])
    gone = liveness(False, "no telemetry for 0.6 s", "sim2dof", 1)["status"][0]
    assert gone["level"] == DIAG_STALE and gone["name"] == "hydrig: service"
