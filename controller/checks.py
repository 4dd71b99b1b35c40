"""Refuse an experiment before anything moves: joint, velocity, acceleration and valve limits.

`check_experiment(exp, limits, params)` samples every segment's reference (one repeat: the
others are identical) and reports, per segment, joint and limit, the first time the limit is
exceeded and the worst value. With plant parameters it also checks the valve capacity: the
piston speed the reference needs against the steady-state speed at full spool (DESIGN §1.2,
closed form in `controller.feedforward`), given the force the inverse dynamics need at that
instant. Open-loop valve segments have no position reference: their motion is predicted by
integrating the valve's steady-state velocity (with the segment's centering gain).

Without plant parameters (no flow gains, masses or friction: nothing identified yet) an
open-loop valve sine is bounded instead of predicted, from its own command alone. DESIGN §1.2:
every metering edge passes flow in the direction of the spool u (h ≥ 0 in each term), so at
steady pressures the piston — and the joint, the moment arm r = ds/dq being positive over the
stroke — moves in the direction of u, i.e. of the command v. The segment commands
v = offset + A sin 2πft + c (q_home − q); once |q − q_home| > (|A| + |offset|)/c the centring
term outweighs the rest, v points home and so does the motion. The band
q_home ± (|A| + |offset|)/c is therefore never left (an invariant set of the quasi-static
model, whatever the flow gains), and the check refuses the segment when that band leaves the
soft-limit window. Without a centring gain (c = 0) nothing bounds the drift: the segment is
refused with a message saying parameters are needed and how to load them. The quasi-static
argument leaves out the spool lag, the oil column's resonance (the joint coasts past a
reversal), and an underlapped valve's flow near null (the load moves while u ≈ 0), so the band
is widened by `VALVE_SINE_BAND_ALLOWANCE_RAD`: a measured allowance, not a proof — on the
simulator the 0.2 V / 2 V/rad seed sine left the bare band by 0.44° (reference plant) and 1.7°
(realistic plant: underlap, null bias, seals); tests/params/test_valve_sine_check.py holds
the widened band against both (docs/controller.md).

Cost. The check runs on the command thread of a service whose loop shares the interpreter, so
its memory must not grow with the experiment's length and its time should not either where
that is exact:

- samples are streamed in chunks of `CHUNK` rows and folded into one running (first time,
  worst value) per segment, joint and limit: memory O(CHUNK), whatever the duration;
- a `Hold` segment is constant: one sample is the whole segment;
- a harmonic sum (sine, multisine, Fourier, MFS) whose frequencies are commensurate repeats
  with their common period P: when the segment is longer than P, [0, P] holds every value
  (and the first exceedance) of the whole segment;
- an open-loop valve sine is integrated period by period and stops as soon as the predicted
  state returns to itself after a whole period (periodic steady state, to `_STEADY_TOL` rad).

- a harmonic sum whose envelope stays inside every limit needs no sample at all: with
  q_j(t) = c_j + Σ_k S_jk sin ω_jk t + C_jk cos ω_jk t and A_jk = √(S_jk² + C_jk²),
  |q_j − c_j| ≤ Σ_k A_jk, |q̇_j| ≤ Σ_k ω_jk A_jk, |q̈_j| ≤ Σ_k ω_jk² A_jk (the triangle
  inequality; for frequencies with no common period the sum comes arbitrarily close to these
  bounds over a long segment, so they are also what a long sampling would find). When the
  envelope is inside the window, the speed and the acceleration limits, and no plant parameters
  ask for the valve-capacity check, the segment is passed without sampling; otherwise it is
  sampled as above to find the first exceedance.

`check_cost(exp, params)` says how many samples the check will evaluate; the service runs
checks above a bound in a worker process and answers "checking" (docs/protocol.md). A
`progress(done, total)` callback is called after every chunk and may raise `CheckCancelled`.

Durations beyond `MAX_SEGMENT_DURATION_S` per segment (one repeat) or `MAX_EXPERIMENT_DURATION_S`
in total are violations themselves (`limit="duration_s"`): nothing is sampled for them.

`describe(v, joint_names)` words a violation in the experiment file's own units and names
(degrees, the profile's joint names), which is what `rigctl check` and the service's `run`
refusal print.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from controller.experiment import Experiment, Segment
from controller.feedforward import PlantModel
from controller.limits import JointLimits
from controller.plant.dynamics import cylinder, inverse_dynamics
from controller.trajectories import HarmonicSum, Hold

#: Longest accepted segment (one repeat), s: one day.
MAX_SEGMENT_DURATION_S = 86_400.0
#: Longest accepted experiment (every segment × its repeats), s: one week.
MAX_EXPERIMENT_DURATION_S = 7 * 86_400.0
#: Rows per streamed chunk (memory bound of the check: a few (CHUNK, n_joints) arrays).
CHUNK = 4096
_STEADY_TOL = 1e-9  # rad: a predicted open-loop state this close to one period ago repeats
#: Added to the valve-sine band without parameters (module doc): what the quasi-static bound
#: leaves out, ≈ 1.8× the largest excess measured on the simulator (1.7°).
VALVE_SINE_BAND_ALLOWANCE_RAD = math.radians(3.0)


class CheckCancelled(Exception):
    """Raised by a `progress` callback to abandon a check (the caller cancelled it)."""


#: `progress(samples_done, samples_total)`, called after every chunk; may raise CheckCancelled.
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Violation:
    segment: int  # -1: the experiment as a whole
    segment_name: str
    time: float  # s into the segment (first exceedance)
    joint: int  # -1: not a joint's limit (duration_s)
    #: position_max | position_min | velocity | acceleration | valve_voltage | valve_capacity
    #: | duration_s | valve_sine_band | parameters_needed
    limit: str
    value: float  # worst value found (SI units)
    bound: float
    #: valve_sine_band: (half-width, centre, position_min, position_max) of the band, rad
    band: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)

    def __str__(self) -> str:
        return (
            f"segment {self.segment} ({self.segment_name!r}) at t={self.time:.3f} s: joint "
            f"{self.joint} {self.limit} {self.value:.4g} beyond {self.bound:.4g}"
        )


# ------------------------------------------------------------------ wording for people

_DEG = 180.0 / math.pi
#: limit → (quantity, scale from SI to the file's unit, unit suffix, decimals)
_WORDS: dict[str, tuple[str, float, str, int]] = {
    "position_max": ("position", _DEG, "°", 1),
    "position_min": ("position", _DEG, "°", 1),
    "velocity": ("speed", _DEG, "°/s", 1),
    "acceleration": ("acceleration", _DEG, "°/s²", 1),
    "valve_voltage": ("valve command", 1.0, " V", 2),
}


def describe(v: Violation, joint_names: Sequence[str] | None = None) -> str:
    """One line in the file's units and names, e.g. "segment 'big-sine', joint j1: position
    reaches 70.0° at t=0.64 s, limit 58.0°"."""
    if v.limit == "duration_s":
        where = "experiment" if v.segment < 0 else f"segment {v.segment_name!r}"
        field = "total duration (duration_s × repeats)" if v.segment < 0 else "duration_s"
        return f"{where}: {field} = {v.value:g} s is outside the allowed range (0, {v.bound:g}] s"
    joint = (
        joint_names[v.joint]
        if joint_names is not None and 0 <= v.joint < len(joint_names)
        else f"{v.joint}"
    )
    head = f"segment {v.segment_name!r}, joint {joint}"
    if v.limit == "parameters_needed":
        return (
            f"{head}: an open-loop valve sine without a centring gain cannot be bounded without "
            "plant parameters (nothing limits its drift); load identified parameters with "
            "`rigctl params load FILE` (offline: `rigctl check --params FILE`), or give "
            "centering_v_per_rad > 0"
        )
    if v.limit == "valve_sine_band":
        half, centre, lo, hi = v.band
        return (
            f"{head}: without plant parameters the open-loop valve sine is bounded only by its "
            "centring pull, (|amplitude| + |offset|)/centring + "
            f"{VALVE_SINE_BAND_ALLOWANCE_RAD * _DEG:.0f}° = ±{half * _DEG:.1f}° about "
            f"{centre * _DEG:.1f}°: predicted excursion {(centre - half) * _DEG:.1f}° to "
            f"{(centre + half) * _DEG:.1f}°, allowed range {lo * _DEG:.1f}° to {hi * _DEG:.1f}°; "
            "load identified parameters (`rigctl params load FILE`; offline "
            "`rigctl check --params FILE`) for a prediction from the plant, or lower the "
            "amplitude / raise the centring gain"
        )
    if v.limit == "valve_capacity":
        return (
            f"{head}: the reference needs {v.value:.2f}× the piston speed the valve gives at "
            f"full command (first at t={v.time:.2f} s), limit 1×"
        )
    what, scale, unit, dec = _WORDS[v.limit]
    side = " (min)" if v.limit == "position_min" else ""
    return (
        f"{head}: {what} reaches {v.value * scale:.{dec}f}{unit} at t={v.time:.2f} s, "
        f"limit {v.bound * scale:.{dec}f}{unit}{side}"
    )


