"""Control laws: joint reference in, valve volts out. Scalar maths only (no allocation).

Every law has `enable(fb, q_ref)` (bumpless: histories from the measured state),
`update(t, fb, q_ref, qd_ref, qdd_ref, volts_out)` and `disable()`. Outputs are clamped to each
joint's `valve_max_v`.

- `PidLaw`: one LinuxCNC PID per joint (`controller.pid`).
- `FeedforwardPid`: PID + the inverse model's valve command (DESIGN §1.2 / `feedforward`).
- `GravityCompPD`: Lin eq. 37, τ = −K_D q̇ + K_P (q_d − q) + i(q, q̇) with i the identified gravity
  and friction torque; a hydraulic joint makes torque through pressure, so the torque demand
  becomes a force demand F = τ/r closed around the measured force A⁺p⁺ − A⁻p⁻ (gain k_f, V/N).
- `VelocityLimitedPD`: Lin eq. 34–36, the PD whose velocity demand saturates at V_max (constant
  velocity over a wide range for a large step), with the incremental output of eq. 35.
- `ValveSine`: Sakai's open-loop valve excitation v = v0 + A sin 2πft on the driven joints;
  joints with A = 0 are held by their PID (Sakai's "hold one joint, drive the other").
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from controller import compensation as comp
from controller import pressure_feedback as pf
from controller.feedback import Feedback
from controller.feedforward import COULOMB_SMOOTH_M_S, PlantModel
from controller.limits import JointLimits
from controller.pid import Pid, PidParams
from controller.trajectories import Array


class _VelocityEstimate:
    """Backward difference q̇ = (q_k − q_{k−1})/Δt (Lin, after eq. 36), optionally low-passed."""

    def __init__(self, n: int, period: float, cutoff_hz: float) -> None:
        self.period = period
        self.alpha = 1.0 - math.exp(-2 * math.pi * cutoff_hz * period) if cutoff_hz > 0 else 1.0
        self.prev = [0.0] * n
        self.v = [0.0] * n

    def reset(self, q: Array) -> None:
        for j in range(len(self.prev)):
            self.prev[j] = float(q[j])
            self.v[j] = 0.0

    def update(self, q: Array) -> None:
        for j in range(len(self.prev)):
            raw = (q[j] - self.prev[j]) / self.period
            self.prev[j] = float(q[j])
            self.v[j] += self.alpha * (raw - self.v[j])


class Law:
    n: int
    limits: Sequence[JointLimits]
    saturated_count: int = 0
    #: Per joint: True where the law has no position reference (open-loop valve drive); the
    #: runner then reports the measured position as the reference. Empty: every joint closed
    #: (a class default that fits any number of joints).
    open_loop: Sequence[bool] = ()
    #: True for a law that takes the joints to its reference itself (Lin's velocity-limited PD
    #: given a step): the runner then inserts no approach move before it — the step *is* the
    #: experiment — and reports `reference_out` instead of the segment's reference.
    drives_to_reference: bool = False

    def enable(self, fb: Feedback, q_ref: Array) -> None:
        raise NotImplementedError

    def update(
        self, t: float, fb: Feedback, q_ref: Array, qd_ref: Array, qdd_ref: Array, volts_out: Array
    ) -> None:
        raise NotImplementedError

    def disable(self) -> None:
        """Nothing to release by default."""

    def reference_out(self, ref_out: Array) -> None:
        """The position the law expects the joints at now (only if `drives_to_reference`)."""

    def _clamp(self, j: int, v: float) -> float:
        lim = self.limits[j].valve_max_v
        if v > lim:
            self.saturated_count += 1
            return lim
        if v < -lim:
            self.saturated_count += 1
            return -lim
        return v


class PidLaw(Law):
    """One PID per joint, plus each joint's load-pressure (ΔP) feedback where its gain `dp`
    is set (`controller.pressure_feedback`; refused on a joint whose pressures are not
    measured — `JointLimits.area_cap/area_rod` are 0 there)."""

    def __init__(
        self, gains: Sequence[PidParams], limits: Sequence[JointLimits], period: float
    ) -> None:
        if len(gains) != len(limits):
            raise ValueError("one PidParams and one JointLimits per joint")
        self.n, self.limits = len(gains), list(limits)
        self.pids = [Pid(g, period) for g in gains]
        for j, (g, lim) in enumerate(zip(gains, limits, strict=True)):
            if g.dp > 0.0 and not lim.has_pressure:
                raise ValueError(
                    f"joint {j + 1}: ΔP feedback (dp = {g.dp:g} V/kN) needs the joint's cap and "
                    f"rod pressure channels and piston areas; this joint has none (set dp = 0)"
                )
        #: Per joint: ΔP gain in V/N (0 = off), high-pass α, areas; the filter state.
        self.dp_gain = [g.dp * 1e-3 for g in gains]
        self.dp_alpha = [pf.highpass_coefficient(g.dp_hp_hz, period) for g in gains]
        self.dp_ac = [lim.area_cap for lim in limits]
        self.dp_ar = [lim.area_rod for lim in limits]
        self.dp_state = pf.new_state(self.n)
        #: The ΔP term of the last cycle per joint, V (telemetry, tests).
        self.dp_volts = [0.0] * self.n

    def enable(self, fb: Feedback, q_ref: Array) -> None:
        for j, pid in enumerate(self.pids):
            pid.enable(float(q_ref[j]), float(fb.q[j]))
            pf.reset_state(self.dp_state, j)
            self.dp_volts[j] = 0.0

    def disable(self) -> None:
        for pid in self.pids:
            pid.disable()

    def _dp(self, j: int, fb: Feedback, expected_force: float) -> float:
        """Joint j's ΔP term this cycle (0 where off)."""
        gain = self.dp_gain[j]
        if gain == 0.0:
            return 0.0
        force = pf.load_force(fb.p_cap[j], fb.p_rod[j], self.dp_ac[j], self.dp_ar[j])
        v = pf.dp_feedback_step(self.dp_state, j, force - expected_force, gain, self.dp_alpha[j])
        self.dp_volts[j] = v
        return v

    def update(
        self, t: float, fb: Feedback, q_ref: Array, qd_ref: Array, qdd_ref: Array, volts_out: Array
    ) -> None:
        for j, pid in enumerate(self.pids):
            volts_out[j] = self._clamp(j, pid.update(q_ref[j], fb.q[j]) + self._dp(j, fb, 0.0))


