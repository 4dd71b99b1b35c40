"""Calibration procedures run by the service (docs/operations.md, "Calibration procedures").

`calibrate` starts one in a thread of the service and returns; `calibrate_status` reports its
step and, at the end, what it found. A procedure drives the rig only through the loop's own
requests (power, drain, arm, run, disarm: every interlock stays on) and reads the rows the loop
publishes, as the recorder does. It starts only from IDLE, and ends disarmed.

- pressure_zero: power off, wait for the supply to decay, open the valves to drain both
  chambers (the arm settles to rest on its stops), then average each chamber over the half-
  periods in which its metering edge connects it to tank (a residual supply cannot reach it
  then): offset = the reading at zero gauge pressure, σ by batch means, residual = the window's
  settling drift.
- pressure_span: after the zero (its offset is kept), each chamber is brought to the supply
  pressure: at each stage every piston is pushed onto its extended stop (cap chambers open to
  supply, no flow once it stands) and then onto its retracted stop (rod chambers). The reference
  is the supply channel (low and high stage: two points, the misfit of the line through the zero
  is the residual) or the supply pressure at the high stage read on a gauge and typed by the
  user (`reference_pa`, its 1σ `reference_sigma_pa`; then the supply channel is spanned too).
  gain = (reading − offset) / reference; residual also the window's settling drift.
- valve_null: first, power off, each valve commanded to its amplitude limit both ways: where
  that saturates the spool (k_v · valve_max_v ≥ u_max) the LVDT's readings at the spool's two
  stops (±u_max, the valve datasheet's stroke) give its offset and span, in the spool's own
  frame (zero where the command's null puts the spool; the stops taken as symmetric about it,
  as the datasheet's ±stroke states — an asymmetry would be the offset's error, which its σ,
  from the noise of the two means, does not hold); else the LVDT keeps its calibration.
  Then, reported and not applied to the LVDT, the valve's hydraulic null: at low pressure each
  piston rests on its retracted stop and its spool is servoed (a slow integral on p_cap − p_rod)
  until both chambers stand at the same pressure: no flow but the leaks' (the piston cannot
  move), none across the piston (no pressure difference), so each chamber's supply and tank
  edges pass the same flow, which with matched edges happens only with the metering edges
  centred — whatever the load. The LVDT reading there (`hydraulic_null`: declared and in spool
  units) and the command that holds it (`valve_null_v`) are the valve's null. The edges'
  mismatch (flow-gain symmetry, 5 % 1σ assumed) shifts that point by up to ±2.5 % of the
  opening around null, which a ±2 mV step measures from the pressure gain
  (d(p_cap − p_rod)/dx = 4·p / a): that is its σ beside the noise; its residual is the
  imbalance left, as spool travel, and the window's settling drift. Why the null is not made
  the LVDT's zero: the model family's spool follows the command (u → k_v·v); an LVDT zeroed at
  the hydraulic null moves the spool's map from the command by the valve's null bias, and on
  the realistic plant the closed-loop replay of the family with every true parameter then
  scored 7 % FIT on joint 2's angle (99 % in the spool's frame).
- position: power low, push each piston slowly (a small constant valve command) onto one end
  stop and then through its whole stroke onto the other, dwelling at each. The datasheet stroke
  is the length standard: the potentiometer's readings at s = ±L/2 give its offset and gain; the
  resolver's readings at the two stops, through the cylinder kinematics (DESIGN §1.1), give its
  mounting offset; the residual is the RMS disagreement of the two sensors over the sweep
  between the stops, as piston displacement.
- pressure_shunt (daq.service.procedure_shunt): after the zero, each pressure transducer with
  a `shunt` in the profile spanned by its shunt calibration resistor, without hydraulic power.
- oil_temperature (daq.service.procedure_temperature): the temperature transmitter's offset
  against a reference thermometer's reading typed by the user (`reference_c`, its 1σ
  `reference_sigma_c`); nothing moves, the power is not switched.

Each result is checked against the channel's declared accuracy (`accuracy`, 1σ offset and
gain): a residual above it, or an estimate farther than 5 σ of the class from the declared
scaling, is reported and not applied.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daq.commands.errors import CommandError
from daq.ring import RingCursor
from daq.station.analysis import Mean, correct, two_point, window_mean
from daq.station.calfile import Calibration, ChannelCal, now_utc
from daq.station.power import Power, stage_pressure

log = logging.getLogger(__name__)

PROCEDURES = (
    "pressure_zero", "pressure_span", "pressure_shunt", "position", "valve_null",
    "oil_temperature",
)  # fmt: skip
#: Those that never switch the hydraulic power, and so need no `[hydraulics]`.
UNPOWERED = ("oil_temperature",)
#: Where a pressure channel's offset in force comes from: the spans keep it (zero before span).
ZEROED = ("pressure_zero", "pressure_span", "pressure_shunt")
#: Loop-time limits (s) of the waits, so a stuck procedure ends with a reason.
WAIT_LIMIT_S = 600.0
#: A piston creeping off its stop during the valve null's balance faster than this (m/s) is
#: said in the null's problems: the valve feeds the creep, A_cap·ṡ, which on the realistic
#: rig (null flow gain ≈ 2·Cf·√p ≈ 1.4e-3 m³/s per volt of spool) moves the balance by about
#: 0.01 mV at 0.02 mm/s — a twentieth of the null's 0.5 mV target.
CREEP_M_S = 0.02e-3


class ProcedureError(RuntimeError):
    """The rig did not do what the procedure needs; the message says what and why."""


@dataclass
class Finding:
    """One channel's result."""

    channel: str
    cal: ChannelCal
    accuracy_offset: float | None
    accuracy_gain: float | None
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "offset": self.cal.offset,
            "gain": self.cal.gain,
            "sigma_offset": self.cal.sigma_offset,
            "sigma_gain": self.cal.sigma_gain,
            "residual": self.cal.residual,
            "accuracy_offset": self.accuracy_offset,
            "accuracy_gain": self.accuracy_gain,
            "ok": not self.problems,
            "problems": self.problems,
        }


