"""Safety interlocks: vectorised checks on preallocated arrays, run by the loop every cycle.

Each check is switched on or off by the profile's `[interlocks]` table; the limits come from
`[[joints]].limits` and each channel's `valid_min`/`valid_max`. A check that fires sets its bit in
`flags` (the row's `flags` column: bit `code − 1` of `Trip`) and, if it is the first trip of the
cycle, fills `first` with the cause: which check, which channel or joint, the value and the limit.
Only that rare path allocates (one `TripInfo`); the steady state writes into buffers made here.

Valve command limits, decided:
- amplitude: a command beyond `null ± valve_max_v` is CLAMPED and counted (`clamped` and flag bit
  `CLAMP_FLAG`). A saturating controller is ordinary operation (large steps, start-up), and
  clamping is exactly what the valve's own electronics would do; tripping on it would make the
  rig unusable with aggressive gains.
- slew rate: a change of more than `valve_max_rate_v_per_s · period` between two consecutive
  commands TRIPS (`Trip.VALVE_RATE`). A well-behaved law never does this (PID `max_cmd_d` limits
  it), so a slew violation means the controller is unstable or chattering, which clamping would
  hide while the hardware takes the beating.
- a non-finite command (NaN/inf from a broken law) trips `Trip.COMMAND_INVALID`.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np

from daq.profile.schema import Profile


class Trip(enum.IntEnum):
    """Why the loop faulted. The value is what the row's `fault` column holds: never renumber."""

    NONE = 0
    CHANNEL_RANGE = 1  # engineering value outside [valid_min, valid_max]: broken wire, saturation
    CHANNEL_FAULT = 2  # the backend flagged the channel (timeout, CRC error, port gone)
    SOFT_LIMIT = 3  # joint angle outside its soft limits
    PRESSURE = 4  # a chamber above max_pressure_pa
    FOLLOWING_ERROR = 5  # |ref − q| above base + per_velocity·|ref velocity|
    VALVE_RATE = 6  # valve command slew above valve_max_rate_v_per_s
    COMMAND_INVALID = 7  # non-finite valve command
    OVERRUN = 8  # overrun_limit consecutive overruns, or one stall beyond stall_ms (live)
    BACKEND_READ = 9  # backend.read returned ERROR
    BACKEND_WRITE = 10  # backend.write returned ERROR
    ESTOP = 11  # emergency stop requested
    LOOP_ERROR = 12  # an exception inside the cycle (a bug): the loop stops
    CONTROLLER_ERROR = 13  # the runner raised in enable/step: valves null, the loop goes on
    # The other process of the split is gone (issue 15): the loop process saw the service's
    # heartbeat go stale, or the service saw the loop process die. Valves null either way.
    PROCESS_LOST = 14
    # The station's supply pressure fell below [hydraulics].supply_min_fraction × the low
    # stage while the valves were live (pump stopped, hose burst): valves null.
    SUPPLY_LOST = 15


def flag(code: Trip) -> int:
    return 1 << (int(code) - 1)


#: `TripInfo.where` of an OVERRUN trip caused by one long stall (value, limit in ms).
STALL = "stall"

#: Flag bit (not a trip) set in a cycle where a valve command was clamped to its amplitude limit.
CLAMP_FLAG = 1 << 15


def describe_flags(flags: int) -> str:
    """`flags` column value → "PRESSURE, CHANNEL_RANGE" (for messages; not used per cycle)."""
    names = [t.name for t in Trip if t != Trip.NONE and flags & flag(t)]
    if flags & CLAMP_FLAG:
        names.append("CLAMPED")
    return ", ".join(names) or "none"


