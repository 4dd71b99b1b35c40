"""Experiment files: a sequence of segments (trajectory + control law + duration + repeats).

An experiment file is TOML; daq and rigctl parse it and hand the dict to `Experiment.from_dict`
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller import trajectories as tr
from controller.limits import JointLimits
from controller.pid import PidParams
from controller.tables import (
    CONTROLLER_KEYS,
    ExperimentError,
    build_law,
    build_trajectory,
    check_controller,
    check_pid_ranges,
    pid_overrides,
    required,
    to_rad,
)

__all__ = [
    "Experiment",
    "ExperimentError",
    "Segment",
    "build_law",
    "build_trajectory",
    "sakai_sequential",
]


#: Keys of a `[[segments]]` table.
SEGMENT_KEYS = {
    "name", "duration_s", "repeats", "trajectory", "controller", "compensation", "identify",
}  # fmt: skip
#: A segment's `identify`: which of the identification's equations its rows feed. "fluid": the
#: chambers' flow balances only (estimator.segment_rows) — e.g. a valve sine at a stroke end,
#: which excites the oil's compressibility and whose small fast motion the mechanical model's
#: stiction and velocity filter do not describe.
IDENTIFY_USES = ("all", "fluid")
#: Controller kinds that track a position reference, so can take amplitude–phase compensation.
COMPENSATED_CONTROLLERS = {"pid", "pid_ff"}


@dataclass(frozen=True)
class Segment:
    name: str
    trajectory: tr.Trajectory
    controller: Mapping[str, Any]
    duration: float  # one repeat, s
    repeats: int = 1
    #: The checked `compensation` table (controller.amplitude_phase), or None.
    compensation: Mapping[str, float] | None = None

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
        return pid_overrides(base, {"pid": self.pid}, f"experiment {self.name!r}")

    @property
    def n_joints(self) -> int:
        return len(self.home)

    @property
    def duration(self) -> float:
        return sum(s.total for s in self.segments)

    def check_ranges(self, limits: Sequence[JointLimits], period: float) -> None:
        """Refuse gains and valve-sine values outside their documented ranges (the rig's
        limits and loop period decide them; `controller.pid.gain_ranges`). Cheap: no sampling."""
        check_pid_ranges(self.pid, limits, period, f"experiment {self.name!r}")
        for i, seg in enumerate(self.segments):
            check_controller(seg.controller, limits, period, f"segment {i} ({seg.name!r})")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Experiment:
        non_finite = first_non_finite(d, "")
        if non_finite:
            raise ExperimentError(f"{non_finite} is not a finite number (NaN and ±inf refused)")
        unknown = sorted(set(d) - {"name", "description", "home_deg", "segments", "pid"})
        if unknown:
            raise ExperimentError(f"experiment: unknown top-level key(s) {unknown}")
        home = tuple(to_rad(required(d, "home_deg", "experiment")))
        segs_in = required(d, "segments", "experiment")
        if not isinstance(segs_in, list) or not segs_in:
            raise ExperimentError("experiment: 'segments' must be a non-empty list of tables")
        segs = []
        for i, s in enumerate(segs_in):
            where = f"segment {i} ({s.get('name', '?')!r})"
            bad = sorted(set(s) - SEGMENT_KEYS)
            if bad:
                raise ExperimentError(f"{where}: unknown key(s) {bad}")
            dur = s.get("duration_s")
            if dur is not None and not (isinstance(dur, int | float) and dur > 0):
                raise ExperimentError(f"{where}: duration_s must be > 0, got {dur!r}")
            traj = build_trajectory(required(s, "trajectory", where), home, dur, where)
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
            ctrl = dict(required(s, "controller", where))
            kind = ctrl.get("kind")
            if kind not in CONTROLLER_KEYS:
                raise ExperimentError(
                    f"{where}: unknown controller kind {kind!r}; one of {sorted(CONTROLLER_KEYS)}"
                )
            bad = sorted(set(ctrl) - CONTROLLER_KEYS[kind] - {"kind"})
            if bad:
                raise ExperimentError(f"{where}: unknown key(s) {bad} for controller '{kind}'")
            comp = None
            if "compensation" in s:
                comp = _compensation(s["compensation"], traj, kind, where)
            # Read from the recorded experiment by the estimator (estimator.segment_rows).
            if s.get("identify", "all") not in IDENTIFY_USES:
                raise ExperimentError(
                    f"{where}: identify must be one of {list(IDENTIFY_USES)}, got {s['identify']!r}"
                )
            segs.append(
                Segment(str(s.get("name", f"segment{i}")), traj, ctrl, duration, reps, comp)
            )
        pid = d.get("pid")
        if pid is not None:
            ok = isinstance(pid, Mapping) or (isinstance(pid, list) and len(pid) == len(home))
            if not ok:
                raise ExperimentError("experiment: 'pid' must be a table or one table per joint")
            pid_overrides(
                [PidParams()] * len(home), {"pid": pid}, "experiment"
            )  # validate the names
        return cls(
            str(d.get("name", "experiment")),
            home,
            tuple(segs),
            str(d.get("description", "")),
            pid,
            dict(d),
        )


def _compensation(table: Any, traj: tr.Trajectory, kind: str, where: str) -> dict[str, float]:
    """A segment's checked `compensation` table (controller.amplitude_phase)."""
    from controller.amplitude_phase import CompensationError, parse_compensation

    try:
        comp = parse_compensation(table, where)
    except CompensationError as e:
        raise ExperimentError(str(e)) from None
    if type(traj) is not tr.HarmonicSum:
        raise ExperimentError(
            f"{where}: amplitude–phase compensation needs a periodic trajectory (sine, "
            f"multisine, fourier or mfs), not {type(traj).__name__}"
        )
    if kind not in COMPENSATED_CONTROLLERS:
        raise ExperimentError(
            f"{where}: amplitude–phase compensation adapts a position reference; controller "
            f"'{kind}' is not one of {sorted(COMPENSATED_CONTROLLERS)}"
        )
    return comp


