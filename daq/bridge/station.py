"""The station's channels on the WebSocket server, fed with messages already stamped.

One `Station` per server, used by the live bridge (telemetry and estimates) and by replay (a
recorded run), so both serve the same topics, schemas and values. It owns:

- the row channels of the current column layout (`/rig/joints`, …; channels.py), the status
  and events (`/rig/status`, `/rig/events`), the estimates (`/estimator/estimates`, advertised
  when the first estimate names its parameters);
- the standard ones (standard.py): `/rig/log` (foxglove.Log), `/diagnostics`, and with an arm
  model (arm3d.py) `/tf` (foxglove.FrameTransforms) and `/rig/scene` (foxglove.SceneUpdate).

`service_lost()` withdraws everything that comes from the service or the estimator (so no
panel shows a frozen value as if live) and says so on `/diagnostics` and as a server status;
the next `set_layout()` advertises it again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from daq.bridge.channels import (
    TOPIC_ESTIMATES,
    TOPIC_EVENTS,
    TOPIC_JOINTS,
    TOPIC_STATUS,
    ChannelSet,
    dumps,
    jsonable,
)
from daq.bridge.standard import (
    DIAGNOSTICS_SCHEMA,
    TOPIC_DIAGNOSTICS,
    TOPIC_LOG,
    TOPIC_SCENE,
    TOPIC_TF,
    diagnostics,
    foxglove_schema,
    liveness,
    log_message,
)
from daq.bridge.wsserver import STATUS_ERROR

log = logging.getLogger(__name__)

#: Server status id of the liveness message (removed when the service is back).
LIVENESS_ID = "hydrig.service"


class Sink(Protocol):
    """Where the station's channels go: the WebSocket server (wsserver.FoxgloveServer) or an
    MCAP file (mcap_export.McapSink)."""

    def add_channel(self, topic: str, schema: dict[str, Any]) -> int: ...
    def remove_channels(self, ids: Sequence[int]) -> None: ...
    def log(self, channel_id: int, payload: bytes, log_time: int) -> None: ...
    def publish_status(self, message: str, level: int, status_id: str) -> None: ...
    def remove_status(self, status_id: str) -> None: ...


class ArmView(Protocol):
    """What the station needs of an arm model (arm3d.ArmModel)."""

    def transforms(self, angles: Mapping[str, float | None], ns: int) -> dict[str, Any]: ...
    def scene(self, angles: Mapping[str, float | None], ns: int) -> dict[str, Any]: ...


class Station:
    def __init__(self, server: Sink, rig: str = "") -> None:
        self.server = server
        self.rig = rig
        self.arm: ArmView | None = None
        self.cs: ChannelSet | None = None
        self._rows: dict[str, int] = {}  # topic → channel id, from the service
        self._est: int | None = None
        self._est_names: list[str] = []
        self._log = server.add_channel(TOPIC_LOG, foxglove_schema("Log"))
        self._diag = server.add_channel(TOPIC_DIAGNOSTICS, DIAGNOSTICS_SCHEMA)
        self.alive = False
        self.messages = 0

    # ------------------------------------------------------------------ channels

    def set_layout(
        self,
        columns: Sequence[Mapping[str, Any]],
        roles: Mapping[str, str],
        arm: ArmView | None = None,
    ) -> None:
        """Advertise the channels of a column layout (withdrawing the previous ones)."""
        self._withdraw()
        self.cs = ChannelSet(columns, roles)
        self.arm = arm
        schemas = dict(self.cs.schemas())
        if arm is not None:
            schemas[TOPIC_TF] = foxglove_schema("FrameTransforms")
            schemas[TOPIC_SCENE] = foxglove_schema("SceneUpdate")
        self._rows = {t: self.server.add_channel(t, s) for t, s in schemas.items()}

    def _withdraw(self) -> None:
        ids = list(self._rows.values()) + ([self._est] if self._est is not None else [])
        self.server.remove_channels(ids)
        self._rows, self._est, self._est_names = {}, None, []

    def _send(self, cid: int | None, msg: Mapping[str, Any], ns: int) -> None:
        if cid is not None:
            self.server.log(cid, dumps(msg), ns)
            self.messages += 1

    # ------------------------------------------------------------------ messages

    def rows(self, row: Sequence[float], ns: int, arm: bool = True) -> dict[str, dict[str, Any]]:
        """One sample row on every row channel (and, if `arm`, the arm's pose); returns the
        messages."""
        assert self.cs is not None
        msgs = self.cs.row_messages(row)
        for topic, msg in msgs.items():
            self._send(self._rows.get(topic), msg, ns)
        if self.arm is not None and arm:
            angles = msgs[TOPIC_JOINTS]["position_deg"]
            self._send(self._rows.get(TOPIC_TF), self.arm.transforms(angles, ns), ns)
            self._send(self._rows.get(TOPIC_SCENE), self.arm.scene(angles, ns), ns)
        return msgs

    def status(self, header: Mapping[str, Any], ns: int) -> None:
        self._send(self._rows.get(TOPIC_STATUS), jsonable(header), ns)
        self._send(self._diag, diagnostics(header, ns), ns)

    def event(self, header: Mapping[str, Any], ns: int) -> None:
        self._send(self._rows.get(TOPIC_EVENTS), jsonable(header), ns)
        self._send(self._log, log_message(header, ns), ns)

    def estimate(self, header: Mapping[str, Any], ns: int) -> None:
        names = [str(n) for n in header.get("names", [])]
        if names != self._est_names or self._est is None:
            if self._est is not None:
                self.server.remove_channels([self._est])
            self._est = self.server.add_channel(TOPIC_ESTIMATES, ChannelSet.estimate_schema(names))
            self._est_names = names
        self._send(self._est, ChannelSet.estimate_message(header), ns)

    # ------------------------------------------------------------------ liveness

    def service_back(self, ns: int) -> None:
        if not self.alive:
            self.alive = True
            self.server.remove_status(LIVENESS_ID)
            self._send(self._diag, liveness(True, "telemetry arriving", self.rig, ns), ns)

    def service_lost(self, why: str, ns: int) -> None:
        """Withdraw the service's and the estimator's channels; say why, everywhere."""
        was = self.alive
        self.alive = False
        self._withdraw()
        self.cs = None
        self.server.publish_status(f"rig service: {why}", STATUS_ERROR, LIVENESS_ID)
        self._send(self._diag, liveness(False, why, self.rig, ns), ns)
        if was:
            log.warning("rig service: %s", why)