@dataclass(frozen=True)
class TripInfo:
    code: Trip
    where: str  # channel or joint name ("" when the cause is the loop or the backend)
    value: float
    limit: float
    seq: int = -1
    t: float = math.nan

    @property
    def message(self) -> str:
        c = self.code
        if c in (
            Trip.ESTOP,
            Trip.BACKEND_READ,
            Trip.BACKEND_WRITE,
            Trip.LOOP_ERROR,
            Trip.CONTROLLER_ERROR,
            Trip.PROCESS_LOST,
        ):
            return c.name.lower().replace("_", " ") + (f": {self.where}" if self.where else "")
        if c == Trip.CHANNEL_FAULT:
            return f"channel {self.where} flagged faulty by the backend"
        if c == Trip.OVERRUN and self.where == STALL:
            return f"a cycle ended {self.value:.1f} ms late (stall limit {self.limit:.1f} ms)"
        if c == Trip.OVERRUN:
            return f"{self.value:.0f} consecutive overruns (limit {self.limit:.0f})"
        return f"{c.name.lower()} on {self.where}: value {self.value:.6g}, limit {self.limit:.6g}"

    def to_dict(self) -> dict[str, object]:
        return {
            "code": int(self.code),
            "name": self.code.name,
            "where": self.where,
            "value": _number_or_none(self.value),
            "limit": _number_or_none(self.limit),
            "seq": self.seq,
            "t": self.t,
            "message": self.message,
        }


def _number_or_none(x: float) -> float | None:
    return None if math.isnan(x) else x


