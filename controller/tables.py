"""Experiment-file tables → objects: a segment's `trajectory` and `controller` tables.

The keys of every kind are listed here (`TRAJECTORY_KEYS`, `CONTROLLER_KEYS`); anything else is an
`ExperimentError` naming the segment and the key. Angles are degrees in the file, radians here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from controller import moves
from controller import trajectories as tr
from controller.feedforward import PlantModel
from controller.laws import (
    FeedforwardPid,
    GravityCompPD,
    Law,
    PidLaw,
    ValveSine,
    VelocityLimitedPD,
)
from controller.limits import JointLimits
from controller.pid import GainRange, PidParams, gain_problems, gain_ranges

if TYPE_CHECKING:
    from controller.experiment import Segment

_R = math.pi / 180.0


class ExperimentError(ValueError):
    """A malformed experiment; the message names the segment and key."""


def to_rad(x: Any) -> Any:
    return (np.asarray(x, dtype=float) * _R).tolist()


def required(d: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in d:
        raise ExperimentError(f"{where}: missing key '{key}'")
    return d[key]


TRAJECTORY_KEYS: dict[str, set[str]] = {
    "hold": {"position_deg"},
    "sine": {"amplitude_deg", "frequency_hz", "phase_deg", "center_deg"},
    "multisine": {"frequencies_hz", "amplitudes_deg", "phases_deg", "center_deg"},
    "chirp": {"amplitude_deg", "f0_hz", "f1_hz", "center_deg"},
    "trapezoid": {"start_deg", "end_deg", "max_velocity_deg_s", "max_acceleration_deg_s2"},
    "sweep": {
        "joint",
        "low_deg",
        "high_deg",
        "velocity_deg_s",
        "acceleration_deg_s2",
        "cycles",
        "center_deg",
    },
    "fourier": {"base_hz", "a_deg_s", "b_deg_s", "center_deg"},
    "mfs": {"base_hz", "a_deg_s", "b_deg_s", "center_deg"},
}
CONTROLLER_KEYS: dict[str, set[str]] = {
    "pid": {"pid"},
    "pid_ff": {
        "pid",
        "pressure_source",
        "pressure_filter_hz",
        "coulomb_ff",
        "valve_null",
        "valve_lap",
    },
    "gravity_pd": {"kp", "kd", "kf", "velocity_filter_hz"},
    "vlpd": {"kp", "kd", "vmax_deg_s", "j_gain", "velocity_filter_hz", "velocity_ff"},
    "valve_sine": {"amplitude_v", "frequency_hz", "offset_v", "centering_v_per_rad", "pid"},
}


def build_trajectory(
    d: Mapping[str, Any], home: Sequence[float], duration: float | None, where: str
) -> tr.Trajectory:
    """Trajectory from its file table; `home` (rad) is the default centre."""
    kind = required(d, "kind", where)
    if kind not in TRAJECTORY_KEYS:
        raise ExperimentError(
            f"{where}: unknown trajectory kind {kind!r}; one of {sorted(TRAJECTORY_KEYS)}"
        )
    unknown = sorted(set(d) - TRAJECTORY_KEYS[kind] - {"kind"})
    if unknown:
        raise ExperimentError(f"{where}: unknown key(s) {unknown} for trajectory '{kind}'")
    c = to_rad(d["center_deg"]) if "center_deg" in d else list(home)
    g = lambda k: required(d, k, where)  # noqa: E731
    try:
        if kind == "hold":
            return tr.Hold(to_rad(d.get("position_deg", np.degrees(home))), duration or 0.0)
        if kind == "sine":
            ph = to_rad(d["phase_deg"]) if "phase_deg" in d else None
            return tr.sine(c, to_rad(g("amplitude_deg")), g("frequency_hz"), ph, duration)
        if kind == "multisine":
            ph = to_rad(d["phases_deg"]) if "phases_deg" in d else None
            return tr.multisine(c, g("frequencies_hz"), to_rad(g("amplitudes_deg")), ph, duration)
        if kind == "chirp":
            if duration is None:
                raise ExperimentError(f"{where}: a chirp needs the segment's duration_s")
            return tr.chirp(c, to_rad(g("amplitude_deg")), g("f0_hz"), g("f1_hz"), duration)
        if kind == "trapezoid":
            start = to_rad(d["start_deg"]) if "start_deg" in d else list(home)
            return moves.trapezoid(
                start,
                to_rad(g("end_deg")),
                to_rad(g("max_velocity_deg_s")),
                to_rad(g("max_acceleration_deg_s2")),
            )
        if kind == "sweep":
            return moves.sweep(
                c,
                int(g("joint")),
                _R * g("low_deg"),
                _R * g("high_deg"),
                _R * g("velocity_deg_s"),
                _R * g("acceleration_deg_s2"),
                int(d.get("cycles", 1)),
            )
        a, b = np.asarray(to_rad(g("a_deg_s"))), np.asarray(to_rad(g("b_deg_s")))
        if kind == "fourier":
            return tr.fourier_series(c, float(g("base_hz")), a, b)
        return tr.modified_fourier_series(c, float(g("base_hz")), a, b, tolerance=1e-4)
    except ExperimentError:
        raise
    except (ValueError, TypeError) as e:
        raise ExperimentError(f"{where}: trajectory '{kind}': {e}") from e


def pid_overrides(
    base: Sequence[PidParams], ctrl: Mapping[str, Any], where: str
) -> list[PidParams]:
    over = ctrl.get("pid")
    if over is None:
        return list(base)
    if isinstance(over, Mapping):
        over = [over] * len(base)
    if len(over) != len(base):
        raise ExperimentError(f"{where}: 'pid' needs one table per joint ({len(base)})")
    try:
        return [g.replace(**o) for g, o in zip(base, over, strict=True)]
    except ValueError as e:
        raise ExperimentError(f"{where}: {e}") from e


def check_pid_ranges(over: Any, limits: Sequence[JointLimits], period: float, where: str) -> None:
    """Refuse `pid` override table(s) with a value outside `controller.pid.gain_ranges`."""
    if over is None:
        return
    tables = [over] * len(limits) if isinstance(over, Mapping) else over
    if not isinstance(tables, list) or len(tables) != len(limits):
        raise ExperimentError(
            f"{where}: 'pid' needs a table or one table per joint ({len(limits)})"
        )
    for j, (table, lim) in enumerate(zip(tables, limits, strict=True)):
        if not isinstance(table, Mapping):
            raise ExperimentError(f"{where}: pid[{j}] must be a table, got {table!r}"[:300])
        problems = gain_problems(table, gain_ranges(lim, period))
        if problems:  # named as in the file: `pid[j].p`, or `pid.p` for one table for all
            field = "pid." if isinstance(over, Mapping) else f"pid[{j}]."
            raise ExperimentError(f"{where}: {field}{problems[0]} for joint index {j}")


def _valve_sine_problem(c: Mapping[str, Any], lim: JointLimits, j: int, nyquist: float) -> str:
    """The first out-of-range value of a valve-sine table for joint `j`, or ''."""
    vmax = lim.valve_max_v
    amp = c["amplitude_v"][j]
    offset = c["offset_v"][j] if c.get("offset_v") is not None else 0.0
    checks = [
        ("amplitude_v", amp, GainRange(-vmax, vmax, "V", "within valve_max_v")),
        ("offset_v", offset, GainRange(-vmax, vmax, "V", "within valve_max_v")),
        (
            "frequency_hz",
            c["frequency_hz"][j],
            GainRange(0.0, nyquist, "Hz", f"at most the Nyquist frequency {nyquist:g} Hz"),
        ),
    ]
    if c.get("centering_v_per_rad") is not None:
        p = gain_ranges(lim, 1.0)["p"]  # a proportional pull: the same bound as PID p
        checks.append(("centering_v_per_rad", c["centering_v_per_rad"][j], p))
    for name, value, rng in checks:
        msg = rng.problem(f"{name}[{j}]", value)
        if msg:
            return msg
    if abs(amp) + abs(offset) > vmax:
        return (
            f"|amplitude_v[{j}]| + |offset_v[{j}]| = {abs(amp) + abs(offset):g} V exceeds "
            f"valve_max_v = {vmax:g} V (the sine must fit in the valve's range)"
        )
    if amp != 0 and not c["frequency_hz"][j] > 0:
        return f"frequency_hz[{j}] = {c['frequency_hz'][j]!r} must be > 0 for a driven joint"
    return ""


def check_controller(
    c: Mapping[str, Any], limits: Sequence[JointLimits], period: float, where: str
) -> None:
    """Refuse a controller table whose gains or valve-sine values are out of their documented
    ranges (docs/protocol.md, "Ranges"): cheap, no sampling, before any law is built."""
    kind = c.get("kind")
    if kind in ("pid", "pid_ff", "valve_sine"):
        check_pid_ranges(c.get("pid"), limits, period, where)
    if kind != "valve_sine":
        return
    n = len(limits)
    for key in ("amplitude_v", "frequency_hz", "offset_v", "centering_v_per_rad"):
        v = c.get(key)
        if v is None and key in ("offset_v", "centering_v_per_rad"):
            continue
        if not isinstance(v, list) or len(v) != n:
            raise ExperimentError(
                f"{where}: controller 'valve_sine': {key} must be a list of {n} numbers "
                f"(one per joint), got {v!r}"[:300]
            )
    for j, lim in enumerate(limits):
        problem = _valve_sine_problem(c, lim, j, 0.5 / period)
        if problem:
            raise ExperimentError(f"{where}: controller 'valve_sine': {problem}")


def build_law(
    seg: Segment,
    gains: Sequence[PidParams],
    limits: Sequence[JointLimits],
    period: float,
    model: PlantModel | None,
) -> Law:
    """The segment's control law; raises `ExperimentError` if it needs plant parameters and
    none were given."""
    c, where = seg.controller, f"segment {seg.name!r}"
    kind = c["kind"]
    check_controller(c, limits, period, where)
    need = lambda: _need_model(model, where, kind)  # noqa: E731
    lst = lambda k: [float(x) for x in required(c, k, where)]  # noqa: E731
    builders: dict[str, Callable[[], Law]] = {
        "pid": lambda: PidLaw(pid_overrides(gains, c, where), limits, period),
        "pid_ff": lambda: FeedforwardPid(
            pid_overrides(gains, c, where),
            limits,
            period,
            need(),
            c.get("pressure_source", "model"),
            c.get("pressure_filter_hz", 1.0),
            c.get("coulomb_ff", 0.0),
            _switch(c, "valve_null", where),
            _switch(c, "valve_lap", where),
        ),
        "gravity_pd": lambda: GravityCompPD(
            lst("kp"),
            lst("kd"),
            lst("kf"),
            limits,
            period,
            need(),
            c.get("velocity_filter_hz", 50.0),
        ),
        "vlpd": lambda: VelocityLimitedPD(
            lst("kp"),
            lst("kd"),
            to_rad(lst("vmax_deg_s")),
            lst("j_gain"),
            limits,
            period,
            c.get("velocity_filter_hz", 0.0),
            c.get("velocity_ff"),
        ),
        "valve_sine": lambda: ValveSine(
            lst("amplitude_v"),
            lst("frequency_hz"),
            pid_overrides(gains, c, where),
            limits,
            period,
            c.get("offset_v"),
            c.get("centering_v_per_rad"),
        ),
    }
    try:
        return builders[kind]()
    except ExperimentError:
        raise
    except (ValueError, TypeError) as e:
        raise ExperimentError(f"{where}: controller '{kind}': {e}") from e


def _switch(c: Mapping[str, Any], key: str, where: str) -> bool | list[bool]:
    """A compensation switch: true/false for every joint, or a list of them, one per joint."""
    v = c.get(key, False)
    if isinstance(v, bool) or (isinstance(v, list) and all(isinstance(x, bool) for x in v)):
        return v
    raise ExperimentError(
        f"{where}: controller {c['kind']!r}: {key} must be true, false or a list of them "
        f"(one per joint), got {v!r}"
    )


def _need_model(model: PlantModel | None, where: str, kind: str) -> PlantModel:
    if model is None:
        raise ExperimentError(
            f"{where}: controller '{kind}' needs plant parameters (a params file)"
        )
    return model