class FeedforwardPid(PidLaw):
    """PID plus the inverse-model valve command for the reference motion.

    `pressure_source="model"` (default) uses only the steady-state closed form: a pure
    feed-forward, it leaves the loop's stability margin as it is. `"measured"` puts the
    feedback pressures into the flow model (DESIGN §1.2); that closes a pressure loop through
    the valve, so the pressures are low-passed at `pressure_filter_hz` (well below the ~8 Hz
    hydraulic resonance) — unfiltered, it pumps the resonance (see docs/controller.md).
    A NaN pressure falls back to the model.

    The PIDs run without their velocity and acceleration feed-forward (`ff1`, `ff2`): the
    inverse model's command is that feed-forward, and the gains of a rig tuned for `pid`
    (`rigctl tune` writes ff1 = 1/velocity gain) would otherwise add it twice — on the realistic
    plant with tune's gains, `rigctl identify`'s tracking check measured PID + model 4× worse
    than PID alone for that reason.

    `valve_null` / `valve_lap` pass the whole command (PID, feed-forward, ΔP) through
    `compensation.valve_spool` with the null offset and lap of the parameter file's
    `[structure]`, so the valve behaves as the centred, zero-lapped one the laws reckon with.
    """

    def __init__(
        self,
        gains: Sequence[PidParams],
        limits: Sequence[JointLimits],
        period: float,
        model: PlantModel,
        pressure_source: str = "model",
        pressure_filter_hz: float = 1.0,
        coulomb_ff: float = 0.0,
        valve_null: bool | Sequence[bool] = False,
        valve_lap: bool | Sequence[bool] = False,
    ) -> None:
        super().__init__([g.replace(ff1=0.0, ff2=0.0) for g in gains], limits, period)
        #: Valve compensation per joint (controller.compensation.valve_spool): the null offset
        #: b₀ and lap d it inverts, spool units; 0 where switched off.
        self.valve_b0, self.valve_d = _valve_terms(model, self.n, valve_null, valve_lap)
        #: What the valve compensation added to the command in the last cycle, V per joint.
        self.valve_volts = [0.0] * self.n
        if not 0.0 <= coulomb_ff <= comp.MAX_SCALE:
            raise ValueError(f"coulomb_ff = {coulomb_ff!r} out of range [0, {comp.MAX_SCALE:g}]")
        if coulomb_ff > 0.0 and model.lin is None:
            raise ValueError(
                "coulomb_ff needs identified Coulomb forces (a parameter file of Lin's friction "
                "model family, `friction_lin`); this parameter set has none"
            )
        #: Coulomb feed-forward scale (0 = off) and per joint F_c⁺, F_c⁻ (N).
        self.coulomb_scale = float(coulomb_ff)
        self.fc_pos = [row[2] for row in model.lin] if model.lin is not None else [0.0] * self.n
        self.fc_neg = [row[3] for row in model.lin] if model.lin is not None else [0.0] * self.n
        #: The Coulomb feed-forward of the last cycle, N per joint (telemetry, the bench).
        self.coulomb_n = [0.0] * self.n
        if model.n != self.n:
            raise ValueError(f"plant model has {model.n} joints, the law {self.n}")
        if pressure_source not in ("measured", "model"):
            raise ValueError(
                f"pressure_source must be 'measured' or 'model', not {pressure_source!r}"
            )
        self.model, self.source, self.period = model, pressure_source, period
        self._tau = [0.0] * self.n
        self._force_prev = [math.nan] * self.n
        self.ff_volts = [0.0] * self.n
        self._pc = [math.nan] * self.n
        self._pr = [math.nan] * self.n
        self._alpha = (
            1.0 - math.exp(-2 * math.pi * pressure_filter_hz * period)
            if pressure_filter_hz > 0
            else 1.0
        )

    def enable(self, fb: Feedback, q_ref: Array) -> None:
        super().enable(fb, q_ref)
        for j in range(self.n):
            self._force_prev[j] = math.nan
            self._pc[j] = float(fb.p_cap[j])
            self._pr[j] = float(fb.p_rod[j])

    def update(
        self, t: float, fb: Feedback, q_ref: Array, qd_ref: Array, qdd_ref: Array, volts_out: Array
    ) -> None:
        m = self.model
        m.inverse_dynamics(q_ref, qd_ref, qdd_ref, self._tau)
        for j, pid in enumerate(self.pids):
            s, r = m.cylinder(j, q_ref[j])
            sd = r * qd_ref[j]
            fcoul = comp.coulomb_force(
                sd, self.fc_pos[j], self.fc_neg[j], COULOMB_SMOOTH_M_S, self.coulomb_scale
            )
            self.coulomb_n[j] = fcoul
            force = self._tau[j] / r + fcoul
            prev = self._force_prev[j]
            fdot = 0.0 if prev != prev else (force - prev) / self.period  # NaN: first cycle
            self._force_prev[j] = force
            pc, pr = self._pc[j], self._pr[j]
            mc, mr = fb.p_cap[j], fb.p_rod[j]
            if mc == mc and mr == mr:  # NaN (no channel, or a dropped sample): keep the filter
                pc = self._pc[j] = mc if pc != pc else pc + self._alpha * (mc - pc)
                pr = self._pr[j] = mr if pr != pr else pr + self._alpha * (mr - pr)
            if self.source == "measured" and pc == pc and pr == pr:
                # Split Ḟ = A⁺ṗ⁺ − A⁻ṗ⁻ evenly: ṗ⁺ = −ṗ⁻ = Ḟ/(A⁺ + A⁻).
                pdot = fdot / (m.Ac[j] + m.Ar[j])
                u = m.spool_measured(j, s, sd, pdot, -pdot, pc, pr)
            else:
                u = m.spool_steady(j, force, sd)
            ff = u / m.kv[j]
            self.ff_volts[j] = ff
            # ΔP feedback acts on the force the model did not ask for (pressure_feedback).
            dp = self._dp(j, fb, force)
            v = pid.update(q_ref[j], fb.q[j]) + ff + dp
            kv = m.kv[j]
            dv = comp.valve_spool(v * kv, self.valve_b0[j], self.valve_d[j]) / kv - v
            self.valve_volts[j] = dv
            volts_out[j] = self._clamp(j, v + dv)


