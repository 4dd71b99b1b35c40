"""The station's commands and settings in Foxglove: services and parameters that go through the
command socket, never around it.

Services `arm`, `disarm`, `stop`, `estop`, `reset` and `run` (an experiment file by name, from
the experiments directory) are each one command-socket request, sent with the bridge's own CURVE
key, so the service applies its own checks (state, limits, the pre-run check) and its own role
rules. On top, the bridge applies the command socket's role rule to the *WebSocket client*: a
client whose token stands for a monitor key gets exactly the refusal the command socket gives
that key (`forbidden: 'arm' needs a controller key (NAME is a monitor key)`), even through a
bridge holding a controller key. A bridge without a controller key (a monitor key, or no CURVE
at all) does not offer the commands that move the rig: only `estop`, which any key that may
watch the rig may send (docs/protocol.md, "Security"), and says so in a server status.

Parameters (capability `parameters`): every joint's PID gains, limits and home, from the
service's `meta`, and the loaded plant-parameter file's values (`params` command), under
`/joints/<joint>/pid/<gain>`, `/joints/<joint>/limits/<name>`, `/joints/<joint>/home_deg`,
`/params/...`. Only the gains can be set, only by a controller client through a controller
bridge, and only as `set_gains` (with its bounds): everything else is read-only.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import zmq

from daq.bridge.auth import Access
from daq.bridge.wsserver import ParameterHandler, ServiceDef, ServiceError
from daq.commands import CommandClient, ProtocolError, ServiceUnreachable
from daq.commands.spec import COMMANDS, GAIN_NAMES
from daq.security import ClientKeys

log = logging.getLogger(__name__)

#: Commands offered as services, in the order shown.
SERVICES: tuple[str, ...] = ("estop", "stop", "disarm", "arm", "reset", "run")
EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
#: How long a `params` reply is reused for parameter reads.
PARAMS_CACHE_S = 1.0

_EMPTY = {"title": "hydrig.Empty", "type": "object", "properties": {}}
_REPLY = {
    "title": "hydrig.CommandReply",
    "type": "object",
    "description": "the command socket's reply (docs/protocol.md)",
    "properties": {"ok": {"type": "boolean"}},
    "additionalProperties": True,
}


def role_refusal(cmd: str, access: Access) -> str | None:
    """The command socket's refusal of `cmd` for a client of `access`'s role, or None
    (daq/commands/server.py `_dispatch`: the same rule and the same words)."""
    spec = COMMANDS.get(cmd)
    if spec is not None and access.role != "controller" and not spec.monitor_allowed:
        return f"forbidden: '{cmd}' needs a controller key ({access.name} is a {access.role} key)"
    return None


def _param(name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, float):
        return {"name": name, "type": "float64", "value": value if math.isfinite(value) else 0.0}
    if isinstance(value, bool | int | str):
        return {"name": name, "value": value}
    if value is None:
        return {"name": name}
    return {"name": name, "value": str(value)}


def _flatten(prefix: str, obj: Any, out: dict[str, Any]) -> None:
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            _flatten(f"{prefix}/{k}", v, out)
    elif isinstance(obj, list) and obj and all(isinstance(v, Mapping) for v in obj):
        for i, v in enumerate(obj):
            _flatten(f"{prefix}/{i}", v, out)
    else:
        out[prefix] = obj


class StationCommands(ParameterHandler):
    def __init__(
        self,
        endpoint: str | None,
        *,
        keys: ClientKeys | None = None,
        key_role: str | None = None,
        key_name: str = "local",
        experiments: Path | None = None,
        timeout: float = 2.0,
    ) -> None:
        """`endpoint`: the command socket (None: no commands, read-only parameters from the
        telemetry only); `key_role`: the role of the bridge's own key (None: no key)."""
        self.endpoint = endpoint
        self.keys = keys
        self.key_name = key_name
        self.controller = endpoint is not None and key_role == "controller"
        self.experiments = experiments
        self.timeout = timeout
        self._ctx = zmq.Context()
        self._lock = threading.Lock()
        self._joints: dict[str, Any] = {}
        self._gains: dict[str, dict[str, Any]] = {}  # joint → gains set through this bridge
        self._params: tuple[float, dict[str, Any]] | None = None

    def close(self) -> None:
        self._ctx.term()

    # ------------------------------------------------------------------ command socket

    def request(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request on a socket of its own (services of different clients never queue
        behind each other: an e-stop does not wait for another client's `run` check)."""
        if self.endpoint is None:
            raise ServiceError("this bridge has no command endpoint (--commands)")
        with CommandClient(
            self.endpoint, timeout=self.timeout, keys=self.keys, ctx=self._ctx
        ) as client:
            try:
                return client.request(cmd, args)
            except (ServiceUnreachable, ProtocolError) as e:
                raise ServiceError(str(e)) from e

    def _command(self, cmd: str, args: dict[str, Any]) -> dict[str, Any]:
        reply = self.request(cmd, args)
        if not reply.get("ok"):
            raise ServiceError(f"{reply.get('error')}: {reply.get('message')}")
        return {k: v for k, v in reply.items() if k != "id"}

    # ------------------------------------------------------------------ services

    @property
    def offered(self) -> list[str]:
        if self.endpoint is None:
            return []
        return [c for c in SERVICES if self.controller or COMMANDS[c].monitor_allowed]

    def notice(self) -> str | None:
        """What a client should know about the services offered (None: all of them)."""
        if self.endpoint is None:
            return "commands: none (no command endpoint)"
        if not self.controller:
            return (
                "commands: estop only (this bridge has no controller key: it offers nothing "
                "that moves the rig)"
            )
        return None

    def services(self) -> list[ServiceDef]:
        out = []
        for cmd in self.offered:
            req: dict[str, Any] = dict(_EMPTY, title=f"hydrig.{cmd}.Request")
            if cmd == "estop":
                req["properties"] = {"reason": {"type": "string", "maxLength": 200}}
            elif cmd == "run":
                names = self.experiment_names()
                req["properties"] = {"name": {"type": "string", "enum": names} if names
                                     else {"type": "string"}}  # fmt: skip
                req["required"] = ["name"]
            out.append(ServiceDef(cmd, f"hydrig.{cmd}", req, _REPLY, self._handler(cmd)))
        return out

    def experiment_names(self) -> list[str]:
        d = self.experiments
        return sorted(p.stem for p in d.glob("*.toml")) if d is not None and d.is_dir() else []

    def _handler(self, cmd: str) -> Any:
        def handle(access: Access, request: dict[str, Any]) -> dict[str, Any]:
            refusal = role_refusal(cmd, access)
            if refusal is not None:
                raise ServiceError(refusal)
            return self._command(cmd, self._args(cmd, access, request))

        return handle

    def _args(self, cmd: str, access: Access, request: dict[str, Any]) -> dict[str, Any]:
        if cmd == "estop":
            reason = request.get("reason")
            text = f"via rig-bridge by {access.name}" + (f": {reason}" if reason else "")
            return {"reason": text[:256]}
        if cmd == "run":
            return {"experiment": self.load_experiment(request.get("name"))}
        if request:
            raise ServiceError(f"{cmd}: takes no arguments, got {sorted(request)}")
        return {}

    def load_experiment(self, name: Any) -> dict[str, Any]:
        if not isinstance(name, str) or not EXPERIMENT_NAME.fullmatch(name):
            raise ServiceError(
                f"run: 'name' must be an experiment name ({EXPERIMENT_NAME.pattern}), got "
                f"{name!r}; available: {', '.join(self.experiment_names()) or 'none'}"
            )
        if self.experiments is None:
            raise ServiceError("run: this bridge has no experiments directory (--experiments)")
        path = self.experiments / f"{name}.toml"
        try:
            with path.open("rb") as f:
                return tomllib.load(f)
        except FileNotFoundError:
            raise ServiceError(
                f"run: no experiment '{name}' in {self.experiments}; available: "
                f"{', '.join(self.experiment_names()) or 'none'}"
            ) from None
        except tomllib.TOMLDecodeError as e:
            raise ServiceError(f"run: {path} is not valid TOML: {e}") from e

    # ------------------------------------------------------------------ parameters

    def on_meta(self, header: Mapping[str, Any]) -> None:
        with self._lock:
            self._joints = {
                str(j.get("name")): j for j in header.get("joints", []) or [] if isinstance(j, dict)
            }

    def values(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        with self._lock:
            joints, gains = dict(self._joints), dict(self._gains)
        for name, j in joints.items():
            _flatten(f"/joints/{name}/pid", {**(j.get("pid") or {}), **gains.get(name, {})}, out)
            _flatten(f"/joints/{name}/limits", j.get("limits") or {}, out)
            out[f"/joints/{name}/home_deg"] = j.get("home_deg")
        params = self._param_values()
        if params is not None:
            _flatten("/params", params, out)
        return out

    def _param_values(self) -> dict[str, Any] | None:
        if self.endpoint is None:
            return None
        now = time.monotonic()
        cached = self._params
        if cached is None or now - cached[0] > PARAMS_CACHE_S:
            try:
                reply = self.request("params")
            except ServiceError:
                return cached[1] if cached is not None else None
            if not reply.get("ok"):
                return None
            body = {"source": (reply.get("params") or {}).get("source"),
                    "values": reply.get("values")}  # fmt: skip
            cached = self._params = (now, body)
        return cached[1]

    def get(self, access: Access, names: Sequence[str]) -> list[dict[str, Any]]:
        values = self.values()
        wanted = list(names) or sorted(values)
        return [_param(n, values.get(n)) for n in wanted if n in values]

    def set(self, access: Access, params: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        for p in params:
            name, value = str(p.get("name")), p.get("value")
            m = re.fullmatch(r"/joints/([^/]+)/pid/([^/]+)", name)
            if m is None or m.group(2) not in GAIN_NAMES:
                raise ServiceError(
                    f"{name}: read-only; only PID gains (/joints/<joint>/pid/<gain>, gains "
                    f"{list(GAIN_NAMES)}) can be set"
                )
            if not self.controller:
                raise ServiceError(
                    f"{name}: this bridge has no controller key; gains are read-only here"
                )
            refusal = role_refusal("set_gains", access)
            if refusal is not None:
                raise ServiceError(refusal)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ServiceError(f"{name}: must be a finite number, got {value!r}")
            reply = self._command("set_gains", {"joint": m.group(1), "gains": {m.group(2): value}})
            # The service's meta and `describe` carry the profile's gains, not the ones set
            # since: keep what set_gains answered (the gains now in the loop).
            with self._lock:
                self._gains[m.group(1)] = dict(reply.get("gains") or {})
        return self.get(access, [str(p.get("name")) for p in params])
