"""PID with LinuxCNC `pid` component semantics, one joint per instance.

LinuxCNC documents its loop as pseudo-code (src/hal/components/pid.c); this follows it, with two
deliberate differences, both written down here because rig engineers will look for them:

- the D term acts on the *measurement* (``errorD = −d feedback/dt``), low-pass filtered at
  ``d_filter_hz``: a step in the command then gives no derivative kick, and resolver quantisation
  noise is not amplified by 1/period unfiltered;
- ``max_i`` (not in LinuxCNC) limits the integral *contribution* ``Igain·errorI`` in output units,
  on top of ``max_error_i`` which limits ``errorI`` itself.

Per cycle (every ``max_*`` limit is disabled when 0)::

    error   = command − feedback                  (exported as `error`, before limits)
    e       = clamp(error, max_error); e = deadband(e)    (shrinks by `deadband`, 0 inside it)
    errorI += e·dt  unless e pushes further into the output limit (integrator frozen)
    errorI  = clamp(errorI, max_error_i)
    errorD  = clamp(lowpass(−Δfeedback/dt), max_error_d)
    cmdD    = clamp(Δcommand/dt, max_cmd_d);  cmdDD = Δcmd_d/dt
    output  = bias + P·e + clamp(I·errorI, max_i) + D·errorD + FF0·cmd + FF1·cmdD + FF2·cmdDD
    output  = clamp(output, max_output)            → saturated flag, time and count

Disabled, the output is 0 and the integrator is reset. `enable(command, feedback)` is bumpless:
the derivative histories start from the present values, so the first enabled cycle has no D or
FF1/FF2 kick.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

from controller.limits import JointLimits

_INT32_MAX = 2_147_483_647


@dataclass(frozen=True)
class PidParams:
    """Gains and limits of one joint; the same fields as the profile's `PidGains`.

    Output in valve volts, error in rad. Any ``max_*`` limit that is 0 means "no limit".
    """

    p: float = 0.0
    i: float = 0.0
    d: float = 0.0
    ff0: float = 0.0
    ff1: float = 0.0
    ff2: float = 0.0
    bias: float = 0.0
    deadband: float = 0.0
    max_output: float = 0.0
    max_error: float = 0.0
    max_error_i: float = 0.0
    max_error_d: float = 0.0
    max_cmd_d: float = 0.0
    max_i: float = 0.0
    #: Low-pass corner of the derivative (on measurement), Hz; 0 = unfiltered.
    d_filter_hz: float = 0.0
    #: Load-pressure (ΔP) feedback gain, V per kN of piston force p_cap·A_cap − p_rod·A_rod
    #: (`controller.pressure_feedback`; applied by the control law, which has the pressures).
    dp: float = 0.0
    #: High-pass corner of the ΔP feedback, Hz; 0 = the raw force (see pressure_feedback).
    dp_hp_hz: float = 0.0
    #: The ΔP gain of the service's hold where `dp` is 0 (`daq.service.control_api.
    #: make_hold_runner`); no law reads it.
    hold_dp: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
                raise ValueError(f"PidParams.{f.name} must be a finite number, got {v!r}")
        for name in (
            "p",
            "i",
            "d",
            "deadband",
            "max_output",
            "max_error",
            "max_error_i",
            "max_error_d",
            "max_cmd_d",
            "max_i",
            "d_filter_hz",
            "dp",
            "dp_hp_hz",
        ):
            if getattr(self, name) < 0.0:
                raise ValueError(f"PidParams.{name} must be >= 0, got {getattr(self, name)}")

    @classmethod
    def from_mapping(cls, m: object) -> PidParams:
        """Build from a dict (or any object with the same attribute names, e.g. `PidGains`)."""
        names = [f.name for f in fields(cls)]
        if isinstance(m, dict):
            unknown = sorted(set(m) - set(names))
            if unknown:
                raise ValueError(f"unknown PID parameter(s) {unknown}; allowed: {names}")
            return cls(**{k: float(v) for k, v in m.items()})
        return cls(**{k: float(getattr(m, k)) for k in names if hasattr(m, k)})

    def replace(self, **changes: float) -> PidParams:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        unknown = sorted(set(changes) - set(d))
        if unknown:
            raise ValueError(f"unknown PID parameter(s) {unknown}")
        d.update({k: float(v) for k, v in changes.items()})
        return PidParams(**d)


class Pid:
    """One LinuxCNC-style PID loop. `update` is scalar float maths only: no allocation."""

    def __init__(self, params: PidParams, period: float) -> None:
        if not period > 0.0:
            raise ValueError(f"period must be > 0, got {period}")
        self.period = period
        self.enabled = False
        self.error = 0.0
        self.error_i = 0.0
        self.error_d = 0.0
        self.cmd_d = 0.0
        self.cmd_dd = 0.0
        self.output = 0.0
        self.limit_state = 0.0  # +1/−1 while the output is clamped, else 0
        self.saturated = False
        self.saturated_s = 0.0
        self.saturated_count = 0
        self._prev_cmd = 0.0
        self._prev_fb = 0.0
        self.set_params(params)

    def set_params(self, params: PidParams) -> None:
        """Change gains live (between cycles); the state is kept."""
        self.params = params
        if params.d_filter_hz > 0.0:
            # First-order low-pass, exact discretisation of 1/(1 + s/ωc).
            self._d_alpha = 1.0 - math.exp(-2.0 * math.pi * params.d_filter_hz * self.period)
        else:
            self._d_alpha = 1.0

    def enable(self, command: float, feedback: float) -> None:
        """Bumpless start: histories from the present values, integrator empty."""
        self.enabled = True
        self._prev_cmd = command
        self._prev_fb = feedback
        self.error_i = 0.0
        self.error_d = 0.0
        self.cmd_d = 0.0
        self.cmd_dd = 0.0
        self.limit_state = 0.0

    def disable(self) -> None:
        """Output to zero, integrator reset (LinuxCNC: `enable` pin false)."""
        self.enabled = False
        self.error_i = 0.0
        self.output = 0.0
        self.limit_state = 0.0
        self.saturated = False
        self.saturated_s = 0.0
        self.saturated_count = 0

    def update(self, command: float, feedback: float) -> float:
        """One cycle; returns the output (also kept in `self.output`).

        Written out flat (no helper calls, limits inlined): this runs once per joint per cycle.
        """
        p = self.params
        dt = self.period
        e = command - feedback
        self.error = e
        lim = p.max_error
        if lim != 0.0:
            e = lim if e > lim else (-lim if e < -lim else e)
        db = p.deadband
        e = e - db if e > db else (e + db if e < -db else 0.0)
        enabled = self.enabled
        error_i = self.error_i
        if enabled:
            # Anti-windup (LinuxCNC): integrate only if this error does not push further into
            # the limit the output hit on the previous cycle.
            if e * self.limit_state <= 0.0:
                error_i += e * dt
            lim = p.max_error_i
            if lim != 0.0:
                error_i = lim if error_i > lim else (-lim if error_i < -lim else error_i)
        else:
            error_i = 0.0
        self.error_i = error_i
        error_d = self.error_d + self._d_alpha * ((self._prev_fb - feedback) / dt - self.error_d)
        self._prev_fb = feedback
        lim = p.max_error_d
        if lim != 0.0:
            error_d = lim if error_d > lim else (-lim if error_d < -lim else error_d)
        self.error_d = error_d
        prev_cmd_d = self.cmd_d
        cmd_d = (command - self._prev_cmd) / dt
        lim = p.max_cmd_d
        if lim != 0.0:
            cmd_d = lim if cmd_d > lim else (-lim if cmd_d < -lim else cmd_d)
        self.cmd_d = cmd_d
        self._prev_cmd = command
        cmd_dd = self.cmd_dd = (cmd_d - prev_cmd_d) / dt
        limit_state = 0.0
        if enabled:
            i_term = p.i * error_i
            lim = p.max_i
            if lim != 0.0:
                i_term = lim if i_term > lim else (-lim if i_term < -lim else i_term)
            out = (
                p.bias
                + p.p * e
                + i_term
                + p.d * error_d
                + p.ff0 * command
                + p.ff1 * cmd_d
                + p.ff2 * cmd_dd
            )
            lim = p.max_output
            if lim != 0.0:
                if out > lim:
                    out, limit_state = lim, 1.0
                elif out < -lim:
                    out, limit_state = -lim, -1.0
        else:
            out = 0.0
        self.limit_state = limit_state
        self.output = out
        if limit_state != 0.0:
            self.saturated = True
            self.saturated_s += dt
            if self.saturated_count < _INT32_MAX:
                self.saturated_count += 1
        else:
            self.saturated = False
            self.saturated_s = 0.0
            self.saturated_count = 0
        return out


# --------------------------------------------------------------------------- documented ranges

#: A gain may make a full-scale input demand at most this many times the valve's full range
#: (`valve_max_v`). At the bound, the valve saturates once the error reaches 1 % of the joint's
#: range; a higher gain only turns sensor noise into valve chatter (the valve-rate interlock then
#: trips within cycles, which is how p = 1e6 used to end). The gains our experiments use are
#: ~1.5–8 V/rad, well under 1 % of the bound on the reference rig (≈ 955 V/rad for 36°).
FULL_SCALE_MULTIPLE = 100.0
#: The integral gain's full-scale input: a full-scale error held for this long.
INTEGRAL_REFERENCE_S = 1.0


@dataclass(frozen=True)
class GainRange:
    """The closed interval a PID parameter must lie in, with its unit and why."""

    lo: float
    hi: float
    unit: str
    why: str

    def problem(self, name: str, value: object) -> str | None:
        """None if `value` is a number inside; else a message naming the field, value and range."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            if math.isfinite(value) and self.lo <= value <= self.hi:
                return None
        hi = "inf" if math.isinf(self.hi) else f"{self.hi:.6g}"
        return f"{name} = {value!r} is out of range [{self.lo:.6g}, {hi}] {self.unit} ({self.why})"


