"""A Foxglove WebSocket server (subprotocol `foxglove.sdk.v1`) that checks who connects.

Why not foxglove-sdk's own server (0.30.3): it offers no hook that sees the HTTP upgrade
request (no Origin, no token), cannot refuse or drop a client, and names clients only by an
opaque id in its callbacks. A proxy in front of it would leave the SDK's own listening port open
on loopback to every local user, and a service call could not be tied to the role of the token
that opened the connection. So the bridge speaks the protocol itself, on the `websockets`
package, exactly as the SDK server does (foxglove-sdk `rust/foxglove/src/protocol`): JSON text
frames for control, binary frames for data (0x01 message data, 0x02 time, 0x03 service call
response), capabilities `time`, `parameters`, `parametersSubscribe`, `services`.

Admission runs in `process_request`, on the upgrade request, before any frame is sent: wrong
subprotocol → 400 (as the SDK), Origin not allowed → 403, token missing or wrong (when tokens
are required) → 401.

Every client has a sender thread and three queues: control messages (never dropped; a client
that lets more than `control_limit` pile up is disconnected), messages of the kept channels
(`kept_topics`: the rig's events and log, rare and each one a fact a slow client must still
see — a fault above all; bounded and never dropped like control) and data (the oldest dropped
past `backlog`, like the SDK's `message_backlog_size`), so a slow client can lose rows but never
an event, and never delays the bridge or other clients.
"""

from __future__ import annotations

import collections
import http
import json
import logging
import struct
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import Server, ServerConnection, serve

from daq.bridge.auth import LOCAL, Access, TokenStore, origin_allowed, request_token

log = logging.getLogger(__name__)

SUBPROTOCOL = "foxglove.sdk.v1"
OP_MESSAGE_DATA = 0x01
OP_TIME = 0x02
OP_SERVICE_RESPONSE = 0x03
OP_PLAYBACK_STATE = 0x05
OP_CLIENT_SERVICE_CALL = 0x02
OP_CLIENT_PLAYBACK_CONTROL = 0x03
PLAYING, PAUSED, BUFFERING, ENDED = 0, 1, 2, 3
STATUS_INFO, STATUS_WARNING, STATUS_ERROR = 0, 1, 2
#: Attribute of an admitted connection holding its `Access`.
_ACCESS = "_hydrig_access"


class ServiceError(Exception):
    """A service call refused; the message goes to the client as `serviceCallFailure`."""


@dataclass(frozen=True)
class ServiceDef:
    """One advertised service; `handler(access, request_json) -> response_json`."""

    name: str
    type: str
    request_schema: dict[str, Any]
    response_schema: dict[str, Any]
    handler: Callable[[Access, dict[str, Any]], dict[str, Any]]


