"""Experiment files: a sequence of segments (trajectory + control law + duration + repeats).

An experiment file is TOML; the daq/rigctl parse it and hand the dict to `Experiment.from_dict`
(this package does no I/O). Angles are degrees in the file (`*_deg`, `*_deg_s`, ...) and radians
here. The full format, with every trajectory and controller kind, is in docs/controller.md.

    name = "standard-2dof"
    home_deg = [40.0, 30.0]            # centre of the trajectories, default hold position
    [[segments]]
    name = "mfs"
    duration_s = 10.0                  # one repeat; default: the trajectory's natural length
    repeats = 6
    trajectory = { kind = "mfs", base_hz = 0.1, a_deg_s = [[...]], b_deg_s = [[...]] }
    controller = { kind = "pid_ff" }
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
from controller.pid import PidParams

_R = math.pi / 180.0


class ExperimentError(ValueError):
    """A malformed experiment; the message names the segment and key."""


def _rad(x: Any) -> Any:
    return (np.asarray(x, dtype=float) * _R).tolist()


def _req(d: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in d:
        raise ExperimentError(f"{where}: missing key '{key}'")
    return d[key]


_TRAJ_KEYS: dict[str, set[str]] = {
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
_CTRL_KEYS: dict[str, set[str]] = {
    "pid": {"pid"},
    "pid_ff": {"pid", "pressure_source", "pressure_filter_hz"},
    "gravity_pd": {"kp", "kd", "kf", "velocity_filter_hz"},
    "vlpd": {"kp", "kd", "vmax_deg_s", "j_gain", "velocity_filter_hz", "velocity_ff"},
    "valve_sine": {"amplitude_v", "frequency_hz", "offset_v", "centering_v_per_rad", "pid"},
}


def build_trajectory(
    d: Mapping[str, Any], home: Sequence[float], duration: float | None, where: str
) -> tr.Trajectory:
    """Trajectory from its file table; `home` (rad) is the default centre."""
    kind = _req(d, "kind", where)
    if kind not in _TRAJ_KEYS:
        raise ExperimentError(
            f"{where}: unknown trajectory kind {kind!r}; one of {sorted(_TRAJ_KEYS)}"
        )
    unknown = sorted(set(d) - _TRAJ_KEYS[kind] - {"kind"})
    if unknown:
        raise ExperimentError(f"{where}: unknown key(s) {unknown} for trajectory '{kind}'")
    c = _rad(d["center_deg"]) if "center_deg" in d else list(home)
    g = lambda k: _req(d, k, where)  # noqa: E731
    try:
        if kind == "hold":
            return tr.Hold(_rad(d.get("position_deg", np.degrees(home))), duration or 0.0)
        if kind == "sine":
            ph = _rad(d["phase_deg"]) if "phase_deg" in d else None
            return tr.sine(c, _rad(g("amplitude_deg")), g("frequency_hz"), ph, duration)
        if kind == "multisine":
            ph = _rad(d["phases_deg"]) if "phases_deg" in d else None
            return tr.multisine(c, g("frequencies_hz"), _rad(g("amplitudes_deg")), ph, duration)
        if kind == "chirp":
            if duration is None:
                raise ExperimentError(f"{where}: a chirp needs the segment's duration_s")
            return tr.chirp(c, _rad(g("amplitude_deg")), g("f0_hz"), g("f1_hz"), duration)
        if kind == "trapezoid":
            start = _rad(d["start_deg"]) if "start_deg" in d else list(home)
            return moves.trapezoid(
                start,
                _rad(g("end_deg")),
                _rad(g("max_velocity_deg_s")),
                _rad(g("max_acceleration_deg_s2")),
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
        a, b = np.asarray(_rad(g("a_deg_s"))), np.asarray(_rad(g("b_deg_s")))
        if kind == "fourier":
            return tr.fourier_series(c, float(g("base_hz")), a, b)
        return tr.modified_fourier_series(c, float(g("base_hz")), a, b, tolerance=1e-4)
    except ExperimentError:
        raise
    except (ValueError, TypeError) as e:
        raise ExperimentError(f"{where}: trajectory '{kind}': {e}") from e


@dataclass(frozen=True)
class Segment:
    name: str
    trajectory: tr.Trajectory
    controller: Mapping[str, Any]
    duration: float  # one repeat, s
    repeats: int = 1

    @property
    def total(self) -> float:
        return self.duration * self.repeats


@dataclass(frozen=True)
class Experiment:
    name: str
    home: tuple[float, ...]  # rad
    segments: tuple[Segment, ...]
    description: str = ""
    #: Top-level `pid` table(s): applied over the rig's gains for every segment, and for the
    #: runner's own approach and hold moves.
    pid: Any = None
    source: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def gains(self, base: Sequence[PidParams]) -> list[PidParams]:
        """The rig's gains with this experiment's top-level overrides."""
        return _gains(base, {"pid": self.pid}, f"experiment {self.name!r}")

    @property
    def n_joints(self) -> int:
        return len(self.home)

    @property
    def duration(self) -> float:
        return sum(s.total for s in self.segments)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Experiment:
        unknown = sorted(set(d) - {"name", "description", "home_deg", "segments", "pid"})
        if unknown:
            raise ExperimentError(f"experiment: unknown top-level key(s) {unknown}")
        home = tuple(_rad(_req(d, "home_deg", "experiment")))
        segs_in = _req(d, "segments", "experiment")
        if not isinstance(segs_in, list) or not segs_in:
            raise ExperimentError("experiment: 'segments' must be a non-empty list of tables")
        segs = []
        for i, s in enumerate(segs_in):
            where = f"segment {i} ({s.get('name', '?')!r})"
            bad = sorted(set(s) - {"name", "duration_s", "repeats", "trajectory", "controller"})
            if bad:
                raise ExperimentError(f"{where}: unknown key(s) {bad}")
            dur = s.get("duration_s")
            if dur is not None and not (isinstance(dur, int | float) and dur > 0):
                raise ExperimentError(f"{where}: duration_s must be > 0, got {dur!r}")
            traj = build_trajectory(_req(s, "trajectory", where), home, dur, where)
            if traj.n != len(home):
                raise ExperimentError(f"{where}: trajectory has {traj.n} joints, home {len(home)}")
            duration = float(dur) if dur is not None else traj.duration
            if not duration > 0:
                raise ExperimentError(f"{where}: needs duration_s (the trajectory has no length)")
            reps = s.get("repeats", 1)
            if not isinstance(reps, int) or reps < 1:
                raise ExperimentError(f"{where}: repeats must be an integer >= 1, got {reps!r}")
            if reps > 1:
                q, _, _ = traj.sample(np.array([0.0, duration]))
                if np.abs(q[0] - q[1]).max() > 1e-6:
                    raise ExperimentError(
                        f"{where}: repeats > 1 but the trajectory does not "
                        f"end where it starts after duration_s={duration}"
                    )
            ctrl = dict(_req(s, "controller", where))
            kind = ctrl.get("kind")
            if kind not in _CTRL_KEYS:
                raise ExperimentError(
                    f"{where}: unknown controller kind {kind!r}; one of {sorted(_CTRL_KEYS)}"
                )
            bad = sorted(set(ctrl) - _CTRL_KEYS[kind] - {"kind"})
            if bad:
                raise ExperimentError(f"{where}: unknown key(s) {bad} for controller '{kind}'")
            segs.append(Segment(str(s.get("name", f"segment{i}")), traj, ctrl, duration, reps))
        pid = d.get("pid")
        if pid is not None:
            ok = isinstance(pid, Mapping) or (isinstance(pid, list) and len(pid) == len(home))
            if not ok:
                raise ExperimentError("experiment: 'pid' must be a table or one table per joint")
            _gains([PidParams()] * len(home), {"pid": pid}, "experiment")  # validate the names
        return cls(
            str(d.get("name", "experiment")),
            home,
            tuple(segs),
            str(d.get("description", "")),
            pid,
            dict(d),
        )


def _gains(base: Sequence[PidParams], ctrl: Mapping[str, Any], where: str) -> list[PidParams]:
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
    need = lambda: _need_model(model, where, kind)  # noqa: E731
    lst = lambda k: [float(x) for x in _req(c, k, where)]  # noqa: E731
    builders: dict[str, Callable[[], Law]] = {
        "pid": lambda: PidLaw(_gains(gains, c, where), limits, period),
        "pid_ff": lambda: FeedforwardPid(
            _gains(gains, c, where),
            limits,
            period,
            need(),
            c.get("pressure_source", "model"),
            c.get("pressure_filter_hz", 1.0),
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
            _rad(lst("vmax_deg_s")),
            lst("j_gain"),
            limits,
            period,
            c.get("velocity_filter_hz", 0.0),
            c.get("velocity_ff"),
        ),
        "valve_sine": lambda: ValveSine(
            lst("amplitude_v"),
            lst("frequency_hz"),
            _gains(gains, c, where),
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


def _need_model(model: PlantModel | None, where: str, kind: str) -> PlantModel:
    if model is None:
        raise ExperimentError(
            f"{where}: controller '{kind}' needs plant parameters (a params file)"
        )
    return model


def sakai_sequential(
    home_deg: Sequence[float],
    amplitude_v: float = 0.2,
    frequency_hz: float = 1.0,
    step_s: float = 20.0,
    centering_v_per_rad: float = 2.0,
) -> dict[str, Any]:
    """Sakai's protocol as one experiment dict: step 1 drives joint 2 with joint 1 held, step 2
    drives joint 1 with joint 2 held, step 3 drives both (the estimator stacks all steps)."""
    n = len(home_deg)
    steps = (
        [[0.0, amplitude_v], [amplitude_v, 0.0], [amplitude_v, amplitude_v]]
        if n == 2
        else [[amplitude_v]]
    )
    segs = [
        {
            "name": "settle",
            "duration_s": 2.0,
            "trajectory": {"kind": "hold"},
            "controller": {"kind": "pid"},
        }
    ]
    for k, amp in enumerate(steps, start=1):
        segs.append(
            {
                "name": f"step{k}",
                "duration_s": step_s,
                "trajectory": {"kind": "hold"},
                "controller": {
                    "kind": "valve_sine",
                    "amplitude_v": amp,
                    "frequency_hz": [frequency_hz] * n,
                    "centering_v_per_rad": [centering_v_per_rad] * n,
                },
            }
        )
    return {
        "name": "sakai-sequential",
        "home_deg": list(home_deg),
        "segments": segs,
        "description": "Sakai & Maeshima: hold one joint, drive the other, then both",
    }