def _valve_terms(
    model: PlantModel, n: int, null: bool | Sequence[bool], lap: bool | Sequence[bool]
) -> tuple[list[float], list[float]]:
    """(b₀, d) per joint for `valve_spool`, zeros where switched off (a switch is one bool for
    every joint or one per joint); refuses a switch the parameter file cannot back, or a value
    outside ±MAX_VALVE_OFFSET on a joint where it is on."""
    on_null, on_lap = _per_joint(null, n, "valve_null"), _per_joint(lap, n, "valve_lap")
    zeros = [0.0] * n
    if not any(on_null + on_lap):
        return zeros, list(zeros)
    if model.valve_null is None or model.valve_lap is None:
        which = " and ".join(
            k for k, on in (("valve_null", on_null), ("valve_lap", on_lap)) if any(on)
        )
        raise ValueError(
            f"{which} needs the valve's null offset and lap the batch identified (the "
            "[structure] table `rigctl identify` writes in batch-params.toml); this parameter "
            "set has none"
        )
    terms = []
    for key, vals, on in (
        ("null offset", model.valve_null, on_null),
        ("lap", model.valve_lap, on_lap),
    ):
        for j, v in enumerate(vals):
            if on[j] and abs(v) > comp.MAX_VALVE_OFFSET:
                raise ValueError(
                    f"joint {j + 1}: the identified valve {key} {v * 1e3:.1f} mV is outside "
                    f"±{comp.MAX_VALVE_OFFSET * 1e3:.0f} mV (spool units): not a servo valve's; "
                    "check the parameter file"
                )
        terms.append([float(v) if on[j] else 0.0 for j, v in enumerate(vals)])
    return terms[0], terms[1]