class ParameterHandler:
    """What the server asks about parameters (`parameters` capability); override both."""

    def get(self, access: Access, names: Sequence[str]) -> list[dict[str, Any]]:
        return []

    def set(self, access: Access, params: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return []


class PlaybackHandler:
    """A player (capability `playbackControl`): the data's time range, and what to do on a
    client's play/pause/speed/seek request."""

    time_range: tuple[int, int] = (0, 0)

    def control(self, play: bool, speed: float, seek_ns: int | None, request_id: str) -> None:
        raise NotImplementedError

    def subscribed(self) -> None:
        """A client subscribed to a channel (a player may wait for one to start)."""


def _time(ns: int) -> dict[str, int]:
    return {"sec": ns // 1_000_000_000, "nsec": ns % 1_000_000_000}


def _schema_field(schema: dict[str, Any]) -> dict[str, str]:
    return {
        "encoding": "json",
        "schemaName": str(schema.get("title", "")),
        "schemaEncoding": "jsonschema",
        "schema": json.dumps(schema),
    }


class _Client:
    def __init__(self, server: FoxgloveServer, conn: ServerConnection, access: Access) -> None:
        self.server, self.conn, self.access = server, conn, access
        self.subs: dict[int, int] = {}  # subscription id → channel id
        self.by_channel: dict[int, int] = {}  # channel id → subscription id
        self.param_subs: set[str] = set()
        self._control: collections.deque[str | bytes] = collections.deque()
        self._kept: collections.deque[bytes] = collections.deque()
        self._data: collections.deque[bytes] = collections.deque(maxlen=server.backlog)
        self._cv = threading.Condition()
        self.closed = False
        self.dropped = 0
        self._thread = threading.Thread(target=self._send_loop, daemon=True, name="ws-send")
        self._thread.start()

    def control(self, msg: dict[str, Any] | bytes) -> None:
        frame = msg if isinstance(msg, bytes) else json.dumps(msg, separators=(",", ":"))
        self._never_dropped(self._control, frame, "control")

    def keep(self, frame: bytes) -> None:
        """A kept channel's message: never dropped, as a control message."""
        self._never_dropped(self._kept, frame, "event")

    def _never_dropped(self, queue: collections.deque[Any], frame: str | bytes, what: str) -> None:
        """Queue a frame that is never dropped; a client that lets more than `control_limit`
        of one kind pile up is disconnected instead."""
        with self._cv:
            if len(queue) >= self.server.control_limit:
                log.warning("client %s: %d %s messages unsent: disconnecting",
                            self.access.name, len(queue), what)  # fmt: skip
                self.closed = True
            queue.append(frame)
            self._cv.notify()

    def data(self, frame: bytes) -> None:
        with self._cv:
            if len(self._data) == self._data.maxlen:
                self.dropped += 1
            self._data.append(frame)
            self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self.closed = True
            self._cv.notify()

    def _send_loop(self) -> None:
        try:
            while True:
                with self._cv:
                    while not (self._control or self._kept or self._data or self.closed):
                        self._cv.wait()
                    if self.closed:
                        break
                    if self._control:
                        frame = self._control.popleft()
                    elif self._kept:
                        frame = self._kept.popleft()
                    else:
                        frame = self._data.popleft()
                self.conn.send(frame)
        except ConnectionClosed:
            pass
        finally:
            self.conn.close()


class FoxgloveServer:
    """The WebSocket server; thread-safe: channels, data, time, status from any thread."""

    def __init__(
        self,
        *,
        name: str,
        host: str = "127.0.0.1",
        port: int = 8765,
        tokens: TokenStore | None = None,
        origins: Sequence[str] = (),
        parameters: ParameterHandler | None = None,
        playback: PlaybackHandler | None = None,
        backlog: int = 1024,
        control_limit: int = 4096,
        ssl: Any = None,
        kept_topics: Collection[str] = (),
    ) -> None:
        self.name = name
        self.kept_topics = frozenset(kept_topics)
        self._kept_ids: set[int] = set()
        self.tokens = tokens
        self.origins = tuple(origins)
        self.parameters = parameters
        self.playback = playback
        self.backlog = backlog
        self.control_limit = control_limit
        self._lock = threading.RLock()
        self._clients: dict[int, _Client] = {}
        self._channels: dict[int, dict[str, Any]] = {}
        self._services: dict[int, ServiceDef] = {}
        self._status: dict[str, dict[str, Any]] = {}
        self._next_id = 1
        self.refused = 0
        self._server: Server = serve(
            self._handle, host, port, subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
            process_request=self._admit, compression=None, ssl=ssl,
            server_header=None, max_size=1 << 20,
        )  # fmt: skip
        self.port: int = self._server.socket.getsockname()[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ admission

    def _admit(self, conn: ServerConnection, request: Any) -> Any:
        protocols = ",".join(request.headers.get_all("Sec-WebSocket-Protocol"))
        if SUBPROTOCOL not in (p.strip() for p in protocols.split(",")):
            return conn.respond(http.HTTPStatus.BAD_REQUEST,
                                "Missing expected sec-websocket-protocol header\n")  # fmt: skip
        origin = request.headers.get("Origin")
        if not origin_allowed(origin, self.origins):
            self.refused += 1
            log.warning("refused a WebSocket client from origin %r (allowed: %s)",
                        origin, ", ".join(self.origins) or "none")  # fmt: skip
            return conn.respond(http.HTTPStatus.FORBIDDEN, f"origin {origin} not allowed\n")
        access = LOCAL
        if self.tokens is not None:
            token = request_token(request.path, request.headers.get("Authorization"))
            found = self.tokens.check(token)
            if found is None:
                self.refused += 1
                log.warning("refused a WebSocket client from %s: %s token", conn.remote_address,
                            "wrong" if token else "no")  # fmt: skip
                return conn.respond(
                    http.HTTPStatus.UNAUTHORIZED,
                    "this bridge needs a token (ws://HOST:PORT/?token=NAME.SECRET)\n",
                )
            access = found
        setattr(conn, _ACCESS, access)  # read by `_handle`; dies with the connection
        return None

    # ------------------------------------------------------------------ one connection

    def _handle(self, conn: ServerConnection) -> None:
        with self._lock:
            access: Access = getattr(conn, _ACCESS, LOCAL)
            client = _Client(self, conn, access)
            caps = ["time", "services"]
            if self.parameters is not None:
                caps += ["parameters", "parametersSubscribe"]
            info: dict[str, Any] = {
                "op": "serverInfo", "name": self.name, "capabilities": caps,
                "supportedEncodings": ["json"],
                "metadata": {"client": access.name, "role": access.role},
                "sessionId": str(id(self)),
            }  # fmt: skip
            if self.playback is not None:
                caps.append("playbackControl")
                start, end = self.playback.time_range
                info["dataStartTime"], info["dataEndTime"] = _time(start), _time(end)
            client.control(info)
            if self._channels:
                client.control({"op": "advertise", "channels": list(self._channels.values())})
            if self._services:
                client.control(self._advertise_services(self._services))
            for st in self._status.values():
                client.control(st)
            self._clients[id(conn)] = client
        log.info("client %s (%s) connected from %s", access.name, access.role,
                 conn.remote_address)  # fmt: skip
        try:
            for frame in conn:
                if client.closed:
                    break
                try:
                    if isinstance(frame, bytes):
                        self._on_binary(client, frame)
                    else:
                        self._on_text(client, frame)
                except (ValueError, KeyError, TypeError, struct.error) as e:
                    client.control({"op": "status", "level": STATUS_ERROR,
                                    "message": f"bad request: {e}"})  # fmt: skip
        except ConnectionClosed:
            pass
        finally:
            with self._lock:
                self._clients.pop(id(conn), None)
            client.close()

    def _on_text(self, client: _Client, text: str) -> None:
        msg = json.loads(text)
        op = msg.get("op")
        if op == "subscribe":
            with self._lock:
                for s in msg["subscriptions"]:
                    sid, cid = int(s["id"]), int(s["channelId"])
                    if cid in self._channels and sid not in client.subs:
                        client.subs[sid] = cid
                        client.by_channel[cid] = sid
            if self.playback is not None:
                self.playback.subscribed()
        elif op == "unsubscribe":
            with self._lock:
                for sid in msg["subscriptionIds"]:
                    gone = client.subs.pop(int(sid), None)
                    if gone is not None:
                        client.by_channel.pop(gone, None)
        elif op in ("getParameters", "setParameters") and self.parameters is not None:
            if op == "getParameters":
                params = self.parameters.get(client.access, list(msg.get("parameterNames", [])))
            else:
                wanted = list(msg.get("parameters", []))
                try:
                    params = self.parameters.set(client.access, wanted)
                except ServiceError as e:  # refused: say why, answer with the values as they are
                    client.control({"op": "status", "level": STATUS_ERROR,
                                    "message": f"setParameters: {e}"})  # fmt: skip
                    names = [str(p.get("name")) for p in wanted if isinstance(p, dict)]
                    params = self.parameters.get(client.access, names)
            reply: dict[str, Any] = {"op": "parameterValues", "parameters": params}
            if msg.get("id") is not None:
                reply["id"] = msg["id"]
            client.control(reply)
        elif op == "subscribeParameterUpdates" and self.parameters is not None:
            client.param_subs.update(str(n) for n in msg.get("parameterNames", []))
        elif op == "unsubscribeParameterUpdates":
            client.param_subs.difference_update(str(n) for n in msg.get("parameterNames", []))
        else:
            client.control({"op": "status", "level": STATUS_WARNING,
                            "message": f"unsupported operation {str(op)[:64]!r}"})  # fmt: skip

    def _on_binary(self, client: _Client, frame: bytes) -> None:
        if frame[:1] == bytes([OP_CLIENT_PLAYBACK_CONTROL]) and self.playback is not None:
            command, speed, had_seek, seek, n = struct.unpack_from("<BfBQI", frame, 1)
            request_id = frame[19 : 19 + n].decode()
            self.playback.control(command == 0, speed, seek if had_seek else None, request_id)
            return
        if not frame or frame[0] != OP_CLIENT_SERVICE_CALL:
            raise ValueError(f"unsupported binary opcode {frame[:1].hex()}")
        service_id, call_id, n = struct.unpack_from("<III", frame, 1)
        encoding = frame[13 : 13 + n].decode()
        payload = frame[13 + n :]
        service = self._services.get(service_id)
        try:
            if service is None:
                raise ServiceError(f"service {service_id} does not exist")
            if encoding != "json":
                raise ServiceError(f"{service.name}: request encoding must be json, not {encoding}")
            try:
                request = json.loads(payload or b"{}")
            except ValueError as e:
                raise ServiceError(f"{service.name}: request is not JSON: {e}") from e
            if not isinstance(request, dict):
                raise ServiceError(f"{service.name}: request must be a JSON object")
            response = service.handler(client.access, request)
        except ServiceError as e:
            client.control({"op": "serviceCallFailure", "serviceId": service_id,
                            "callId": call_id, "message": str(e)})  # fmt: skip
            return
        body = json.dumps(response, separators=(",", ":"), allow_nan=False).encode()
        head = struct.pack("<BIII", OP_SERVICE_RESPONSE, service_id, call_id, 4)
        client.control(head + b"json" + body)

    # ------------------------------------------------------------------ channels, data

    def add_channel(self, topic: str, schema: dict[str, Any]) -> int:
        with self._lock:
            cid = self._next_id
            self._next_id += 1
            ch = {"id": cid, "topic": topic, "encoding": "json",
                  "schemaName": str(schema.get("title", topic)), "schema": json.dumps(schema),
                  "schemaEncoding": "jsonschema"}  # fmt: skip
            self._channels[cid] = ch
            if topic in self.kept_topics:
                self._kept_ids.add(cid)
            for c in self._clients.values():
                c.control({"op": "advertise", "channels": [ch]})
        return cid

    def remove_channels(self, ids: Sequence[int]) -> None:
        with self._lock:
            ids = [i for i in ids if self._channels.pop(i, None) is not None]
            self._kept_ids.difference_update(ids)
            if not ids:
                return
            for c in self._clients.values():
                for cid in ids:
                    sid = c.by_channel.pop(cid, None)
                    if sid is not None:
                        c.subs.pop(sid, None)
                c.control({"op": "unadvertise", "channelIds": ids})

    def log(self, channel_id: int, payload: bytes, log_time: int) -> None:
        with self._lock:
            kept = channel_id in self._kept_ids
            for c in self._clients.values():
                sid = c.by_channel.get(channel_id)
                if sid is not None:
                    frame = struct.pack("<BIQ", OP_MESSAGE_DATA, sid, log_time) + payload
                    if kept:
                        c.keep(frame)
                    else:
                        c.data(frame)

    def broadcast_time(self, ns: int) -> None:
        frame = struct.pack("<BQ", OP_TIME, ns)
        with self._lock:
            for c in self._clients.values():
                c.data(frame)

    def broadcast_playback_state(
        self, status: int, current_ns: int, speed: float, did_seek: bool, request_id: str = ""
    ) -> None:
        rid = request_id.encode()
        frame = struct.pack("<BBQfBI", OP_PLAYBACK_STATE, status, current_ns, speed,
                            int(did_seek), len(rid)) + rid  # fmt: skip
        with self._lock:
            for c in self._clients.values():
                c.data(frame)  # in order with the data it describes (control frames go first)

    def publish_status(self, message: str, level: int, status_id: str) -> None:
        st = {"op": "status", "level": level, "message": message, "id": status_id}
        with self._lock:
            self._status[status_id] = st
            for c in self._clients.values():
                c.control(st)

    def remove_status(self, status_id: str) -> None:
        with self._lock:
            if self._status.pop(status_id, None) is None:
                return
            for c in self._clients.values():
                c.control({"op": "removeStatus", "statusIds": [status_id]})

    # ------------------------------------------------------------------ services, parameters

    @staticmethod
    def _advertise_services(services: dict[int, ServiceDef]) -> dict[str, Any]:
        return {"op": "advertiseServices", "services": [
            {"id": sid, "name": s.name, "type": s.type,
             "request": _schema_field(s.request_schema),
             "response": _schema_field(s.response_schema)}
            for sid, s in services.items()
        ]}  # fmt: skip

    def add_services(self, services: Sequence[ServiceDef]) -> None:
        with self._lock:
            new: dict[int, ServiceDef] = {}
            for s in services:
                new[self._next_id] = s
                self._next_id += 1
            self._services.update(new)
            for c in self._clients.values():
                c.control(self._advertise_services(new))

    def publish_parameter_values(self, params: Sequence[dict[str, Any]]) -> None:
        with self._lock:
            for c in self._clients.values():
                mine = [p for p in params if p["name"] in c.param_subs]
                if mine:
                    c.control({"op": "parameterValues", "parameters": mine})

    # ------------------------------------------------------------------ lifetime

    @property
    def clients(self) -> list[Access]:
        with self._lock:
            return [c.access for c in self._clients.values()]

    def stop(self) -> None:
        self._server.shutdown()
        with self._lock:
            clients = list(self._clients.values())
        for c in clients:
            c.close()
        self._thread.join(10)