def gain_ranges(limits: JointLimits, period: float) -> dict[str, GainRange]:
    """The range of every `PidParams` field for one joint (SI units: rad, rad/s, rad/s², V, s).

    Gains: `gain × full-scale input ≤ FULL_SCALE_MULTIPLE × valve_max_v`, full-scale inputs
    being the joint's range (error), its largest angle (command, for ff0), its velocity and
    acceleration limits (derivative and ff1/ff2). `bias` cannot exceed the valve's range and the
    deadband the joint's range; the derivative filter corner stops at the Nyquist frequency;
    the `max_*` limits are ≥ 0 (0 = no limit; a large one is simply no limit in practice).
    """
    span = limits.position_max - limits.position_min
    q_abs = max(abs(limits.position_min), abs(limits.position_max))
    max_velocity, max_acceleration = limits.max_velocity, limits.max_acceleration
    valve_max_v = limits.valve_max_v
    top = FULL_SCALE_MULTIPLE * valve_max_v
    k = f"{FULL_SCALE_MULTIPLE:g} × valve_max_v = {top:g} V"

    def gain(full: float, what: str, unit: str, signed: bool = False) -> GainRange:
        hi = top / full
        return GainRange(-hi if signed else 0.0, hi, unit, f"{what} may demand at most {k}")

    r = math.degrees
    nyquist = 0.5 / period
    limit = GainRange(0.0, math.inf, "", "0 = no limit")
    return {
        "p": gain(span, f"a full-scale error of {r(span):.4g}°", "V/rad"),
        "i": gain(
            span * INTEGRAL_REFERENCE_S,
            f"a full-scale error of {r(span):.4g}° held {INTEGRAL_REFERENCE_S:g} s",
            "V/(rad·s)",
        ),
        "d": gain(max_velocity, f"the velocity limit {r(max_velocity):.4g}°/s", "V·s/rad"),
        "ff0": gain(q_abs, f"the largest angle {r(q_abs):.4g}°", "V/rad", signed=True),
        "ff1": gain(
            max_velocity, f"the velocity limit {r(max_velocity):.4g}°/s", "V·s/rad", signed=True
        ),
        "ff2": gain(
            max_acceleration,
            f"the acceleration limit {r(max_acceleration):.4g}°/s²",
            "V·s²/rad",
            signed=True,
        ),
        "bias": GainRange(-valve_max_v, valve_max_v, "V", "within the valve's range"),
        "deadband": GainRange(0.0, span, "rad", "within the joint's range"),
        "max_output": GainRange(0.0, math.inf, "V", limit.why),
        "max_error": GainRange(0.0, math.inf, "rad", limit.why),
        "max_error_i": GainRange(0.0, math.inf, "rad·s", limit.why),
        "max_error_d": GainRange(0.0, math.inf, "rad/s", limit.why),
        "max_cmd_d": GainRange(0.0, math.inf, "rad/s", limit.why),
        "max_i": GainRange(0.0, math.inf, "V", limit.why),
        "d_filter_hz": GainRange(
            0.0, nyquist, "Hz", f"0 = unfiltered; at most the Nyquist frequency {nyquist:g} Hz"
        ),
        "dp": GainRange(0.0, top, "V/kN", f"a 1 kN load force may demand at most {k}"),
        "hold_dp": GainRange(0.0, top, "V/kN", f"a 1 kN load force may demand at most {k}"),
        "dp_hp_hz": GainRange(
            0.0, nyquist, "Hz", f"0 = not high-passed; at most the Nyquist frequency {nyquist:g} Hz"
        ),
    }


def gain_problems(changes: Mapping[str, object], ranges: dict[str, GainRange]) -> list[str]:
    """One message per changed parameter outside its range (unknown names are the caller's)."""
    out = []
    for name, value in changes.items():
        rng = ranges.get(name)
        msg = rng.problem(name, value) if rng is not None else None
        if msg is not None:
            out.append(msg)
    return out