def _per_joint(switch: bool | Sequence[bool], n: int, key: str) -> list[bool]:
    if isinstance(switch, bool):
        return [switch] * n
    flags = list(switch)
    if len(flags) != n or not all(isinstance(f, bool) for f in flags):
        raise ValueError(f"{key} must be true, false or a list of {n} of them, got {switch!r}")
    return flags


class GravityCompPD(Law):
    """Lin eq. 37 with an inner force loop (see module doc). Gains per joint."""

    def __init__(
        self,
        kp: Sequence[float],
        kd: Sequence[float],
        kf: Sequence[float],
        limits: Sequence[JointLimits],
        period: float,
        model: PlantModel,
        velocity_filter_hz: float = 50.0,
    ) -> None:
        self.n, self.limits = len(kp), list(limits)
        if not (len(kd) == len(kf) == len(limits) == self.n == model.n):
            raise ValueError("kp, kd, kf, limits and the plant model need one entry per joint")
        self.kp, self.kd, self.kf = list(kp), list(kd), list(kf)
        self.model = model
        self.vel = _VelocityEstimate(self.n, period, velocity_filter_hz)
        self._comp = [0.0] * self.n

    def enable(self, fb: Feedback, q_ref: Array) -> None:
        self.vel.reset(fb.q)

    def update(
        self, t: float, fb: Feedback, q_ref: Array, qd_ref: Array, qdd_ref: Array, volts_out: Array
    ) -> None:
        self.vel.update(fb.q)
        qd = self.vel.v
        self.model.gravity_friction(fb.q, qd, self._comp)
        for j in range(self.n):
            tau = -self.kd[j] * qd[j] + self.kp[j] * (q_ref[j] - fb.q[j]) + self._comp[j]
            _, r = self.model.cylinder(j, fb.q[j])
            f_meas = self.model.Ac[j] * fb.p_cap[j] - self.model.Ar[j] * fb.p_rod[j]
            volts_out[j] = self._clamp(j, self.kf[j] * (tau / r - f_meas))


