"""The commands of the command socket and the shape of their arguments.

The server checks every request against `COMMANDS` before the handler sees it, so the handler
receives only known commands with arguments of the right type (it still checks values that
depend on the service's state or profile: joint names, limits, the experiment's content).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from daq.commands.errors import CommandError
from daq.profile.schema import PidGains

MAX_STR = 256
#: Names `set_gains` accepts (LinuxCNC pid parameters, as in the profile's [joints.pid]).
GAIN_NAMES: tuple[str, ...] = tuple(PidGains.model_fields)


def _finite_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _short_str(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= MAX_STR


def _gains(v: Any) -> bool:
    return (
        isinstance(v, dict)
        and len(v) > 0
        and all(k in GAIN_NAMES and _finite_number(x) for k, x in v.items())
    )


def _map(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) for k in v)


@dataclass(frozen=True)
class Arg:
    type_name: str  # as written in docs/protocol.md
    check: Callable[[Any], bool]
    required: bool = True


STR = Arg("str (≤ 256 chars)", _short_str)
OPT_STR = Arg("str (≤ 256 chars)", _short_str, required=False)
#: A parameter file's text (daq.param_set parses it; a few kB in practice).
MAX_PARAM_TEXT = 1 << 18
PARAM_TEXT = Arg(
    f"str (a parameter file's TOML text, ≤ {MAX_PARAM_TEXT} chars)",
    lambda v: isinstance(v, str) and 0 < len(v) <= MAX_PARAM_TEXT,
)


@dataclass(frozen=True)
class Command:
    args: Mapping[str, Arg]
    #: Monitor keys may send it (reads only).
    read_only: bool
    doc: str


COMMANDS: dict[str, Command] = {
    "status": Command({}, True, "state, fault, timing, recorder and telemetry statistics"),
    "describe": Command({}, True, "channels (the telemetry meta), limits, profile summary"),
    "arm": Command({}, False, "IDLE → ARMED: outputs live at null, interlocks active"),
    "disarm": Command({}, False, "ARMED/RUNNING → IDLE: outputs to null"),
    "run": Command(
        {"experiment": Arg("map (an experiment file's content)", _map)},
        False,
        "start an experiment (a trajectory or a sequence of segments)",
    ),
    "stop": Command({}, False, "end the running experiment; hold position"),
    "estop": Command({"reason": OPT_STR}, False, "emergency stop: outputs null, latch a fault"),
    "reset": Command({}, False, "clear a latched fault once its cause is gone"),
    "set_gains": Command(
        {
            "joint": STR,
            "gains": Arg(
                f"non-empty map {{name: finite number}}, names in {list(GAIN_NAMES)}", _gains
            ),
        },
        False,
        "change PID gains of one joint (names as in [joints.pid])",
    ),
    "record_start": Command(
        {"name": OPT_STR, "note": OPT_STR},
        False,
        "start a recording",
    ),
    "record_stop": Command({}, False, "stop the recording"),
    "load_params": Command(
        {"text": PARAM_TEXT, "source": OPT_STR},
        False,
        "load a plant-parameter file (IDLE or ARMED only); model-based segments use it at once",
    ),
    "params": Command({}, True, "the current plant-parameter set and its values"),
}


def validate(cmd: str, args: Mapping[str, Any]) -> None:
    """Raise `CommandError('unknown_command' | 'bad_args')` unless the request is well formed."""
    spec = COMMANDS.get(cmd)
    if spec is None:
        raise CommandError(
            "unknown_command", f"unknown command '{cmd[:64]}'; known: " + ", ".join(COMMANDS)
        )
    for name in args:
        if name not in spec.args:
            allowed = ", ".join(spec.args) or "none"
            raise CommandError(
                "bad_args", f"{cmd}: unknown argument '{str(name)[:64]}' (allowed: {allowed})"
            )
    for name, arg in spec.args.items():
        if name not in args:
            if arg.required:
                raise CommandError(
                    "bad_args", f"{cmd}: missing argument '{name}' ({arg.type_name})"
                )
            continue
        if not arg.check(args[name]):
            raise CommandError(
                "bad_args",
                f"{cmd}: argument '{name}' must be {arg.type_name}, "
                f"got {type(args[name]).__name__}",
            )