@dataclass(frozen=True)
class SpanPoint:
    """One chamber at the supply: its declared reading open, extrapolated to an unlimited
    opening (value, and the correction that took), the reference and its 1σ, Pa."""

    m: Mean
    value: float
    correction: float
    ref: float
    sigma_ref: float


class Rows:
    """The rows the loop publishes, read from the moment of the call (a private cursor)."""

    def __init__(self, loop: Any) -> None:
        self.loop = loop
        self.layout = loop.layout
        self.cursor = RingCursor(loop.ring)
        self._buf = np.zeros((4096, loop.layout.width))

    def restart(self) -> None:
        self.cursor = RingCursor(self.loop.ring)

    def read(self, done: Callable[[np.ndarray], int | None], limit_s: float) -> np.ndarray:
        """Rows until `done(rows so far)` returns how many to keep (None: go on), or the loop
        time passes `limit_s` from the first row (ProcedureError)."""
        chunks: list[np.ndarray] = []
        total = 0
        t0 = None
        t_col = self.layout.index("t")
        while True:
            n = self.cursor.read_into(self._buf)
            if n == 0:
                if self.loop.finished.is_set():
                    raise ProcedureError("the loop stopped")
                time.sleep(0.001)
                continue
            chunks.append(self._buf[:n].copy())
            total += n
            rows = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
            chunks = [rows]
            if t0 is None:
                t0 = float(rows[0, t_col])
            keep = done(rows)
            if keep is not None:
                return rows[:keep]
            if float(rows[-1, t_col]) - t0 > limit_s:
                raise ProcedureError(f"not done within {limit_s:g} s of loop time")

    def seconds(self, s: float) -> np.ndarray:
        n = max(1, round(s / self.loop.profile.period))
        return self.read(lambda r: n if len(r) >= n else None, s + 60.0)