def first_non_finite(node: Any, path: str) -> str:
    """`path = value` of the first NaN or ±inf anywhere in a nested table, or ''. Iterative over
    the table's own nesting, so a hostile request cannot exhaust the stack."""
    stack: list[tuple[str, Any]] = [(path, node)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return f"{where or 'value'} = {v!r}"
        if isinstance(v, Mapping):
            items = [(f"{where}.{k}" if where else str(k), x) for k, x in v.items()]
            stack.extend(reversed(items))  # document order
        elif isinstance(v, list | tuple):
            stack.extend(reversed([(f"{where}[{i}]", x) for i, x in enumerate(v)]))
    return ""


def sakai_sequential(
    home_deg: Sequence[float],
    q2_range_deg: Sequence[float] | None = None,
    amplitude_v: float = 0.2,
    frequency_hz: float = 1.0,
    step_s: float = 20.0,
    centering_v_per_rad: float = 2.0,
) -> dict[str, Any]:
    """Sakai & Maeshima's sequential protocol (seed 000, Fig. 3) as one experiment dict:

    step 1: joint 2 driven, joint 1 held at q1const (its home);
    step 2: joint 1 driven, joint 2 held at q2min;
    step 3: joint 1 driven, joint 2 held at q2max.

    Steps 2 and 3 see link 1 with link 2 at both ends of its range, so the coupling and the
    link-2 gravity terms change between them (what makes the stacked problem unique). Two
    joints need `q2_range_deg = (q2min, q2max)`: the rig's soft limits less a margin for the
    hold's own excursion. One joint: a single step driving it."""
    n = len(home_deg)
    h = [float(x) for x in home_deg]
    if n == 2:
        if q2_range_deg is None or len(q2_range_deg) != 2:
            raise ValueError("sakai_sequential: two joints need q2_range_deg = (q2min, q2max)")
        q2min, q2max = (float(x) for x in q2_range_deg)
        if not q2min < q2max:
            raise ValueError(f"sakai_sequential: q2min {q2min} must be below q2max {q2max}")
        steps = [
            ([0.0, amplitude_v], h),
            ([amplitude_v, 0.0], [h[0], q2min]),
            ([amplitude_v, 0.0], [h[0], q2max]),
        ]
    else:
        steps = [([amplitude_v] * n, h)]
    segs: list[dict[str, Any]] = [
        {
            "name": "settle",
            "duration_s": 2.0,
            "trajectory": {"kind": "hold"},
            "controller": {"kind": "pid"},
        }
    ]
    for k, (amp, hold) in enumerate(steps, start=1):
        segs.append(
            {
                "name": f"step{k}",
                "duration_s": step_s,
                "trajectory": {"kind": "hold", "position_deg": list(hold)},
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
        "home_deg": h,
        "segments": segs,
        "description": "Sakai & Maeshima: drive joint 2 (joint 1 held), then joint 1 with "
        "joint 2 held at q2min, then at q2max",
    }