class VelocityLimitedPD(Law):
    """Lin eq. 34–36 per joint:

        q̈*  = K_D (−q̇ + (K_P/K_D) V (q_d − q)),  V = min(1, V_max / ((K_P/K_D) |q_d − q|))
        out = J q̈* + out_prev − J (q̇ − q̇_prev)/Δt

    K_D = 2√K_P is Lin's usual choice; `j_gain` (V·s²/rad) plays J_i; the output is frozen
    (not integrated further) while clamped, so it does not wind up against the valve limit.

    Lin's actuator is a torque motor: eq. 35 integrates acceleration into current. A servo
    valve already commands velocity, so literal eq. 35 adds a second integrator and overshoots.
    `velocity_ff` (V·s/rad, ≈ 1/valve velocity gain) adds the hydraulic form: the velocity
    demand of eq. 34, (K_P/K_D)·V·(q_d − q), sent straight to the valve, with eq. 35's
    increments on top as the correction (J = 0 leaves a velocity-limited P law).

    Given a step (Lin's experiment: a far reference), the joint travels at V_max: the law
    `drives_to_reference`, so the runner puts no approach move before it. What it reports as
    the reference (for the following-error interlock and the recording) is where eq. 34–36
    would have the joint: a point moving towards q_d at min(V_max, (K_P/K_D)|q_d − r|) from the
    position measured at `enable`, leaking towards the measured position with time constant
    `REF_LEAK_S`. The leak is there because with J = 0 (the setting that does not pump the
    hydraulic resonance, see docs/controller.md) the valve's speed per volt is only as good as
    `velocity_ff`: 10–12 % off on the simulator, which over a 3 s sweep adds up to a
    following-error trip; with the leak a speed off by x·V_max shows about x·V_max·τ (0.6° at
    10°/s), while a stalled joint still shows V_max·τ (5° at 10°/s) and trips the interlock.
    `vmax` above a joint's velocity limit is refused.
    """

    drives_to_reference = True
    REF_LEAK_S = 0.5

    def __init__(
        self,
        kp: Sequence[float],
        kd: Sequence[float],
        vmax: Sequence[float],
        j_gain: Sequence[float],
        limits: Sequence[JointLimits],
        period: float,
        velocity_filter_hz: float = 0.0,
        velocity_ff: Sequence[float] | None = None,
    ) -> None:
        self.n, self.limits = len(kp), list(limits)
        self.vff = [0.0] * self.n if velocity_ff is None else [float(x) for x in velocity_ff]
        if not (len(kd) == len(vmax) == len(j_gain) == len(limits) == len(self.vff) == self.n):
            raise ValueError("kp, kd, vmax, j_gain and limits need one entry per joint")
        if min(kp) <= 0 or min(kd) <= 0 or min(vmax) <= 0:
            raise ValueError("velocity-limited PD needs kp, kd, vmax > 0")
        for j, (v, lim) in enumerate(zip(vmax, limits, strict=True)):
            if v > lim.max_velocity * (1 + 1e-9):
                raise ValueError(
                    f"joint {j + 1}: vmax {math.degrees(v):.4g}°/s exceeds the joint's velocity "
                    f"limit {math.degrees(lim.max_velocity):.4g}°/s"
                )
        self.kp, self.kd, self.vmax, self.jg = list(kp), list(kd), list(vmax), list(j_gain)
        self.period = period
        self.vel = _VelocityEstimate(self.n, period, velocity_filter_hz)
        self._out = [0.0] * self.n
        self._qd_prev = [0.0] * self.n
        self._r = [0.0] * self.n

    def enable(self, fb: Feedback, q_ref: Array) -> None:
        self.vel.reset(fb.q)
        for j in range(self.n):
            self._out[j] = 0.0
            self._qd_prev[j] = 0.0
            self._r[j] = float(fb.q[j])

    def reference_out(self, ref_out: Array) -> None:
        for j in range(self.n):
            ref_out[j] = self._r[j]

    def update(
        self, t: float, fb: Feedback, q_ref: Array, qd_ref: Array, qdd_ref: Array, volts_out: Array
    ) -> None:
        self.vel.update(fb.q)
        for j in range(self.n):
            qd = self.vel.v[j]
            e = q_ref[j] - fb.q[j]
            ratio = self.kp[j] / self.kd[j]
            denom = ratio * abs(e)
            v_lim = 1.0 if denom <= self.vmax[j] else self.vmax[j] / denom  # eq. 36
            qd_demand = ratio * v_lim * e
            qdd_star = self.kd[j] * (qd_demand - qd)  # eq. 34
            # eq. 35's memory (the increments), then the valve's velocity demand on top.
            mem = self._out[j] + self.jg[j] * (qdd_star - (qd - self._qd_prev[j]) / self.period)
            self._qd_prev[j] = qd
            ff = self.vff[j] * qd_demand
            clamped = self._clamp(j, ff + mem)
            self._out[j] = clamped - ff  # keep the memory at what was applied: no wind-up
            volts_out[j] = clamped
            # The reported reference moves as eq. 36 would move the joint (see class doc).
            v_r = ratio * (q_ref[j] - self._r[j])
            vm = self.vmax[j]
            v_r = vm if v_r > vm else -vm if v_r < -vm else v_r
            self._r[j] += (v_r + (fb.q[j] - self._r[j]) / self.REF_LEAK_S) * self.period