# ------------------------------------------------------------------ streaming accumulator


class _Folder:
    """Running (first exceedance time, worst value) per (joint, limit) of one segment."""

    def __init__(self, i: int, seg: Segment) -> None:
        self.i, self.seg = i, seg
        self._acc: dict[tuple[int, str], list[Any]] = {}  # [first_t | None, worst, bound, sign]

    def add(
        self, j: int, name: str, t: np.ndarray, value: np.ndarray, bound: float, sign: float = 1.0
    ) -> None:
        acc = self._acc.setdefault((j, name), [None, -math.inf, float(bound), sign])
        signed = sign * value
        k = int(np.argmax(signed))
        acc[1] = max(acc[1], float(signed[k]))
        if acc[0] is None:
            bad = signed > sign * bound + 1e-9 * max(1.0, abs(bound))
            if np.any(bad):
                acc[0] = float(t[int(np.argmax(bad))])

    def violations(self) -> list[Violation]:
        return [
            Violation(self.i, self.seg.name, first, j, name, sign * worst, bound)
            for (j, name), (first, worst, bound, sign) in self._acc.items()
            if first is not None
        ]


def _times(span: float, rate_hz: float, chunk: int) -> Iterator[np.ndarray]:
    """Sample times 0, 1/rate, … ≤ span, `chunk` at a time."""
    n = math.floor(span * rate_hz + 1e-9) + 1
    for k0 in range(0, n, chunk):
        yield np.arange(k0, min(n, k0 + chunk), dtype=float) / rate_hz


