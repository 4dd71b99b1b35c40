"""The simulated rig: the plant of DESIGN.md §1 behind the same converters as the real one.

It is driven only by D/A voltages and returns only what the converters would: quantised, noisy
(seeded) counts, which the loop scales exactly as it scales hardware counts. Its plant is the
profile's `[backend.sim.plant]` (with the effects beyond the model, docs/simulator.md), and its
sensors are the true ones: a channel's `sim_error` (offset, gain error, drift) makes the reading
differ from what the declared scaling says. The true state and parameters are exposed
(`true_state()`, `true_params`, `true_effects`) for tests and benchmarks that compare against
ground truth; nothing in the service reads them.
"""

from __future__ import annotations

import logging
import math
import time
import zlib

import numpy as np

from controller.plant import dynamics
from controller.plant.jit import njit
from controller.plant.params import G_PS, NOMINAL_OIL_C, PlantEffects, PlantParams
from daq.backends.base import Backend, BackendStatus
from daq.backends.sim import faults as F
from daq.backends.sim.supply import SimSupplyUnit
from daq.profile.plant import sim_plant
from daq.profile.schema import Channel, LinearScaling, Profile
from daq.scaling import eng_to_counts, lsb

log = logging.getLogger(__name__)

#: What each input role measures, as a code for the jitted sensor kernel.
ROLE_CODES = {
    "pressure_cap": 0,
    "pressure_rod": 1,
    "lvdt": 2,
    "potentiometer": 3,
    "resolver": 4,
    "temperature": 5,
    "supply": 6,
}
#: Role code of a piston position the plant gives per joint (the chain's jacks).
PISTON_GIVEN = 7
SUBSTEPS = 4  # RK4 substeps per 1 ms: see tests/sim/test_accuracy.py for the error it buys
#: The sensors' noise: one row of standard normals (one per input channel) per `read`, drawn
#: NOISE_BLOCK rows at a time from `default_rng(seed)`; `noise_rows` regenerates them.
NOISE_BLOCK = 1024


def noise_rows(seed: int, n_inputs: int, reads: np.ndarray) -> np.ndarray:
    """The standard normals (len(reads), n_inputs) the simulator added to its `reads`-th
    reads (0 = the first `read` after construction; `sim_noise` scales them per channel): the
    noise realization of a run, for the simulator's truth only (`estimator.sim_truth`). The
    stream is drawn in blocks as `read` draws it, keeping only the rows asked for."""
    reads = np.asarray(reads, dtype=np.int64)
    out = np.empty((reads.size, n_inputs))
    if reads.size == 0:
        return out
    if reads.min() < 0:
        raise ValueError(f"read index {int(reads.min())} is negative")
    rng = np.random.default_rng(seed)
    block = np.empty((NOISE_BLOCK, n_inputs))
    for start in range(0, int(reads.max()) + 1, NOISE_BLOCK):
        rng.standard_normal(out=block)
        hit = (reads >= start) & (reads < start + NOISE_BLOCK)
        out[hit] = block[reads[hit] - start]
    return out


# Rows of the sensor kernel's per-channel tables: one int and one float array, so that a read
# hands numba two arrays instead of fifteen (each argument costs the dispatcher a type check,
# ~60 ns, inside the cycle's read → write time).
CI_ROLE, CI_JOINT, CI_MODE, CI_WRAPS, CI_LINEAR, N_CI = range(6)
(CF_ERR_GAIN, CF_ERR_OFFSET, CF_ERR_DRIFT, CF_SIGMA, CF_BURST, CF_GAIN, CF_OFFSET, CF_CMIN, CF_Q,
 CF_FULL, N_CF) = range(11)  # fmt: skip