class ValveSine(Law):
    """Open-loop v_j = offset_j + A_j sin(2π f_j t) (Sakai); joints with A_j = 0 are held by PID.

    `centering` (V/rad, default 0 = pure open loop) adds a weak pull towards the reference on
    driven joints so that flow-gain asymmetry does not walk the joint into a limit.
    """

    def __init__(
        self,
        amplitude: Sequence[float],
        frequency_hz: Sequence[float],
        hold_gains: Sequence[PidParams],
        limits: Sequence[JointLimits],
        period: float,
        offset: Sequence[float] | None = None,
        centering: Sequence[float] | None = None,
    ) -> None:
        self.n, self.limits = len(amplitude), list(limits)
        self.amp = [float(a) for a in amplitude]
        self.freq = [float(f) for f in frequency_hz]
        self.offset = [0.0] * self.n if offset is None else [float(x) for x in offset]
        self.centering = [0.0] * self.n if centering is None else [float(x) for x in centering]
        if not (len(self.freq) == len(self.offset) == len(self.centering) == len(limits) == self.n):
            raise ValueError("valve sine: one amplitude, frequency, offset, limit per joint")
        if any(a != 0 and f <= 0 for a, f in zip(self.amp, self.freq, strict=True)):
            raise ValueError("valve sine: a driven joint needs frequency_hz > 0")
        self.hold = PidLaw(hold_gains, limits, period)
        self.open_loop = [a != 0.0 for a in self.amp]

    def enable(self, fb: Feedback, q_ref: Array) -> None:
        self.hold.enable(fb, q_ref)

    def disable(self) -> None:
        self.hold.disable()

    def update(
        self, t: float, fb: Feedback, q_ref: Array, qd_ref: Array, qdd_ref: Array, volts_out: Array
    ) -> None:
        for j in range(self.n):
            if self.amp[j] == 0.0:
                v = self.hold.pids[j].update(q_ref[j], fb.q[j])
            else:
                v = (
                    self.offset[j]
                    + self.amp[j] * math.sin(2 * math.pi * self.freq[j] * t)
                    + self.centering[j] * (q_ref[j] - fb.q[j])
                )
            volts_out[j] = self._clamp(j, v)