def common_period(freqs_hz: Sequence[float]) -> float | None:
    """The smallest P with f·P an integer for every f (0 entries ignored); None when the
    frequencies are not commensurate within 1e-12 relative (no exact shortcut then)."""
    fr: list[Fraction] = []
    for f in freqs_hz:
        if f == 0.0:
            continue
        if not math.isfinite(f):
            return None
        x = Fraction(abs(f)).limit_denominator(1_000_000)
        if abs(float(x) - abs(f)) > 1e-12 * abs(f):
            return None
        fr.append(x)
    if not fr:
        return 0.0
    num, den = fr[0].numerator, fr[0].denominator
    for x in fr[1:]:
        # gcd(a/b, c/d) = gcd(a·d, c·b) / (b·d)
        num, den = math.gcd(num * x.denominator, x.numerator * den), den * x.denominator
    return float(Fraction(den, num))


def harmonic_envelope(
    traj: HarmonicSum,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per joint (q_max, q_min, |q̇|_max, |q̈|_max) bounds of a harmonic sum (module doc)."""
    amp = np.hypot(traj.sin_coef, traj.cos_coef)
    w = np.abs(traj.omega)
    reach = amp.sum(axis=1)
    return (
        traj.center_arr + reach,
        traj.center_arr - reach,
        (w * amp).sum(axis=1),
        (w * w * amp).sum(axis=1),
    )


def _inside_envelope(traj: HarmonicSum, limits: Sequence[JointLimits]) -> bool:
    q_max, q_min, v_max, a_max = harmonic_envelope(traj)
    return all(
        q_max[j] <= lim.position_max
        and q_min[j] >= lim.position_min
        and v_max[j] <= lim.max_velocity
        and a_max[j] <= lim.max_acceleration
        for j, lim in enumerate(limits)
    )


def _proved_by_envelope(
    seg: Segment, limits: Sequence[JointLimits], params: Any, envelope: bool
) -> bool:
    """No sample of this segment can exceed a limit (module doc, "Cost"): nothing to sample."""
    return (
        envelope
        and params is None  # the valve-capacity check needs the samples
        and seg.controller["kind"] != "valve_sine"
        and isinstance(seg.trajectory, HarmonicSum)
        and _inside_envelope(seg.trajectory, limits)
    )


def _samples(
    seg: Segment, limits: Sequence[JointLimits], params: Any, rate_hz: float, envelope: bool
) -> int:
    """How many samples the check of one segment evaluates (at most)."""
    if seg.controller["kind"] == "valve_sine":
        return 1 if params is None else math.floor(seg.duration * rate_hz + 1e-9) + 1
    if _proved_by_envelope(seg, limits, params, envelope):
        return 0
    return math.floor(_span(seg) * rate_hz + 1e-9) + 1


def check_cost(
    exp: Experiment,
    limits: Sequence[JointLimits],
    params: Any | None = None,
    rate_hz: float = 500.0,
    envelope: bool = True,
) -> int:
    """Samples `check_experiment` will evaluate (an upper bound: an open-loop prediction may
    stop early at its periodic steady state). Segments that break the duration bounds cost 0."""
    too_long = {v.segment for v in duration_violations(exp)}
    return sum(
        _samples(seg, limits, params, rate_hz, envelope)
        for i, seg in enumerate(exp.segments)
        if i not in too_long
    )


def _span(seg: Segment) -> float:
    """The part of one repeat that holds every value of it (see the module's "Cost")."""
    traj = seg.trajectory
    if isinstance(traj, Hold):
        return 0.0
    if isinstance(traj, HarmonicSum):
        live = (traj.sin_coef != 0.0) | (traj.cos_coef != 0.0)
        period = common_period((traj.omega[live] / (2 * math.pi)).tolist())
        if period is not None and period < seg.duration:
            return period
    return seg.duration


# ------------------------------------------------------------------ the check


def duration_violations(exp: Experiment) -> list[Violation]:
    """Segments (one repeat) or a whole experiment longer than the documented maxima."""
    out = [
        Violation(i, seg.name, 0.0, -1, "duration_s", float(seg.duration), MAX_SEGMENT_DURATION_S)
        for i, seg in enumerate(exp.segments)
        if not seg.duration <= MAX_SEGMENT_DURATION_S
    ]
    total = exp.duration
    if not total <= MAX_EXPERIMENT_DURATION_S:
        out.append(
            Violation(-1, exp.name, 0.0, -1, "duration_s", float(total), MAX_EXPERIMENT_DURATION_S)
        )
    return out


def brake_violations(exp: Experiment, limits: Sequence[JointLimits]) -> list[Violation]:
    """The brake after a last closed-loop segment that ends moving (`controller.runner`: to
    rest at each joint's acceleration limit, v²/(2a) beyond the segment's end) must stop inside
    the position limits."""
    if not exp.segments:
        return []
    i, seg = len(exp.segments) - 1, exp.segments[-1]
    if seg.controller["kind"] == "valve_sine" or isinstance(seg.trajectory, Hold):
        return []
    q, qd, _ = seg.trajectory.sample(np.array([seg.duration]))
    out = []
    for j, lim in enumerate(limits):
        v = float(qd[0, j])
        stop = float(q[0, j]) + math.copysign(v * v / (2.0 * lim.max_acceleration), v)
        name = f"{seg.name} (brake to rest)"
        if stop > lim.position_max:
            out.append(Violation(i, name, seg.duration, j, "position_max", stop, lim.position_max))
        elif stop < lim.position_min:
            out.append(Violation(i, name, seg.duration, j, "position_min", stop, lim.position_min))
    return out


def check_experiment(
    exp: Experiment,
    limits: Sequence[JointLimits],
    params: Any | None = None,
    rate_hz: float = 500.0,
    chunk: int = CHUNK,
    *,
    progress: Progress | None = None,
    envelope: bool = True,
) -> list[Violation]:
    """All limit violations of `exp` (empty list: safe to run). `progress`: see `Progress`;
    `envelope=False` samples harmonic sums even when their envelope is inside the limits."""
    n = exp.n_joints
    if len(limits) != n:
        raise ValueError(f"experiment '{exp.name}' has {n} joints, {len(limits)} limits given")
    out = duration_violations(exp)
    too_long = {v.segment for v in out}
    model = PlantModel(params) if params is not None else None
    total = check_cost(exp, limits, params, rate_hz, envelope) if progress is not None else 0
    done = 0
    for i, seg in enumerate(exp.segments):
        if i in too_long:
            continue
        if _proved_by_envelope(seg, limits, params, envelope):
            continue
        fold = _Folder(i, seg)
        if seg.controller["kind"] == "valve_sine":
            amp = seg.controller["amplitude_v"]
            off = seg.controller.get("offset_v") or [0.0] * n
            for j in range(n):
                fold.add(
                    j,
                    "valve_voltage",
                    np.zeros(1),
                    np.array([abs(amp[j]) + abs(off[j])]),
                    limits[j].valve_max_v,
                )
            if model is None:
                out.extend(_valve_sine_band(i, seg, limits))
            chunks = _predict_valve_sine(seg, limits, model, rate_hz, chunk)
        else:
            chunks = ((t, *seg.trajectory.sample(t)) for t in _times(_span(seg), rate_hz, chunk))
        for t, q, qd, qdd in chunks:
            for j, lim in enumerate(limits):
                fold.add(j, "position_max", t, q[:, j], lim.position_max)
                fold.add(j, "position_min", t, q[:, j], lim.position_min, -1.0)
                fold.add(j, "velocity", t, np.abs(qd[:, j]), lim.max_velocity)
                fold.add(j, "acceleration", t, np.abs(qdd[:, j]), lim.max_acceleration)
            if model is not None and seg.controller["kind"] != "valve_sine":
                need = _capacity_need(limits, params, q, qd, qdd)
                for j in range(n):
                    fold.add(j, "valve_capacity", t, need[:, j], 1.0)
            if progress is not None:
                done += t.size
                progress(min(done, total), total)
        out.extend(fold.violations())
    out.extend(brake_violations(exp, limits))
    return out


def _capacity_need(
    limits: Sequence[JointLimits], params: Any, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray
) -> np.ndarray:
    """Required piston speed / steady-state speed at full spool (> 1: the valve cannot)."""
    _, r = cylinder(params, q)
    sd = r * qd
    force = inverse_dynamics(params, q, qd, qdd) / r
    ac, ar, ps, cf = params.area_cap, params.area_rod, params.supply_pressure, params.flow_gains
    spool = np.minimum(
        params.spool_max, params.valve_gain * np.array([lim.valve_max_v for lim in limits])
    )
    k_ext = ac**3 / cf[:, 0] ** 2 + ar**3 / cf[:, 2] ** 2
    k_ret = ac**3 / cf[:, 1] ** 2 + ar**3 / cf[:, 3] ** 2
    ext = spool * np.sqrt(np.maximum(ac * ps - force, 0.0) / k_ext)
    ret = spool * np.sqrt(np.maximum(force + ar * ps, 0.0) / k_ret)
    # At rest (a hold) the valve must hold the load in whichever direction it acts: the cap
    # side against a push beyond A⁺·p_s (no extending speed left), the rod side against a pull
    # beyond A⁻·p_s (no retracting speed left) — the slower of the two speeds is the margin.
    avail = np.where(sd > 0, ext, np.where(sd < 0, ret, np.minimum(ext, ret)))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(avail > 0, np.abs(sd) / avail, np.inf)


def _valve_sine_band(i: int, seg: Segment, limits: Sequence[JointLimits]) -> list[Violation]:
    """Without plant parameters: each driven joint stays within q_home ± (|A| + |offset|)/c
    (the invariant band of the module's docstring); a violation where that band leaves the
    soft-limit window, `parameters_needed` where no centring gain bounds it."""
    c = seg.controller
    n = len(limits)
    amp = c["amplitude_v"]
    off = c.get("offset_v") or [0.0] * n
    cen = c.get("centering_v_per_rad") or [0.0] * n
    home = seg.trajectory.start().astype(float).tolist()
    out: list[Violation] = []
    for j, lim in enumerate(limits):
        drive = abs(float(amp[j])) + abs(float(off[j]))
        if drive == 0.0:
            continue  # a held joint: its PID reference is checked as any reference
        if float(cen[j]) <= 0.0:
            out.append(Violation(i, seg.name, 0.0, j, "parameters_needed", drive, 0.0))
            continue
        half = drive / float(cen[j]) + VALVE_SINE_BAND_ALLOWANCE_RAD
        band = (half, home[j], lim.position_min, lim.position_max)
        over, under = home[j] + half - lim.position_max, lim.position_min - (home[j] - half)
        if max(over, under) > 0.0:  # one line per joint: the side that leaves the most
            value, bound = (
                (home[j] + half, lim.position_max)
                if over >= under
                else (home[j] - half, lim.position_min)
            )
            out.append(Violation(i, seg.name, 0.0, j, "valve_sine_band", value, bound, band))
    return out


def _predict_valve_sine(
    seg: Segment,
    limits: Sequence[JointLimits],
    model: PlantModel | None,
    rate_hz: float,
    chunk: int,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Chunks (t, q, q̇, q̈) of the predicted motion. Driven joints: q̇ = ṡ(u)/r with u = k_v·v
    at the steady state against gravity; held joints stay at the reference. Without plant
    parameters the motion is not predicted here (the reference, a hold, is returned): the
    driven joints are bounded by `_valve_sine_band` instead."""
    if model is None or seg.duration * rate_hz < 1.0:
        t = np.zeros(1)
        yield (t, *seg.trajectory.sample(t))
        return
    c = seg.controller
    n, dt = model.n, 1.0 / rate_hz
    amp, freq = c["amplitude_v"], c["frequency_hz"]
    off = c.get("offset_v") or [0.0] * n
    cen = c.get("centering_v_per_rad") or [0.0] * n
    # Chunks of whole sine periods when a period is a whole number of samples: then the state
    # at each chunk's end can be compared with one period earlier (steady state: stop).
    period = common_period([float(freq[j]) for j in range(n) if amp[j] != 0.0])
    per_period = round(period * rate_hz) if period else 0
    exact = period is not None and abs(per_period - period * rate_hz) < 1e-9
    if per_period and exact and per_period <= 16 * chunk:  # memory stays O(chunk)
        chunk = per_period * max(1, chunk // per_period)
    else:
        per_period = 0
    tau = [0.0] * n
    zero = [0.0] * n
    home = seg.trajectory.start().astype(float).tolist()
    x = list(home)
    qd_prev: np.ndarray | None = None
    for t in _times(seg.duration, rate_hz, chunk):
        m = t.size
        q, qd = np.empty((m, n)), np.zeros((m, n))
        x_start = list(x)
        for k in range(m):
            q[k] = x
            model.inverse_dynamics(x, zero, zero, tau)
            for j in range(n):
                if amp[j] == 0.0:
                    continue
                tk = float(t[k])
                v = (
                    off[j]
                    + amp[j] * math.sin(2 * math.pi * freq[j] * tk)
                    + cen[j] * (home[j] - x[j])
                )
                v = max(-limits[j].valve_max_v, min(limits[j].valve_max_v, v))
                u = max(-model.umax[j], min(model.umax[j], model.kv[j] * v))
                _, r = model.cylinder(j, x[j])
                ext, ret = model.max_piston_speed(j, tau[j] / r, abs(u))
                qd[k, j] = (ext if u >= 0 else -ret) / r
            x = [x[j] + float(qd[k, j]) * dt for j in range(n)]
        qdd = np.empty_like(qd)
        qdd[1:] = np.diff(qd, axis=0) / dt
        if qd_prev is None:
            qdd[0] = qdd[1] if m > 1 else 0.0
        else:
            qdd[0] = (qd[0] - qd_prev) / dt
        qd_prev = qd[-1].copy()
        yield t, q, qd, qdd
        if (
            per_period
            and m == chunk
            and max(abs(a - b) for a, b in zip(x, x_start, strict=True)) < (_STEADY_TOL)
        ):
            return  # the state repeats after whole periods: the rest is this chunk again