@njit
def _sense(x, P, n, t, ci, cf, noise, row, stuck, piston, shunt, eng, out, last):
    """True channel values → noisy engineering values → converter counts (linear channels),
    the counts kept in `last` too (a stuck channel's value). `ci`, `cf`: the per-channel int
    and float tables (rows `CI_*`, `CF_*`); `noise[row]` the read's standard normals.
    `piston`: per joint, the piston position a plant other than the planar one computed
    (role code 7, `PISTON_GIVEN`); the planar plant's potentiometers (code 3) do not read it.
    `shunt`: per channel, the true input a closed shunt relay adds (its true equivalent; 0
    while open), before the sensor's own gain as a bridge's sensitivity applies to it."""
    for c in range(ci.shape[1]):
        j = ci[CI_JOINT, c]
        r = ci[CI_ROLE, c]
        if r == 0:
            y = x[2 * n + j]
        elif r == 1:
            y = x[3 * n + j]
        elif r == 2:
            y = x[4 * n + j]
        elif r == 3:
            y, _ = dynamics.piston(P, j, x[j])
        elif r == 4:
            y = x[j]
        elif r == 5:
            y = x[5 * n]
        elif r == PISTON_GIVEN:
            y = piston[j]
        else:
            y = P[G_PS]  # the station's supply pressure (daq.backends.sim.supply)
        # The true sensor: its own gain, offset and drift (the declared scaling ignores them).
        y = (y + shunt[c]) * (1.0 + cf[CF_ERR_GAIN, c]) + cf[CF_ERR_OFFSET, c]
        y += cf[CF_ERR_DRIFT, c] * t
        m = ci[CI_MODE, c]
        k = cf[CF_SIGMA, c] * (cf[CF_BURST, c] if m == F.NOISE_BURST else 1.0)
        y += k * noise[row, c]
        eng[c] = y
        if ci[CI_LINEAR, c] == 0:
            continue
        full = cf[CF_FULL, c]
        code = math.floor(
            ((y - cf[CF_OFFSET, c]) / cf[CF_GAIN, c] - cf[CF_CMIN, c]) / cf[CF_Q, c] + 0.5
        )
        if ci[CI_WRAPS, c] != 0:
            code = code % full
        else:
            code = min(max(code, 0.0), full - 1.0)
        if m == F.RAIL_LOW:
            code = 0.0
        elif m == F.RAIL_HIGH:
            code = full - 1.0
        elif m == F.STUCK:
            code = stuck[c]
        out[c] = code
        last[c] = code


@njit
def _to_dac(volts, out_f, out_joint, v):
    """The D/A: each output's volts to its nearest code within range (`out_f` rows: minimum,
    step, codes), the quantised volts to its joint's valve in `v`."""
    for i in range(volts.shape[0]):
        lo, q, full = out_f[0, i], out_f[1, i], out_f[2, i]
        code = min(max(math.floor((volts[i] - lo) / q + 0.5), 0.0), full - 1.0)
        v[out_joint[i]] = lo + code * q