class Interlocks:
    """All checks of one profile. Call `begin_cycle()`, then the checks; read `flags`/`first`."""

    def __init__(self, profile: Profile) -> None:
        cfg = profile.interlocks
        self.cfg = cfg
        self.period = profile.period
        inputs, outputs = profile.inputs, profile.outputs
        self.input_names = [c.name for c in inputs]
        self.joint_names = [j.name for j in profile.joints]
        self.output_names = [c.name for c in outputs]
        nj, ni, no = len(profile.joints), len(inputs), len(outputs)
        self.valid_min = np.array([c.valid_min for c in inputs])
        self.valid_max = np.array([c.valid_max for c in inputs])
        lim = [j.limits for j in profile.joints]
        self.soft_min = np.radians([x.soft_min_deg for x in lim])
        self.soft_max = np.radians([x.soft_max_deg for x in lim])
        self.fe_base = np.radians([x.following_error_deg for x in lim])
        self.fe_per_velocity = np.array([x.following_error_per_velocity_s for x in lim])
        index = {c.name: i for i, c in enumerate(inputs)}
        jl = {j.name: j.limits for j in profile.joints}
        pressures = [c for c in inputs if c.role in ("pressure_cap", "pressure_rod")]
        self.p_index = np.array([index[c.name] for c in pressures], dtype=np.intp)
        self.p_names = [c.name for c in pressures]
        self.p_max = np.array([jl[str(c.joint)].max_pressure_pa for c in pressures])
        null = np.array([c.null_volts for c in outputs])
        amp = np.array([jl[str(c.joint)].valve_max_v for c in outputs])
        self.v_lo = np.maximum(null - amp, [c.converter.min for c in outputs])
        self.v_hi = np.minimum(null + amp, [c.converter.max for c in outputs])
        # A tiny tolerance so that a command moving exactly at the limit rate is not a trip.
        self.v_step = np.array(
            [jl[str(c.joint)].valve_max_rate_v_per_s * self.period for c in outputs]
        ) * (1.0 + 1e-9)
        # Work buffers (never reallocated).
        self._bi = np.zeros(ni, dtype=bool)
        self._bi2 = np.zeros(ni, dtype=bool)
        self._bj = np.zeros(nj, dtype=bool)
        self._bj2 = np.zeros(nj, dtype=bool)
        self._fj = np.zeros(nj)
        self._fj2 = np.zeros(nj)
        self._bp = np.zeros(len(pressures), dtype=bool)
        self._fp = np.zeros(len(pressures))
        self._bo = np.zeros(no, dtype=bool)
        self._bo2 = np.zeros(no, dtype=bool)
        self._fo = np.zeros(no)
        self.flags = 0
        self.first: TripInfo | None = None
        #: Cycles in which at least one valve command was clamped (amplitude limit).
        self.clamped = 0

    # ------------------------------------------------------------------ bookkeeping

    def begin_cycle(self) -> None:
        self.flags = 0
        self.first = None

    def _trip(self, code: Trip, where: str, value: float, limit: float) -> None:
        self.flags |= flag(code)
        if self.first is None:
            self.first = TripInfo(code, where, float(value), float(limit))

    def trip(
        self, code: Trip, where: str = "", value: float = math.nan, limit: float = math.nan
    ) -> None:
        """Record a trip decided by the loop (backend error, overruns, estop)."""
        self._trip(code, where, value, limit)

    # ------------------------------------------------------------------ input checks

    def check_inputs(self, eng: np.ndarray, channel_fault: np.ndarray) -> None:
        """Channel validity and chamber pressures: checked in every state (a broken sensor
        must be seen before anyone arms)."""
        cfg = self.cfg
        if cfg.channel_range:
            bad, b2 = self._bi, self._bi2
            np.less(eng, self.valid_min, out=bad)
            np.greater(eng, self.valid_max, out=b2)
            np.logical_or(bad, b2, out=bad)
            np.isnan(eng, out=b2)
            np.logical_or(bad, b2, out=bad)
            if bad.any():
                i = int(np.argmax(bad))
                v = float(eng[i])
                lim = self.valid_min[i] if v < self.valid_min[i] else self.valid_max[i]
                self._trip(Trip.CHANNEL_RANGE, self.input_names[i], v, lim)
            if channel_fault.any():
                i = int(np.argmax(channel_fault))
                self._trip(Trip.CHANNEL_FAULT, self.input_names[i], float(channel_fault[i]), 0.0)
        if cfg.pressure and len(self.p_index):
            np.take(eng, self.p_index, out=self._fp)
            np.greater(self._fp, self.p_max, out=self._bp)
            if self._bp.any():
                k = int(np.argmax(self._bp))
                self._trip(Trip.PRESSURE, self.p_names[k], self._fp[k], self.p_max[k])

    def check_position(self, q: np.ndarray) -> None:
        """Soft limits: only while the valves are live (in IDLE the arm cannot be moved by us)."""
        if not self.cfg.soft_limits:
            return
        out, b2 = self._bj, self._bj2
        np.less(q, self.soft_min, out=out)
        np.greater(q, self.soft_max, out=b2)
        np.logical_or(out, b2, out=out)
        if out.any():
            j = int(np.argmax(out))
            v = float(q[j])
            lim = self.soft_min[j] if v < self.soft_min[j] else self.soft_max[j]
            self._trip(Trip.SOFT_LIMIT, self.joint_names[j], v, lim)

    def check_following(self, q: np.ndarray, ref: np.ndarray, ref_velocity: np.ndarray) -> None:
        """|ref − q| > base + per_velocity·|ref velocity| (all in rad, rad/s)."""
        if not self.cfg.following_error:
            return
        err, lim = self._fj, self._fj2
        np.subtract(ref, q, out=err)
        np.abs(err, out=err)
        np.abs(ref_velocity, out=lim)
        np.multiply(lim, self.fe_per_velocity, out=lim)
        np.add(lim, self.fe_base, out=lim)
        np.greater(err, lim, out=self._bj)
        if self._bj.any():
            j = int(np.argmax(self._bj))
            self._trip(Trip.FOLLOWING_ERROR, self.joint_names[j], err[j], lim[j])

    # ------------------------------------------------------------------ output checks

    def limit_outputs(self, volts: np.ndarray, previous: np.ndarray) -> None:
        """Clamp `volts` (per output channel) in place to the amplitude limits; trip on a
        non-finite command or a slew beyond the rate limit against `previous` (what was last
        written)."""
        if not self.cfg.valve_limits:
            return
        bad = self._bo
        np.isfinite(volts, out=bad)
        np.logical_not(bad, out=bad)
        if bad.any():
            o = int(np.argmax(bad))
            self._trip(Trip.COMMAND_INVALID, self.output_names[o], volts[o], self.v_hi[o])
            return
        np.greater(volts, self.v_hi, out=bad)
        np.less(volts, self.v_lo, out=self._bo2)
        np.logical_or(bad, self._bo2, out=bad)
        if bad.any():
            np.clip(volts, self.v_lo, self.v_hi, out=volts)
            self.clamped += 1
            self.flags |= CLAMP_FLAG
        step = self._fo
        np.subtract(volts, previous, out=step)
        np.abs(step, out=step)
        np.greater(step, self.v_step, out=bad)
        if bad.any():
            o = int(np.argmax(bad))
            self._trip(
                Trip.VALVE_RATE,
                self.output_names[o],
                step[o] / self.period,
                self.v_step[o] / self.period,
            )