class ProcedureRunner:
    """At most one procedure at a time, in a thread of the service."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.profile = api.profile
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.status: dict[str, Any] = {"procedure": None, "running": False}

    # -------------------------------------------------------------- commands

    def start(self, args: dict[str, Any]) -> dict[str, Any]:
        name = str(args["procedure"])
        if name not in PROCEDURES:
            raise CommandError(
                "bad_args",
                f"calibrate: unknown procedure {name!r} (one of {', '.join(PROCEDURES)})",
            )
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                raise CommandError(
                    "rejected", f"calibrate: {self.status['procedure']} is still running"
                )
            state = self.api.loop.state.name
            if state != "IDLE":
                raise CommandError(
                    "invalid_state",
                    f"calibrate {name} refused in {state}: a procedure starts from IDLE "
                    "(stop and disarm first; reset a latched fault)",
                )
            if self.profile.hydraulics is None and name not in UNPOWERED:
                raise CommandError(
                    "rejected",
                    f"calibrate {name}: needs [hydraulics] (the procedure switches the power)",
                )
            self.status = {"procedure": name, "running": True, "step": "starting",
                           "result": None, "error": None}  # fmt: skip
            self._thread = threading.Thread(
                target=self._main, args=(name, dict(args)), name=f"calibrate-{name}", daemon=True
            )
            self._thread.start()
        return {"procedure": name, "started": True}

    def report(self) -> dict[str, Any]:
        return dict(self.status)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # -------------------------------------------------------------- the thread

    def _main(self, name: str, args: dict[str, Any]) -> None:
        try:
            findings = getattr(self, f"_{name}")(args)
            self.status["result"] = self._finish(name, findings, bool(args.get("apply", False)))
        except (ProcedureError, CommandError, ValueError) as exc:
            msg = exc.message if isinstance(exc, CommandError) else str(exc)
            self.status["error"] = f"{name}: {msg} (at step: {self.status.get('step')})"
            log.error("calibration %s", self.status["error"])
        except Exception as exc:  # a bug: reported, the rig made safe below
            self.status["error"] = f"{name}: {exc!r}"
            log.exception("calibration %s failed", name)
        finally:
            self._safe()
            self.status["running"] = False
            self.status["step"] = "done"

    def _step(self, text: str) -> None:
        self.status["step"] = text
        log.info("calibration %s: %s", self.status["procedure"], text)

    def _call(self, kind: str, payload: Any = None) -> dict[str, Any]:
        out: dict[str, Any] = self.api._call_loop(kind, payload)
        return out

    def _safe(self) -> None:
        """Disarm (valves null) whatever happened; power is left where the procedure put it."""
        if self.api.loop.state.name in ("RUNNING",):
            try:
                self._call("stop")
            except CommandError as exc:
                log.error("calibration: could not stop: %s", exc.message)
        if self.api.loop.state.name in ("ARMED",):
            try:
                self._call("disarm")
            except CommandError as exc:
                log.error("calibration: could not disarm: %s", exc.message)

    def _finish(self, name: str, findings: list[Finding], apply: bool) -> dict[str, Any]:
        ok = all(not f.problems for f in findings)
        oil = next((f.cal.oil_c for f in findings if f.cal.oil_c is not None), None)
        result: dict[str, Any] = {
            "procedure": name,
            "channels": {f.channel: f.to_dict() for f in findings},
            "ok": ok,
            "applied": False,
            "oil_c": oil,
        }
        if "valve_null_v" in self.status:
            result["valve_null_v"] = self.status.pop("valve_null_v")
            result["hydraulic_null"] = self.status.pop("hydraulic_null")
        for key in ("span_points", "shunt_points", "temperature_point"):
            if key in self.status:
                result[key] = self.status.pop(key)
        if apply and ok:
            self._step("applying")
            state = self.api.calibration
            new = Calibration(self.profile.rig.id, now_utc(), {f.channel: f.cal for f in findings})
            merged = state.current.merged(new) if state.current is not None else new
            out = state.apply(merged, cmd=f"calibrate {name}")
            result["applied"] = True
            result["calibration"] = out["calibration"]
        elif apply:
            result["refused"] = "a residual exceeds the declared accuracy: nothing applied"
        return result

    # -------------------------------------------------------------- shared steps

    def _declared(self, rows: np.ndarray, name: str) -> np.ndarray:
        """A channel's declared readings (the calibration in force undone)."""
        eng = rows[:, self.api.loop.layout.index(f"eng.{name}")]
        cur = self.api.calibration.current
        c = cur.channels.get(name) if cur is not None else None
        return eng if c is None else eng * c.gain + c.offset

    def _current(self, name: str) -> ChannelCal:
        cur = self.api.calibration.current
        c = cur.channels.get(name) if cur is not None else None
        return c if c is not None else ChannelCal()

    def _sigma_gain(self, name: str) -> float:
        """The 1σ of a channel's gain as it stands: the calibration's in force, else the
        declared accuracy class's (a procedure that keeps the gain keeps its uncertainty)."""
        cur = self.api.calibration.current
        if cur is not None and name in cur.channels:
            return cur.channels[name].sigma_gain
        acc = next(c for c in self.profile.inputs if c.name == name).accuracy
        return acc.gain if acc is not None else 0.0

    def _oil(self, rows: np.ndarray) -> float | None:
        """The oil temperature during `rows` as the loop reads it: through the calibration in
        force (the oil_temperature procedure's, once it ran), not the declared scaling."""
        ch = self.profile.oil_temperature
        if ch is None:
            return None
        return float(rows[:, self.api.loop.layout.index(f"eng.{ch.name}")].mean())

    def _finding(self, name: str, cal: ChannelCal, scale: float = 1.0) -> Finding:
        """Check a result against the channel's declared accuracy class."""
        ch = next(c for c in self.profile.inputs if c.name == name)
        acc = ch.accuracy
        f = Finding(name, cal, acc.offset if acc else None, acc.gain if acc else None)
        if acc is None:
            return f
        if cal.residual is not None and acc.offset > 0 and cal.residual > acc.offset:
            f.problems.append(
                f"residual {cal.residual:.4g} exceeds the declared accuracy {acc.offset:.4g}"
            )
        if acc.offset > 0 and abs(cal.offset) > 5 * acc.offset:
            f.problems.append(
                f"offset {cal.offset:.4g} is beyond 5 × the declared accuracy {acc.offset:.4g} "
                "(a trapped pressure, a stop not reached, or a faulty sensor?)"
            )
        if acc.gain > 0 and abs(cal.gain - 1.0) > 5 * acc.gain:
            f.problems.append(
                f"gain {cal.gain:.6g} is beyond 5 × the declared accuracy {acc.gain:.3g} of 1"
            )
        return f

    def _power(self, level: Power) -> None:
        self._step(f"power {level.name.lower()}")
        self._call("power", int(level))

    def _wait_supply(self, rows: Rows, below: float | None, above: float | None) -> None:
        """Until the supply channel is below/above a level (or 3 ramp times without one)."""
        hyd = self.profile.hydraulics
        assert hyd is not None
        ramp = 3.0 * (hyd.ramp_down_s if below is not None else hyd.ramp_up_s)
        sup = self.profile.supply_channel
        if sup is None:
            rows.seconds(ramp)
            return
        col = self.api.loop.layout.index(f"eng.{sup.name}")
        n = max(1, round(0.2 / self.profile.period))

        def done(r: np.ndarray) -> int | None:
            if len(r) < n:
                return None
            p = r[-n:, col].mean()
            ok = (below is None or p < below) and (above is None or p > above)
            return len(r) if ok else None

        level = below if below is not None else above
        assert level is not None
        what = f"{'below' if below is not None else 'above'} {level / 1e6:.3g} MPa"
        self._step(f"waiting for the supply to fall/rise {what}")
        try:
            rows.read(done, 5.0 * ramp + 10.0)
        except ProcedureError:
            raise ProcedureError(f"the supply pressure did not get {what}") from None

    # -------------------------------------------------------------- pressure zero

    def _drain(self, rows: Rows, args: dict[str, Any], window_s: float) -> float:
        """Power off, wait for the supply to decay, then open the valves both ways (a square
        wave) so that both chambers drain to tank and the arm settles to rest; returns once
        `drain_s` has passed, the valves still draining for `window_s` more (the caller
        averages them or disarms). The valve command's amplitude, V."""
        from controller.station_runner import Phase, PhaseRunner
        from daq.service.control_api import joint_gains, joint_limits

        p = self.profile
        self._power(Power.OFF)
        self._wait_supply(rows, below=0.01 * stage_pressure(p, Power.HIGH), above=None)
        drain_s = float(args.get("drain_s", 4.0))
        volts = float(args.get("valve_volts", 2.0))
        n = len(p.joints)
        runner = PhaseRunner(
            [Phase("drain", drain_s + window_s + 1.0, (volts,) * n, square_s=0.5)],
            joint_gains(p), joint_limits(p), p.period,
        )  # fmt: skip
        self._step("opening the valves to drain both chambers (power off)")
        rows.restart()
        self._call("drain", runner)
        rows.seconds(drain_s)
        return volts

    def _pressure_zero(self, args: dict[str, Any]) -> list[Finding]:
        p = self.profile
        rows = Rows(self.api.loop)
        window_s = float(args.get("window_s", 4.0))
        volts = self._drain(rows, args, window_s)
        self._step(f"averaging over {window_s:g} s")
        win = rows.seconds(window_s)
        self._call("disarm")
        lay = self.api.loop.layout
        oil = self._oil(win)
        findings = []
        for ch in p.inputs:
            if ch.role not in ("pressure_cap", "pressure_rod", "supply"):
                continue
            x = self._declared(win, ch.name)
            if ch.role != "supply":
                out = next(c for c in p.outputs if c.joint == ch.joint)
                cmd = win[:, lay.index(f"cmd.{out.name}")]
                # cap → tank while the spool is negative, rod → tank while positive
                to_tank = cmd < -0.9 * volts if ch.role == "pressure_cap" else cmd > 0.9 * volts
                x = x[to_tank]
            m = window_mean(x)
            cur = self._current(ch.name)
            cal = ChannelCal(
                float(m.value), cur.gain, float(m.sigma), self._sigma_gain(ch.name),
                "pressure_zero", now_utc(), oil, float(m.drift),
            )  # fmt: skip
            findings.append(self._finding(ch.name, cal))
        return findings

    # -------------------------------------------------------------- pressure span

    def _pressure_span(self, args: dict[str, Any]) -> list[Finding]:
        from controller.station_runner import Phase, PhaseRunner
        from daq.service.control_api import joint_gains, joint_limits

        p = self.profile
        sup = p.supply_channel
        ref_pa = args.get("reference_pa")
        if ref_pa is None and sup is None:
            raise ProcedureError(
                "the profile has no supply channel (role supply) to span against: read the "
                "supply at the high stage on a gauge and give it (reference_pa)"
            )
        if ref_pa is not None and not 0.2 * stage_pressure(p, Power.HIGH) < ref_pa < 2.0 * (
            stage_pressure(p, Power.HIGH)
        ):
            raise ProcedureError(
                f"reference_pa {ref_pa:.6g} Pa is not the high stage's supply: allowed "
                f"0.2–2 × the declared {stage_pressure(p, Power.HIGH):.6g} Pa"
            )
        # A gauge's 1σ: given, else a class 1.0 gauge read at about half its scale (0.5 %).
        gauge_sigma = float(args.get("reference_sigma_pa", 0.005 * (ref_pa or 0.0)))
        if gauge_sigma < 0.0:
            raise ProcedureError(f"reference_sigma_pa {gauge_sigma:.6g} must be ≥ 0 (Pa)")
        chans = [c for c in p.inputs if c.role in ("pressure_cap", "pressure_rod")]
        if ref_pa is not None and sup is not None:
            chans.append(sup)
        unzeroed = [c.name for c in chans if self._current(c.name).method not in ZEROED]
        if unzeroed:
            raise ProcedureError(
                f"{', '.join(unzeroed)} not zeroed: run pressure_zero (with apply) before the "
                "span, which keeps the zero's offset"
            )
        levels = [Power.HIGH] if ref_pa is not None else [Power.LOW, Power.HIGH]
        volts = float(args.get("valve_volts", 2.0))
        approach = 0.3
        push_s, open_s = float(args.get("push_s", 5.0)), 1.5
        dwell_s = 0.75
        n = len(p.joints)
        lay = self.api.loop.layout
        st = lay.index("state")
        rows = Rows(self.api.loop)
        points: dict[str, list[SpanPoint]] = {c.name: [] for c in chans}
        # The supply transducer's own gain uncertainty: common to every point (not averaged).
        ref_rel = self._sigma_gain(sup.name) if ref_pa is None and sup is not None else 0.0
        oil = None
        for level in levels:
            self._power(level)
            self._wait_supply(rows, below=None, above=0.95 * stage_pressure(p, level))
            self._step(f"arm ({level.name.lower()} pressure)")
            self._call("arm")
            # Slowly onto the stop (an impact's pressure spike stays trapped behind the
            # metering edge), then open on it at half and at full `volts`: the chamber stands
            # below the supply by the leakage's drop across the metering edge, which falls with
            # the square of the opening, so the two openings extrapolate it away.
            phases = []
            for sign, what in ((1.0, "cap"), (-1.0, "rod")):
                v = sign * volts
                phases += [
                    Phase(f"onto the stops ({what} side fed)", push_s, (sign * approach,) * n),
                    Phase(f"{what} chambers at supply, half open", open_s, (0.5 * v,) * n),
                    Phase(f"{what} chambers at supply, open", open_s, (v,) * n),
                ]
            # back to null at the rate limit before the hold takes over
            phases.append(Phase("release", 0.1, (0.0,) * n))
            runner = PhaseRunner(
                phases, joint_gains(p), joint_limits(p), p.period, max_rate_v_per_s=500.0
            )
            self._step(f"pistons onto their stops, chambers at the supply ({level.name.lower()})")
            rows.restart()
            self._call("run", runner)
            run = rows.read(_until_run_ends(st), sum(ph.duration_s for ph in phases) + 60.0)
            if run[-1, st] != 1:
                fault = self.api.loop.fault
                raise ProcedureError(
                    "the pushes ended in a fault: "
                    f"{fault.message if fault is not None else 'unknown'}"
                )
            self._call("disarm")
            run = run[run[:, st] == 2]
            ends = np.cumsum([round(ph.duration_s / p.period) for ph in phases])
            nd = round(dwell_s / p.period)
            # (half open, open) windows: the last `dwell_s` of each phase
            at = {
                "pressure_cap": (run[ends[1] - nd : ends[1]], run[ends[2] - nd : ends[2]]),
                "pressure_rod": (run[ends[4] - nd : ends[4]], run[ends[5] - nd : ends[5]]),
            }
            oil = self._oil(run)
            for c in chans:
                roles = ["pressure_cap", "pressure_rod"] if c.role == "supply" else [c.role]
                for role in roles:
                    half, full = at[role]
                    if ref_pa is not None:
                        ref, sref = float(ref_pa), gauge_sigma
                    else:
                        assert sup is not None
                        m = window_mean(full[:, lay.index(f"eng.{sup.name}")])
                        ref, sref = m.value, m.sigma
                    mf = window_mean(self._declared(full, c.name))
                    if c.role == "supply":  # the supply transducer sees no metering edge
                        points[c.name].append(SpanPoint(mf, mf.value, 0.0, ref, sref))
                        continue
                    mh = window_mean(self._declared(half, c.name))
                    # drop ∝ 1/opening²: p∞ = p_full + (p_full − p_half)·r²/(1 − r²), r = ½
                    corr = (mf.value - mh.value) / 3.0
                    points[c.name].append(SpanPoint(mf, mf.value + corr, corr, ref, sref))
        self.status["span_points"] = {
            name: [
                {"reading": q.m.value, "extrapolated": q.value, "correction": q.correction,
                 "reference_pa": q.ref, "sigma_reading": q.m.sigma,
                 "sigma_reference_pa": q.sigma_ref, "drift": q.m.drift}
                for q in pts
            ]
            for name, pts in points.items()
        }  # fmt: skip
        findings = []
        for c in chans:
            cur = self._current(c.name)
            pts = points[c.name]
            rd = np.array([q.value - cur.offset for q in pts])
            refs = np.array([q.ref for q in pts])
            gain = float((rd * refs).sum() / (refs * refs).sum())
            # σ of the gain: reading noise, the reference's noise (or the gauge's σ), the zero's
            # σ and the extrapolation (its whole correction counted as 1σ: the 1/opening² law
            # is a model), each point's in quadrature over the points; then the supply
            # transducer's gain σ, common to all points.
            var = [
                ((q.m.sigma / q.ref) ** 2 + (gain * q.sigma_ref / q.ref) ** 2
                 + (cur.sigma_offset / q.ref) ** 2 + (q.correction / q.ref) ** 2)
                for q in pts
            ]  # fmt: skip
            sg = math.hypot(math.sqrt(sum(var)) / len(pts), gain * ref_rel)
            misfit = float(np.sqrt(np.mean((rd - gain * refs) ** 2))) if len(pts) > 1 else 0.0
            drift = max(q.m.drift for q in pts)
            cal = ChannelCal(
                cur.offset, gain, cur.sigma_offset, sg, "pressure_span", now_utc(), oil,
                max(misfit, drift),
            )  # fmt: skip
            findings.append(self._finding(c.name, cal))
        return findings

    def _pressure_shunt(self, args: dict[str, Any]) -> list[Finding]:
        from daq.service.procedure_shunt import pressure_shunt

        return pressure_shunt(self, args)

    def _oil_temperature(self, args: dict[str, Any]) -> list[Finding]:
        from daq.service.procedure_temperature import oil_temperature

        return oil_temperature(self, args)

    # -------------------------------------------------------------- position

    def _position(self, args: dict[str, Any]) -> list[Finding]:
        from controller.plant.dynamics import cylinder, joint_from_piston
        from controller.station_runner import Phase, PhaseRunner
        from daq.profile.plant import known_params
        from daq.service.control_api import joint_gains, joint_limits

        p = self.profile
        params = known_params(p)
        rows = Rows(self.api.loop)
        self._power(Power.LOW)
        self._wait_supply(rows, below=None, above=0.95 * stage_pressure(p, Power.LOW))
        self._step("arm")
        self._call("arm")
        volts = float(args.get("valve_volts", 0.3))
        push_s = float(args.get("push_s", 6.0))
        dwell = 1.0
        lay = self.api.loop.layout
        st = lay.index("state")
        findings: list[Finding] = []
        n = len(p.joints)
        for j, joint in enumerate(p.joints):
            pot = p.joint_channel(joint.name, "potentiometer")
            res = p.joint_channel(joint.name, "resolver")
            if pot is None or res is None:
                continue
            # The other joints rest on their retracted stops (open loop, gently) rather than
            # hold a pose against the coupling at low pressure: no following error to trip.
            drive: list[float | None] = [-0.5 * volts] * n

            def phase(name: str, v: float, j: int = j, drive: list[Any] = drive) -> Phase:
                d = list(drive)
                d[j] = v
                return Phase(name, push_s, tuple(d))

            runner = PhaseRunner(
                [phase("retract", -volts), phase("extend", volts)],
                joint_gains(p), joint_limits(p), p.period,
            )  # fmt: skip
            self._step(f"{joint.name}: retract onto the stop, sweep to the other stop")
            rows.restart()
            self._call("run", runner)
            run = rows.read(_until_run_ends(st), 2 * push_s + 60.0)
            if run[-1, st] != 1:  # not back in ARMED: a trip ended the sweep
                fault = self.api.loop.fault
                raise ProcedureError(
                    f"{joint.name}: the sweep ended in a fault: "
                    f"{fault.message if fault is not None else 'unknown'}"
                )
            run = run[run[:, st] == 2]
            k = round(push_s / p.period)
            retract, extend = run[:k], run[k : 2 * k]
            nd = round(dwell / p.period)
            half = 0.5 * params.stroke[j]
            lo = self._at_stop(retract[-nd:], pot.name, joint.name, "retracted")
            hi = self._at_stop(extend[-nd:], pot.name, joint.name, "extended")
            tp = two_point(lo, hi, -half, half)
            # The resolver at the two stops, through the kinematics: its mounting offset.
            stops = np.zeros((2, n))
            stops[:, j] = (-half, half)
            q_stop = joint_from_piston(params, stops)[:, j]
            q_lo = window_mean(self._declared(retract[-nd:], res.name))
            q_hi = window_mean(self._declared(extend[-nd:], res.name))
            dq = 0.5 * ((q_lo.value - q_stop[0]) + (q_hi.value - q_stop[1]))
            sdq = 0.5 * math.hypot(q_lo.sigma, q_hi.sigma)
            # The sweep between the stops: pot (corrected) against resolver (corrected).
            s_pot = correct(self._declared(extend, pot.name), tp.offset, tp.gain)
            moving = np.abs(s_pot) < 0.8 * half
            if moving.sum() < 50:
                raise ProcedureError(f"{joint.name}: too few samples between the stops")
            q_res = self._declared(extend[moving], res.name) - dq
            qq = np.zeros((int(moving.sum()), n))
            qq[:, j] = q_res
            s_res, _ = cylinder(params, qq)
            resid_s = float(np.sqrt(np.mean((s_pot[moving] - s_res[:, j]) ** 2)))
            _, r = cylinder(params, qq)
            resid_q = float(np.sqrt(np.mean(((s_pot[moving] - s_res[:, j]) / r[:, j]) ** 2)))
            oil = self._oil(run)
            now = now_utc()
            findings.append(self._finding(pot.name, ChannelCal(
                float(tp.offset), float(tp.gain), float(tp.sigma_offset), float(tp.sigma_gain),
                "position", now, oil, resid_s,
            )))  # fmt: skip
            cur = self._current(res.name)
            findings.append(self._finding(res.name, ChannelCal(
                float(dq), cur.gain, float(sdq), self._sigma_gain(res.name), "position", now, oil,
                resid_q,
            )))  # fmt: skip
        self._call("disarm")
        return findings

    # -------------------------------------------------------------- valve null

    def _valve_null(self, args: dict[str, Any]) -> list[Finding]:

        from controller.station_runner import Phase, PhaseRunner
        from daq.service.control_api import joint_gains, joint_limits

        p = self.profile
        plant = p.plant
        assert plant is not None
        n = len(p.joints)
        lay = self.api.loop.layout
        rows = Rows(self.api.loop)
        vmax = tuple(j.limits.valve_max_v for j in p.joints)
        saturates = [
            vmax[j] * plant.joints[j].valve_gain >= 1.02 * plant.joints[j].spool_max
            for j in range(n)
        ]
        span: dict[int, Any] = {}
        if any(saturates):
            self._power(Power.OFF)
            self._wait_supply(rows, below=0.01 * stage_pressure(p, Power.HIGH), above=None)
            half_s = float(args.get("stop_s", 1.0))
            runner = PhaseRunner(
                [Phase("spool stops", 2 * half_s + 0.5, vmax, square_s=half_s)],
                joint_gains(p), joint_limits(p), p.period, max_rate_v_per_s=500.0,
            )  # fmt: skip
            self._step("spool stops with the power off: LVDT span")
            rows.restart()
            self._call("drain", runner)
            win = rows.seconds(2 * half_s)
            self._call("disarm")
            for j, joint in enumerate(p.joints):
                lvdt = p.joint_channel(joint.name, "lvdt")
                out = next(c for c in p.outputs if c.joint == joint.name)
                if lvdt is None or not saturates[j]:
                    continue
                cmd = win[:, lay.index(f"cmd.{out.name}")]
                x = self._declared(win, lvdt.name)
                hi = window_mean(_settled(x, cmd > 0.99 * vmax[j]))
                lo = window_mean(_settled(x, cmd < -0.99 * vmax[j]))
                umax = plant.joints[j].spool_max
                span[j] = (two_point(lo, hi, -umax, umax), math.hypot(lo.drift, hi.drift))
        self._power(Power.LOW)
        self._wait_supply(rows, below=None, above=0.95 * stage_pressure(p, Power.LOW))
        # On the retracted stop (the piston cannot move, so no flow but the leaks), the spool
        # is servoed until both chambers stand at the same pressure: the piston's leakage then
        # carries nothing, and with matched metering edges each chamber's inflow and outflow
        # balance only at centred edges, whatever the load (DESIGN §1.2). A step of ±delta
        # around it measures the pressure gain, hence the opening around null that the edges'
        # mismatch (flow-gain symmetry, 5 % 1σ) can shift the balance by. Balanced chambers
        # push the piston out with p·(A_cap − A_rod): where the load does not hold it, it
        # creeps off the stop and the valve feeds that flow, which moves the balance by
        # Ā·ṡ/K_q (0.2 mV on the realistic j2 at 0.35 mm/s, which creeps off either stop). No
        # flow gain is known here to correct it by, so a creep above CREEP_M_S is said in
        # the null's problems.
        self._step("on the retracted stops, the spool where both chambers balance (low pressure)")
        bal, plus, minus, oil = self._balance_run(rows, args)
        creep = self._creep(bal)
        findings = []
        self.status["valve_null_v"] = null_cmd = {}
        self.status["hydraulic_null"] = hydraulic = {}
        for j, joint in enumerate(p.joints):
            lvdt = p.joint_channel(joint.name, "lvdt")
            out = next(c for c in p.outputs if c.joint == joint.name)
            pc = p.joint_channel(joint.name, "pressure_cap")
            pr = p.joint_channel(joint.name, "pressure_rod")
            if lvdt is None or pc is None or pr is None:
                continue

            def dp(w: np.ndarray, pc: Any = pc, pr: Any = pr) -> np.ndarray:
                return np.asarray(
                    w[:, lay.index(f"eng.{pc.name}")] - w[:, lay.index(f"eng.{pr.name}")]
                )

            at = window_mean(self._declared(bal, lvdt.name))
            imbalance = window_mean(dp(bal))
            p_bal = float(0.5 * (bal[:, lay.index(f"eng.{pc.name}")]
                                 + bal[:, lay.index(f"eng.{pr.name}")]).mean())  # fmt: skip
            dx = float(
                self._declared(plus, lvdt.name).mean() - self._declared(minus, lvdt.name).mean()
            )
            gain_pa_v = float(dp(plus).mean() - dp(minus).mean()) / dx if dx > 0 else float("nan")
            problems = []
            moving = creep.get(j, 0.0)
            if moving > 1e-3:
                raise ProcedureError(
                    f"{joint.name}: the piston left its retracted stop during the balance "
                    f"(moving at {moving * 1e3:.2f} mm/s)"
                )
            if moving > CREEP_M_S:
                problems.append(
                    f"the piston crept off its retracted stop at {moving * 1e3:.3f} mm/s during "
                    f"the balance (above {CREEP_M_S * 1e3:.3f} mm/s): the valve fed that flow, "
                    "which moves this null by Ā·ṡ/K_q, not in its σ"
                )
            if math.isfinite(gain_pa_v) and gain_pa_v > 0:
                # opening around null from the pressure gain: d(pc − pr)/dx = 4·p_bal / a
                half_open = 4.0 * p_bal / gain_pa_v
                sigma = math.hypot(at.sigma, 0.025 * half_open)
                # residual: what is left of the imbalance, as spool travel, and the settling
                residual = math.hypot(abs(imbalance.value) / gain_pa_v, at.drift)
            else:
                # The piston floats off its stop (the balanced chambers lift it): the steps
                # move it instead of the pressures, and nothing bounds the edges' share.
                problems.append(
                    f"no pressure gain around the balance (Δ(p_cap − p_rod) "
                    f"{float(dp(plus).mean() - dp(minus).mean()):.4g} Pa for ΔLVDT {dx:.4g} V: "
                    "the piston is off its stop)"
                )
                sigma, residual = math.inf, at.drift
            null_cmd[joint.name] = float(bal[:, lay.index(f"cmd.{out.name}")].mean())
            # The LVDT is calibrated in the spool's own frame: zero at the middle of its stops,
            # where the command's null puts the spool. The hydraulic null (the edges centred)
            # is the valve's, not the sensor's: reported, in the declared reading and in spool
            # units, for the valve's null compensation and the identified b₀ to be checked
            # against; made the LVDT's zero it would move the spool's map from the command by
            # b₀, which the model family's spool dynamics (u → k_v·v) do not carry.
            if j in span:
                two, drift = span[j]
                offset, gain = float(two.offset), float(two.gain)
                f = self._finding(lvdt.name, ChannelCal(
                    offset, gain, float(two.sigma_offset), float(two.sigma_gain), "valve_null",
                    now_utc(), oil, drift,
                ))  # fmt: skip
                findings.append(f)
            else:
                cur = self._current(lvdt.name)
                offset, gain = cur.offset, cur.gain
            hydraulic[lvdt.name] = {
                "reading": at.value,
                "spool": (at.value - offset) / gain,
                "sigma": sigma,
                "residual": residual,
                "problems": problems,
            }
        return findings

    def _balance_run(
        self, rows: Rows, args: dict[str, Any]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float | None]:
        """Each piston pushed onto its retracted stop, its spool servoed to the chambers'
        balance, then stepped ±delta from there: the rows of the balance's settled end, of each
        step's settled half, and the oil temperature."""
        from controller.station_runner import Phase, PhaseRunner
        from daq.service.control_api import joint_gains, joint_limits

        p = self.profile
        n = len(p.joints)
        approach = float(args.get("valve_volts", 0.3))
        push_s = float(args.get("push_s", 5.0))
        bal_s = float(args.get("balance_s", 10.0))
        ki = float(args.get("balance_i", 3.0e-8))
        delta, step_s = 0.002, 1.5
        phases = [
            Phase("onto the retracted stops", push_s, (-approach,) * n),
            Phase("balance both chambers", bal_s, (0.0,) * n, balance_i=ki),
            Phase("null + delta", step_s, (delta,) * n, from_balance=True),
            Phase("null - delta", step_s, (-delta,) * n, from_balance=True),
            Phase("release", 0.1, (0.0,) * n),
        ]
        runner = PhaseRunner(phases, joint_gains(p), joint_limits(p), p.period, 500.0)
        self._call("arm")
        rows.restart()
        self._call("run", runner)
        st = self.api.loop.layout.index("state")
        run = rows.read(_until_run_ends(st), sum(ph.duration_s for ph in phases) + 60.0)
        if run[-1, st] != 1:
            fault = self.api.loop.fault
            raise ProcedureError(
                f"the balance ended in a fault: {fault.message if fault is not None else 'unknown'}"
            )
        run = run[run[:, st] == 2]
        self._call("disarm")
        ends = np.cumsum([round(ph.duration_s / p.period) for ph in phases])
        nw = round(0.5 * step_s / p.period)
        bal = run[ends[1] - round(0.4 * bal_s / p.period) : ends[1]]
        return bal, run[ends[2] - nw : ends[2]], run[ends[3] - nw : ends[3]], self._oil(run)

    def _creep(self, win: np.ndarray) -> dict[int, float]:
        """Each joint's piston speed (m/s, from its potentiometer) over a window."""
        p = self.profile
        out = {}
        for j, joint in enumerate(p.joints):
            pot = p.joint_channel(joint.name, "potentiometer")
            if pot is not None:
                x = win[:, self.api.loop.layout.index(f"eng.{pot.name}")]
                out[j] = _speed(x, p.period)
        return out

    def _at_stop(self, win: np.ndarray, pot: str, joint: str, which: str) -> Mean:
        x = self._declared(win, pot)
        m = window_mean(x)
        slope = _speed(x, self.profile.period)
        if slope > 1e-4:  # m/s: still moving
            raise ProcedureError(
                f"{joint}: the piston did not come to rest on its {which} stop (moving at "
                f"{slope * 1e3:.2f} mm/s at the end of the push); raise valve_volts or push_s"
            )
        return m


def _speed(x: np.ndarray, period: float) -> float:
    """|dx/dt| of the straight line through a window sampled every `period` s."""
    return abs(float(np.polyfit(np.arange(len(x)) * period, x, 1)[0]))


def _settled(x: np.ndarray, on: np.ndarray) -> np.ndarray:
    """The samples of each run of `on` after its first half (the spool has reached its stop)."""
    out = []
    idx = np.flatnonzero(np.diff(np.concatenate(([0], on.astype(np.int8), [0]))))
    for a, b in zip(idx[::2], idx[1::2], strict=True):
        out.append(x[a + (b - a) // 2 : b])
    return np.concatenate(out) if out else x[:0]


def _until_run_ends(state_col: int) -> Callable[[np.ndarray], int | None]:
    """`Rows.read`'s test: the rows up to the first one that is no longer RUNNING (2)."""

    def done(r: np.ndarray) -> int | None:
        running = r[:, state_col] == 2
        return len(r) if running.any() and not running[-1] else None

    return done