class SimBackend(Backend):
    """Simulated hydraulic arm with its sensor and converter chain (real or virtual time)."""

    def __init__(self, profile: Profile, inputs: list[Channel], outputs: list[Channel]) -> None:
        super().__init__(len(inputs), len(outputs))
        self.profile = profile
        self.inputs = inputs
        self.outputs = outputs
        self.period = profile.period
        #: Per joint: the piston position of a plant that gives it (`PISTON_GIVEN`).
        self._piston = np.zeros(0)
        self._init_plant(profile)
        n = self._n
        joints = [j.name for j in profile.joints]
        n_in = len(inputs)
        #: The sensor kernel's per-channel tables (rows `CI_*`, `CF_*`); the names below are
        #: views of their rows.
        self._ci = np.zeros((N_CI, n_in), dtype=np.int64)
        self._cf = np.zeros((N_CF, n_in))
        self._role = self._ci[CI_ROLE]
        self._role[:] = [self._role_code(c) for c in inputs]
        self._joint = self._ci[CI_JOINT]
        self._joint[:] = [joints.index(c.joint) if c.joint else 0 for c in inputs]
        self._sigma = self._cf[CF_SIGMA]
        self._sigma[:] = [c.sim_noise for c in inputs]
        errs = [c.sim_error for c in inputs]
        self._err_gain = self._cf[CF_ERR_GAIN]
        self._err_gain[:] = [e.gain_error if e else 0.0 for e in errs]
        self._err_offset = self._cf[CF_ERR_OFFSET]
        self._err_offset[:] = [e.offset if e else 0.0 for e in errs]
        self._err_drift = self._cf[CF_ERR_DRIFT]
        self._err_drift[:] = [e.drift_per_hour / 3600.0 if e else 0.0 for e in errs]
        self._ci[CI_LINEAR] = [isinstance(c.scaling, LinearScaling) for c in inputs]
        self._cf[CF_GAIN] = [
            c.scaling.gain if isinstance(c.scaling, LinearScaling) else 1.0 for c in inputs
        ]
        self._cf[CF_OFFSET] = [
            c.scaling.offset if isinstance(c.scaling, LinearScaling) else 0.0 for c in inputs
        ]
        self._cf[CF_CMIN] = [c.converter.min for c in inputs]
        self._cf[CF_Q] = [lsb(c.converter) for c in inputs]
        self._cf[CF_FULL] = [float(1 << c.converter.bits) for c in inputs]
        self._ci[CI_WRAPS] = [c.converter.wraps for c in inputs]
        self._nonlinear = [
            i for i, c in enumerate(inputs) if not isinstance(c.scaling, LinearScaling)
        ]
        self._eng = np.zeros(len(inputs))
        # Outputs: the D/A quantises the command; each valve channel drives its joint.
        self._out_joint = np.array([joints.index(str(c.joint)) for c in outputs], dtype=np.int64)
        #: Per output: the D/A's minimum, step and number of codes (`_to_dac`'s rows).
        self._out_f = np.array(
            [
                [c.converter.min for c in outputs],
                [lsb(c.converter) for c in outputs],
                [float(1 << c.converter.bits) for c in outputs],
            ]
        ).reshape(3, len(outputs))
        self._null = np.array([c.null_volts for c in outputs])
        self._v = np.zeros(n)  # valve voltages the plant sees, per joint
        self._stuck_v = np.full(n, np.nan)
        self._any_stuck = False
        self._last_counts = np.zeros(len(inputs))
        # Faults.
        self._mode = self._ci[CI_MODE]
        self._stuck = np.zeros(len(inputs))
        self._burst = self._cf[CF_BURST]
        self._burst[:] = 1.0
        self._pending: list[F.FaultSpec] = []
        self._stall_until_done: list[F.FaultSpec] = []
        self._names = [c.name for c in inputs] + [c.name for c in outputs]
        sim = profile.backend.sim
        self._seed = sim.seed if sim is not None else 0
        for spec in sim.faults if sim is not None else []:
            self.inject_fault(spec)
        self._rng = np.random.default_rng(self._seed)
        self._noise = np.zeros((NOISE_BLOCK, len(inputs)))
        self._noise_row = NOISE_BLOCK
        #: Per input channel: its shunt's true equivalent (0 without one), and what its closed
        #: relay adds to the true input now (`write_shunt`).
        self._shunt_true = self._true_shunts()
        self._shunt_input = np.zeros(len(inputs))
        self._t_plant: float | None = None
        self._open = False

    def _init_plant(self, profile: Profile) -> None:
        """The planar plant ([plant], [backend.sim.plant]): parameters, effects, power unit and
        the state at rest at the start pose. Sets `_n`, `_P` (the array the sensors read the
        supply from), `_x`, `_work` and `_valve_gain`."""
        params, effects = sim_plant(profile)
        self.true_params: PlantParams = params
        self.true_effects: PlantEffects = effects
        #: The power unit: None when the profile has no [hydraulics] (supply constant).
        self.supply = SimSupplyUnit.from_profile(profile, self.period)
        # With a power unit the supply entry of the plant's array moves: a private copy.
        self._P = params.pack() if self.supply is None else params.pack().copy()
        if self.supply is not None:
            self._P[G_PS] = self.supply.pressure  # a station starts with its power off
        self._E = effects.pack(params)
        n = params.n
        self._n = n
        self._valve_gain = params.valve_gain
        # State: [q, q̇, p⁺, p⁻, u] and the oil temperature (constant on the nominal plant).
        self._work = np.zeros((5, 5 * n + 1))
        truth = profile.backend.sim.plant  # type: ignore[union-attr]  # sim_plant() checked
        assert truth is not None
        home = [
            j.home_deg if tj.initial_deg is None else tj.initial_deg
            for j, tj in zip(profile.joints, truth.joints, strict=True)
        ]
        oil = effects.initial_c if effects.thermal else NOMINAL_OIL_C
        ramp = (effects.ramp_c_per_s, effects.ramp_start_s, effects.ramp_end_s)
        self._ramp = ramp if effects.thermal else (0.0, 0.0, 0.0)
        self._x = np.append(dynamics.equilibrium_state(params, np.radians(home)), oil)

    def _role_code(self, c: Channel) -> int:
        """The sensor kernel's code for what channel `c` measures."""
        return ROLE_CODES[c.role]

    @classmethod
    def from_profile(cls, profile: Profile) -> SimBackend:
        return sim_backend_class(profile)(profile, profile.inputs, profile.outputs)

    # ------------------------------------------------------------------ faults

    def inject_fault(self, spec: str) -> None:
        """Schedule a fault (see `daq.backends.sim.faults`); raises FaultSpecError if malformed."""
        self._pending.append(F.FaultSpec.parse(spec, self._names))
        self._pending.sort(key=lambda f: f.start)

    def clear_faults(self) -> None:
        self._pending.clear()
        self._mode[:] = F.NONE
        self._burst[:] = 1.0
        self._stuck_v[:] = np.nan
        self._any_stuck = False

    def _activate_due(self, t: float) -> None:
        # Pending faults are kept sorted by start: checking the first costs nothing per cycle.
        while self._pending and self._pending[0].start <= t:
            f = self._pending.pop(0)
            if f.kind == "stall_read":
                log.warning("simulated fault: read stalls %.3f s", f.value)
                time.sleep(f.value)
            elif f.kind == "stuck_valve":
                outs = [c.name for c in self.outputs]
                if f.channel not in outs:
                    raise F.FaultSpecError(f"stuck_valve needs a valve channel, not '{f.channel}'")
                j = int(self._out_joint[outs.index(f.channel)])
                # Holding v at u/k_v keeps the lagged spool exactly where it is.
                self._stuck_v[j] = self._x[4 * self._n + j] / self._valve_gain[j]
                self._any_stuck = True
            else:
                i = self._names.index(f.channel)
                if i >= self.n_inputs:
                    raise F.FaultSpecError(f"sensor fault '{f.kind}' on output '{f.channel}'")
                self._mode[i] = F.SENSOR_KINDS[f.kind]
                self._burst[i] = f.value
                self._stuck[i] = self._last_counts[i]

    # ------------------------------------------------------------------ Backend interface

    def open(self) -> None:
        self._open = True

    def _catch_up(self, t: float) -> None:
        """Real time: step the plant to loop time `t` (whole periods; at most a minute of them,
        beyond which the plant jumps to `t` instead of replaying a stall)."""
        if self._t_plant is None:
            self._t_plant = t
        steps = math.floor((t - self._t_plant) / self.period + 0.5)
        for _ in range(min(steps, 60_000)):
            self._step()
        if steps > 60_000:
            self._t_plant = t

    def between_cycles(self, t_next: float) -> None:
        # The plant moves on to the next cycle's time with the outputs just written, while
        # the loop waits; `read` then finds it there (or catches up what an overrun skipped).
        self._catch_up(t_next)

    def read(self, t: float, raw_out: np.ndarray) -> BackendStatus:
        self._catch_up(t)
        if self._pending:
            self._activate_due(t)
        if self._noise_row >= NOISE_BLOCK:
            self._rng.standard_normal(out=self._noise)
            self._noise_row = 0
        _sense(self._x, self._P, self._n, self._t_plant, self._ci, self._cf, self._noise,
               self._noise_row, self._stuck, self._piston, self._shunt_input, self._eng, raw_out,
               self._last_counts)  # fmt: skip
        self._noise_row += 1
        for i in self._nonlinear:
            raw_out[i] = self._last_counts[i] = eng_to_counts(self.inputs[i], float(self._eng[i]))
        return BackendStatus.OK

    def write(self, t: float, volts: np.ndarray) -> BackendStatus:
        _to_dac(volts, self._out_f, self._out_joint, self._v)
        return BackendStatus.OK

    def write_null(self) -> None:
        for i in range(self.n_outputs):
            self._v[self._out_joint[i]] = self._null[i]

    def write_power(self, level: int) -> BackendStatus:
        if self.supply is not None:
            self.supply.switch(level)
        return BackendStatus.OK

    #: The random stream of the shunts' true equivalents, apart from the sensor noise's.
    SHUNT_STREAM = 0x5A

    def _true_shunts(self) -> np.ndarray:
        """Per input channel, its shunt's true equivalent (0 without a shunt): the
        certificate's times (1 + error), the error `shunt.sim_error` or else drawn from
        N(0, shunt.sigma) by the simulator's seed and the channel's name."""
        out = np.zeros(len(self.inputs))
        for i, c in enumerate(self.inputs):
            sh = c.shunt
            if sh is None:
                continue
            err = sh.sim_error
            if err is None:
                rng = np.random.default_rng(
                    [self._seed, self.SHUNT_STREAM, zlib.crc32(c.name.encode())]
                )
                err = sh.sigma * float(rng.standard_normal())
            out[i] = sh.equivalent_pa * (1.0 + err)
        return out

    def write_shunt(self, mask: np.ndarray) -> BackendStatus:
        on = np.asarray(mask, dtype=bool)
        if np.any(on & (self._shunt_true == 0.0)):
            return BackendStatus.ERROR  # a channel without a shunt resistor
        np.multiply(self._shunt_true, on, out=self._shunt_input)
        return BackendStatus.OK

    def true_shunt_equivalent(self, name: str) -> float:
        """A channel's shunt's true equivalent, Pa (tests and benchmarks only)."""
        return float(self._shunt_true[[c.name for c in self.inputs].index(name)])

    def precharge(self, level: int) -> None:
        """Power at `level` with the accumulator already charged to it (a rig stepped without
        the service, which would otherwise switch the power and wait for the ramp)."""
        if self.supply is not None:
            self.supply.switch(level)
            self.supply.pressure = self.supply.target
            self._P[G_PS] = self.supply.pressure

    def close(self) -> None:
        self.write_null()
        self._open = False

    def null_outputs_after_crash(self) -> str:
        # The simulated plant and its valves lived in the dead loop process: nothing to reach.
        return "simulated valves: the simulated plant ended with the loop process"

    def warm_up(self) -> None:
        # The plant step is numba code loaded from its cache at its first call: ~5.7 ms, which
        # in real time is the first cycle that steps the plant (read() at t = 0 does not), a
        # certain overrun. One step on a scratch copy of the state loads it and moves nothing.
        x, v, work = self._x.copy(), self._v.copy(), self._work.copy()
        dynamics.integrate_fx(x, v, self._P, self._E, self.period, SUBSTEPS, work)
        self._warm_up_dac()

    def _warm_up_dac(self) -> None:
        """The D/A kernel loaded on a scratch copy of the valves (the loop's warm-up writes only
        null, through `write_null`, which does not call it)."""
        _to_dac(self._null, self._out_f, self._out_joint, self._v.copy())

    def advance(self, dt: float) -> None:
        if self._t_plant is None:
            self._t_plant = 0.0
        if abs(dt - self.period) > 1e-12:
            raise ValueError("the simulator advances by exactly one loop period")
        self._step()

    def _commands(self) -> np.ndarray:
        """The valve commands the plant steps with: a stuck valve's held value in its place."""
        v = self._v
        if self._any_stuck:
            for j in range(self._n):
                if not math.isnan(self._stuck_v[j]):
                    v[j] = self._stuck_v[j]
        return v

    def _step(self) -> None:
        v = self._commands()
        if self.supply is not None:
            self.supply.step(self._P)
        dynamics.integrate_fx(self._x, v, self._P, self._E, self.period, SUBSTEPS, self._work)
        rate, start, end = self._ramp
        if rate != 0.0 and start <= (self._t_plant or 0.0) < end:
            self._x[5 * self._n] += rate * self.period  # forced temperature ramp
        self._t_plant += self.period  # type: ignore[operator]

    # ------------------------------------------------------------------ ground truth

    def true_state(self) -> np.ndarray:
        """[q, q̇, p⁺, p⁻, u] (tests and benchmarks only)."""
        return self._x[: 5 * self._n].copy()

    def true_supply_pressure(self) -> float:
        """The supply pressure the valves see, Pa (tests and benchmarks only)."""
        return float(self._P[G_PS])

    def true_oil_temperature(self) -> float:
        """The oil temperature state T, °C (tests and benchmarks only)."""
        return float(self._x[5 * self._n])

    #: The random stream of the reference thermometer's error.
    THERMOMETER_STREAM = 0x7E

    def reference_thermometer_c(self, sigma_c: float) -> float:
        """What a reference thermometer in the oil reads now, °C: the user's instrument for the
        `oil_temperature` calibration (daq.service.procedure_temperature), played by the
        simulator as the world would. The true temperature plus the probe's own error, drawn
        once from N(0, sigma_c) by the simulator's seed (a probe's error is fixed, not noise)."""
        rng = np.random.default_rng([self._seed, self.THERMOMETER_STREAM])
        return self.true_oil_temperature() + sigma_c * float(rng.standard_normal())

    def true_valve_balance(self, j: int) -> float:
        """The spool position u (the command's frame) at which joint j's valve, at the present
        supply and oil temperature, holds both chambers at one pressure with the piston still:
        each chamber's supply and tank edges (their own flow gains, lap and leakage opening)
        and its external leak pass equal flows (dynamics._derivative with ṡ = 0 and
        p_cap = p_rod, so nothing crosses the piston). With matched edges that is the centred
        edges, u = −b(T); with mismatched ones it is off by a·(ρ−1)/(ρ+1) (tests and
        benchmarks only: what a static hold can measure)."""
        from scipy.optimize import fsolve

        P, E = self._P, self._E
        e = dynamics.NE_GLOBAL + dynamics.NE_JOINT * j
        temp = self.true_oil_temperature()
        c_ext = E[e + dynamics.K_LEAK_EXT] / dynamics.viscosity_ratio(E, temp)
        ps = float(P[G_PS])

        def flows(z: np.ndarray) -> list[float]:
            xo, p = float(z[0]) * 1e-3, float(z[1]) * ps  # scaled: 1e-3 of spool, of supply
            qc, qr, _ = dynamics.valve_edges(P, E, j, xo, p, p)
            return [(qc - c_ext * p) * 1e6, (qr - c_ext * p) * 1e6]  # cm³/s

        z, _, ok, msg = fsolve(flows, [0.0, 0.5], full_output=True, xtol=1e-12)
        if ok != 1 or ps <= 0.0:
            raise RuntimeError(f"joint {j + 1}: no balance point at {ps:.4g} Pa supply ({msg})")
        thermal = E[dynamics.E_ON] > 0.5 and E[dynamics.E_THERMAL] > 0.5
        shift = E[e + dynamics.K_BIAS_PER_K] * (temp - E[dynamics.E_T_REF]) if thermal else 0.0
        return float(z[0]) * 1e-3 - float(E[e + dynamics.K_BIAS]) - float(shift)


def sim_backend_class(profile: Profile) -> type[SimBackend]:
    """The simulator of a profile's plant: the chain's for a [chain] profile, else the planar
    one."""
    if profile.chain is not None:
        from daq.backends.sim.chain_backend import ChainSimBackend

        return ChainSimBackend
    return SimBackend
