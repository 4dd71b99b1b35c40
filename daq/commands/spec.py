"""The commands of the command socket and the shape of their arguments.

The server checks every request against `COMMANDS` before the handler sees it, so the handler
receives only known commands with arguments of the right type (it still checks values that
depend on the service's state or profile: joint names, limits, the experiment's content).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from daq.commands.errors import CommandError
from daq.profile.schema import PidGains

MAX_STR = 256
#: Names `set_gains` accepts (LinuxCNC pid parameters, as in the profile's [joints.pid]).
GAIN_NAMES: tuple[str, ...] = tuple(PidGains.model_fields)
#: `record_start` names: they become a file name (`<name>.rigrun`) that scripts and shells handle
#: unquoted, so ASCII letters, digits and `_ . -` only, not starting with `.` (hidden) or `-`
#: (read as an option), at most 64 characters; no path separator, blank or control character.
RUN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
RUN_NAME_RULE = (
    "1–64 characters from A–Z a–z 0–9 _ . -, not starting with '.' or '-' "
    "(no path separators, blanks or control characters)"
)

#: An argument check returns None when the value is fine, else what is wrong with it.
Check = Callable[[Any], "str | None"]


def _finite_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _short(v: Any, limit: int = 60) -> str:
    text = repr(v)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _got(v: Any) -> str:
    return f"got {type(v).__name__} {_short(v)}"


def _short_str(v: Any) -> str | None:
    if not isinstance(v, str):
        return _got(v)
    return None if len(v) <= MAX_STR else f"got {len(v)} characters"


def _run_name(v: Any) -> str | None:
    if not isinstance(v, str):
        return _got(v)
    if RUN_NAME.fullmatch(v):
        return None
    bad = next((c for c in v if not (c.isascii() and (c.isalnum() or c in "_.-"))), None)
    if len(v) > 64:
        why = f"{len(v)} characters"
    elif not v:
        why = "empty"
    elif bad is not None:
        why = f"character {bad!r} at position {v.index(bad)}"
    else:
        why = f"starts with {v[0]!r}"
    return f"got {_short(v)} ({why})"


def _gains(v: Any) -> str | None:
    if not isinstance(v, dict) or not v:
        return _got(v)
    for k, x in v.items():
        if k not in GAIN_NAMES:
            return f"got unknown gain {_short(k)}"
        if not _finite_number(x):
            return f"got gains.{k} = {_short(x)}"
    return None


def _map(v: Any) -> str | None:
    if not isinstance(v, dict):
        return _got(v)
    return None if all(isinstance(k, str) for k in v) else "got a map with non-string keys"


def _power_level(v: Any) -> str | None:
    return None if v in ("off", "low", "high") else _got(v)


def _on_off(v: Any) -> str | None:
    return None if v in ("on", "off") else _got(v)


def _names(v: Any) -> str | None:
    if not isinstance(v, list) or not v or len(v) > 64:
        return _got(v)
    bad = next((x for x in v if _short_str(x) is not None), None)
    return None if bad is None else f"got element {_short(bad)}"


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else _got(v)


def _number(v: Any) -> str | None:
    return None if _finite_number(v) else _got(v)


@dataclass(frozen=True)
class Arg:
    type_name: str  # as written in docs/protocol.md
    check: Check
    required: bool = True


STR = Arg("str (≤ 256 chars)", _short_str)
OPT_STR = Arg("str (≤ 256 chars)", _short_str, required=False)
#: A parameter file's text (daq.param_set parses it; a few kB in practice).
MAX_PARAM_TEXT = 1 << 18


def _param_text(v: Any) -> str | None:
    if not isinstance(v, str):
        return _got(v)
    return None if 0 < len(v) <= MAX_PARAM_TEXT else f"got {len(v)} characters"


PARAM_TEXT = Arg(f"str (a parameter file's TOML text, ≤ {MAX_PARAM_TEXT} chars)", _param_text)
CAL_TEXT = Arg(f"str (a calibration file's TOML text, ≤ {MAX_PARAM_TEXT} chars)", _param_text)


@dataclass(frozen=True)
class Command:
    args: Mapping[str, Arg]
    #: It only reads: monitor keys may send it.
    read_only: bool
    doc: str
    #: It only makes the rig safe (outputs null, fault latched): monitor keys may send it too.
    #: Anyone trusted to watch the rig must be able to stop it — a lab e-stop button is not
    #: locked to the operator's desk (docs/protocol.md, "Security").
    safety_stop: bool = False
    #: Served on the command server's safety lane: answered at once on the receiving thread,
    #: never behind another request (daq/commands/server.py). Its handler must only post to the
    #: loop's mailbox or read shared state, never compute or do I/O.
    lane: bool = False

    @property
    def monitor_allowed(self) -> bool:
        return self.read_only or self.safety_stop


COMMANDS: dict[str, Command] = {
    "status": Command(
        {}, True, "state, fault, timing, recorder and telemetry statistics", lane=True
    ),
    "describe": Command({}, True, "channels (the telemetry meta), limits, profile summary"),
    "arm": Command({}, False, "IDLE → ARMED: outputs live at null, interlocks active"),
    "disarm": Command({}, False, "ARMED/RUNNING → IDLE: outputs to null"),
    "run": Command(
        {"experiment": Arg("map (an experiment file's content)", _map)},
        False,
        "start an experiment (a trajectory or a sequence of segments)",
    ),
    "stop": Command(
        {},
        False,
        "end the running experiment (or cancel its limit check); hold position",
        lane=True,
    ),
    "estop": Command(
        {"reason": OPT_STR},
        False,
        "emergency stop: outputs null, latch a fault (cancels a limit check under way)",
        safety_stop=True,
        lane=True,
    ),
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
        {"name": Arg(f"a run name: {RUN_NAME_RULE}", _run_name, required=False), "note": OPT_STR},
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
    # The station (daq.service.station_api, docs/operations.md).
    "power": Command(
        {"level": Arg("str: off | low | high", _power_level)},
        False,
        "switch the station's hydraulic power ([hydraulics]); estop also drops it",
    ),
    "shunt": Command(
        {
            "state": Arg("str: on | off", _on_off),
            "channels": Arg(
                "non-empty list of channel names (default: every shunted channel)",
                _names,
                required=False,
            ),
        },
        False,
        "close (on) or open (off) pressure transducers' shunt calibration relays; on in IDLE "
        "with the power off only; every state or power change and estop opens them",
    ),
    "jog": Command(
        {
            "joint": STR,
            "target_deg": Arg("finite number (deg, inside the soft limits)", _number),
            "velocity_deg_s": Arg("finite number > 0 (deg/s)", _number, required=False),
        },
        False,
        "move one joint slowly to a target at low pressure, also from outside its soft limits",
    ),
    "calibration": Command({}, True, "the transducer calibration in force and the applied list"),
    "calibration_apply": Command(
        {"text": CAL_TEXT, "source": OPT_STR},
        False,
        "check a calibration file against the rig, apply it in IDLE and keep it (atomically)",
    ),
    "calibration_revert": Command({}, False, "back to the previously applied calibration"),
    "calibrate": Command(
        {
            "procedure": STR,
            "apply": Arg("bool", _bool, required=False),
            "drain_s": Arg("finite number > 0 (s)", _number, required=False),
            "window_s": Arg("finite number > 0 (s)", _number, required=False),
            "settle_s": Arg("finite number > 0 (s)", _number, required=False),
            "valve_volts": Arg("finite number (V)", _number, required=False),
            "push_s": Arg("finite number > 0 (s)", _number, required=False),
            "reference_pa": Arg(
                "finite number (Pa, the high stage's supply read on a gauge)",
                _number,
                required=False,
            ),
            "reference_sigma_pa": Arg(
                "finite number ≥ 0 (Pa, the gauge's 1σ)", _number, required=False
            ),
            "reference_c": Arg(
                "finite number (°C, the oil read on a reference thermometer)",
                _number,
                required=False,
            ),
            "reference_sigma_c": Arg(
                "finite number ≥ 0 (°C, the reference thermometer's 1σ)", _number, required=False
            ),
        },
        False,
        "start a calibration procedure (pressure_zero, pressure_span, pressure_shunt, "
        "position, valve_null, oil_temperature) from IDLE",
    ),
    "calibrate_status": Command({}, True, "the procedure's step and, at its end, its result"),
}


#: The commands of the safety lane.
LANE: frozenset[str] = frozenset(name for name, spec in COMMANDS.items() if spec.lane)


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
        problem = arg.check(args[name])
        if problem is not None:
            raise CommandError(
                "bad_args", f"{cmd}: argument '{name}' must be {arg.type_name}; {problem}"
            )
