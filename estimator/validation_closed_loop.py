"""Closed-loop validation: DIDIM's simulation (seed 003, Gautier et al., "identification by
direct and inverse dynamic models": the model is judged by simulating it *with the same control
law and the same reference* as the experiment, and comparing its outputs with the measured ones).

Why not only the open-loop replay (`estimator.validation.validate`): a hydraulic joint integrates
its valve's flow, so a replay driven by the measured spool accumulates every small flow error into
a position drift, and the pressures that follow from that drift are wrong too. On the realistic
plant the simulator's *own true plant* replayed open loop scores −480 % FIT — a yardstick that
cannot score its own truth measures nothing. In closed loop the controller corrects the drift as
it did on the rig, so what is left is the model's error, not the record's length.

What is simulated, cycle by cycle, in the loop's order (`daq.loop.cycle.Loop._cycle`):

    feedback from the simulated state  ►  runner.step (the run's experiment, gains, limits)
    ►  the interlocks' amplitude clamp  ►  the D/A's quantisation  ►  the plant over one period

- the runner is the one the service built for the run (`controller.runner.ExperimentRunner` from
  the recorded experiment, gains and limits), enabled on the simulated state at the first RUNNING
  row, as the loop enabled it on the measured one;
- the feedback is the simulated state as the channels would report it without noise but with
  their converters' resolution (the profile's bits and scaling, `daq.scaling`): joint angle, both
  pressures, the spool (LVDT volts are the spool state), the piston through the cylinder
  geometry. The resolution matters: a 14-bit resolver reads in steps of 0.38 mrad, which at
  p = 1.5 V/rad moves the command across the 12-bit D/A's 4.9 mV codes; a controller fed exact
  angles commands other codes from the first cycles on, and the joints' stiction turns those
  differences into other stick-slip histories;
- the plant is the identified one (`PlantParams`, and the effects of its model family when it
  has them) integrated by the simulator's own code (`dynamics.integrate_fx`), 4 RK4 substeps per
  period like the simulator, from the measured initial state (angle, pressures, spool as measured;
  velocity from the rows around the first, `initial_velocity`; the oil temperature channel
  where the model refers it).

Compared: every joint's angle, spool, both pressures and (with a potentiometer) the piston; FIT by
`estimator.validation.fit_ratio`, from `SETTLE_S` after the first row on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.optimize import minimize

from controller.compiled.runner import compile_runner
from controller.experiment import Experiment
from controller.feedback import Feedback
from controller.limits import JointLimits
from controller.pid import PidParams
from controller.plant import dynamics
from controller.plant.jit import njit
from controller.plant.params import PlantEffects, PlantParams
from controller.runner import ExperimentRunner
from estimator.validation import Measured, fit_ratios

#: RK4 substeps per loop period: the simulator's own (daq.backends.sim.backend.SUBSTEPS).
SUBSTEPS = 4
#: Span of the straight-line fit that gives the first row's velocity (`initial_velocity`), s.
VELOCITY_FIT_S = 0.05
#: Seconds at the start of the replay left out of the FIT. The initial state is known only as
#: well as one row measures it (the angle to a resolver step, the velocity from 50 ms of
#: angles), and a run may start with the arm swinging in its hold (1 rad/s, chamber pressures
#: crossing 5 MPa in 40 ms on the reference rig): that error is not the model's, and the closed
#: loop damps it within its own time constants (~0.1 s). System identification's simulation
#: FIT leaves such an initial transient out the same way.
SETTLE_S = 0.5
#: Scales of the initial-velocity fit's residuals: a resolver step (rad) and ~3 pressure
#: transducer noise σ (Pa), so that angles and pressures weigh alike.
ANGLE_SCALE = 4e-4
PRESSURE_SCALE = 1.5e4
#: The initial-velocity fit: its first step (rad/s) and the rows it follows (s).
VELOCITY_STEP = 0.05
VELOCITY_WINDOW_S = 0.25
#: Feedback field → the compared output it is read as (`validate_closed_loop`).
FIELD_OUTPUTS = {"q": "q", "spool": "u", "p_cap": "p_cap", "p_rod": "p_rod", "piston": "s"}
#: Nominal oil temperature (°C) when the run measured none: the effects' own reference.
NOMINAL_OIL_C = 40.0


@dataclass(frozen=True)
class SensorFrame:
    """One feedback field's transducers as they really are, per joint (the simulator's truth:
    `estimator.sim_truth.true_sensors`, for the truth's own validation only): the declared
    reading is (1 + g)·true + o, which the converter quantises and the calibration in force
    corrects, (declared − cal_offset)/cal_gain. An identified model lives in the measured frame
    and needs none; the true plant lives in the true one, and without its sensors its closed
    loop holds another operating point than the rig's (a resolver offset) and its spool is
    compared with an LVDT whose zero is elsewhere (an LVDT null, or a valve-null calibration)."""

    gain: np.ndarray
    offset: np.ndarray
    cal_gain: np.ndarray
    cal_offset: np.ndarray

    def error(self, y: np.ndarray) -> None:
        y *= self.gain
        y += self.offset

    def correct(self, y: np.ndarray) -> None:
        y -= self.cal_offset
        y /= self.cal_gain

    def read(self, x: np.ndarray) -> np.ndarray:
        """True values (…, n) → the readings, without the converter's step."""
        return np.asarray((x * self.gain + self.offset - self.cal_offset) / self.cal_gain)

    def true(self, r: np.ndarray) -> np.ndarray:
        """`read`'s inverse: the true values behind readings."""
        return np.asarray((r * self.cal_gain + self.cal_offset - self.offset) / self.gain)


@dataclass(frozen=True)
class ControlSetup:
    """What drove the validation run: the experiment, the gains and limits the service built,
    the parameters its model-based segments used, and the valve outputs' bounds and D/A step."""

    experiment: Experiment
    gains: Sequence[PidParams]
    limits: Sequence[JointLimits]
    v_lo: np.ndarray  # per joint, V: the interlocks' amplitude clamp
    v_hi: np.ndarray
    v_min: np.ndarray  # per joint, V: the D/A's range start and step (profile's converter)
    v_lsb: np.ndarray
    #: Per feedback field (q, p_cap, p_rod, spool, piston): the joints' input channels at their
    #: converters' resolution (`Resolution`).
    sensing: Mapping[str, Resolution] = field(default_factory=dict)
    controller_params: PlantParams | None = None
    #: Per feedback field: the transducers' true errors and calibration (`SensorFrame`); none
    #: for an identified model, which lives in the measured frame.
    sensors: Mapping[str, SensorFrame] = field(default_factory=dict)

    def read(self, name: str, x: np.ndarray) -> np.ndarray:
        """Simulated true values of feedback field `name` as its channels read them."""
        frame = self.sensors.get(name)
        return x if frame is None else frame.read(x)

    def true(self, name: str, r: np.ndarray) -> np.ndarray:
        """`read`'s inverse: the true values behind readings of field `name`."""
        frame = self.sensors.get(name)
        return r if frame is None else frame.true(r)

    def runner(self, period: float) -> ExperimentRunner:
        """A fresh runner, built as the service builds it for `run` (checked there already)."""
        return ExperimentRunner(
            self.experiment, self.gains, self.limits, period, self.controller_params, check=False
        )


@dataclass
class ClosedLoopResult:
    t: np.ndarray
    measured: dict[str, np.ndarray]
    simulated: dict[str, np.ndarray]
    fit: dict[str, float]
    reference: np.ndarray
    notes: list[str] = field(default_factory=list)
    #: The true plant's FIT without the run's own noise (`run_closed_loop_validation`).
    noise_free_fit: dict[str, float] | None = None

    @property
    def worst(self) -> tuple[str, float]:
        key = min(self.fit, key=lambda k: self.fit[k])
        return key, self.fit[key]


def simulate_closed_loop(
    params: PlantParams,
    period: float,
    x0: np.ndarray,
    setup: ControlSetup,
    steps: int,
    effects: PlantEffects | None = None,
    oil_c: float | None = None,
    sensor_noise: Mapping[str, np.ndarray] | None = None,
    seen: Mapping[str, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """States (steps, 5n) [q, q̇, p⁺, p⁻, u], references (steps, n) and valve volts (steps, n):
    row k is the state the loop read at cycle k and what it commanded from it.
    `sensor_noise`: per feedback field, (≥ steps, n) added to the readings (after the true
    sensors' error, before the converter, as the simulator adds its noise); `seen`: per
    feedback field, a (steps, n) array filled with what the controller read."""
    n = params.n
    P = params.pack()
    E = None if effects is None else effects.pack(params)
    x = np.empty(5 * n + 1)
    x[: 5 * n] = x0[: 5 * n]
    x[5 * n] = NOMINAL_OIL_C if oil_c is None else oil_c
    work = np.zeros((5, x.shape[0])) if E is not None else np.zeros((5, 5 * n))
    fb = Feedback(n)
    ref, volts = np.zeros(n), np.zeros(n)
    states, refs, cmds = np.empty((steps, 5 * n)), np.empty((steps, n)), np.empty((steps, n))
    # The loop's own compiled twin of the runner where it has one (bit-equal to the Python
    # runner, tests/controller/test_compiled.py): the replay runs the runner every cycle.
    py_runner = setup.runner(period)
    runner = compile_runner(py_runner) or py_runner

    sense = _sensing(fb, x, P, n, period, setup, sensor_noise, steps)
    logged = [(getattr(fb, name), out) for name, out in (seen or {}).items()]
    sense(0)
    runner.enable(fb)
    for k in range(steps):
        states[k] = x[: 5 * n]
        if k:
            sense(k)
        for arr, out in logged:
            out[k] = arr
        runner.step(fb, ref, volts)
        _write_valves(k, ref, volts, setup.v_lo, setup.v_hi, setup.v_min, setup.v_lsb, refs, cmds)
        if E is None:
            dynamics.integrate(x[: 5 * n], volts, P, period, SUBSTEPS, work)
        else:
            dynamics.integrate_fx(x, volts, P, E, period, SUBSTEPS, work)
    runner.disable()
    return states, refs, cmds


def validate_closed_loop(
    params: PlantParams,
    period: float,
    m: Measured,
    setup: ControlSetup,
    effects: PlantEffects | None = None,
    oil_c: float | None = None,
    qd0: np.ndarray | None = None,
    settle_s: float = SETTLE_S,
    sensor_noise: Mapping[str, np.ndarray] | None = None,
) -> ClosedLoopResult:
    """Simulate `params` in closed loop from the first measured state with the run's controller
    and compare with the measured outputs (FIT per output and joint). `qd0`: the joints'
    velocity at the first row, where the caller has rows before it (`initial_velocity`);
    `settle_s`: the first seconds left out of the FIT (`SETTLE_S`). `sensor_noise`: per
    feedback field, the run's own noise realization (rows, n) — the simulator's truth only
    (`estimator.sim_truth.noise_realization`): the initial state is read with it taken out,
    the replay's controller reads with it, and the compared outputs are the replay's readings
    (noise and converter step included), so that only the path's own error is left."""
    n = params.n
    if qd0 is None:
        qd0 = initial_velocity(m.q, 0, period)
    zero = np.zeros(n)

    def first(name: str, y: np.ndarray) -> np.ndarray:
        # The initial state: as the channels read it (their converter step is the one the
        # live controller saw too), less the noise where the run's own is known.
        e = zero if sensor_noise is None else sensor_noise[name][0]
        return setup.true(name, y[0] - e)

    x0 = np.concatenate(
        [first("q", m.q), qd0, first("p_cap", m.p_cap), first("p_rod", m.p_rod),
         first("spool", m.spool)]
    )  # fmt: skip
    window = min(settle_s, VELOCITY_WINDOW_S)
    x0[n : 2 * n] = fit_initial_velocity(
        params, period, m, setup, x0, effects, oil_c, window, sensor_noise
    )
    steps = m.q.shape[0]
    seen = None if sensor_noise is None else {f: np.empty((steps, n)) for f in FIELD_OUTPUTS}
    states, refs, _ = simulate_closed_loop(
        params, period, x0, setup, steps, effects, oil_c, sensor_noise, seen
    )
    measured = {"q": m.q, "u": m.spool, "p_cap": m.p_cap, "p_rod": m.p_rod}
    if m.piston is not None:
        measured["s"] = m.piston
    if seen is not None:
        simulated = {out: seen[f] for f, out in FIELD_OUTPUTS.items() if out in measured}
    else:
        simulated = {
            "q": setup.read("q", states[:, :n]),
            "u": setup.read("spool", states[:, 4 * n : 5 * n]),
            "p_cap": setup.read("p_cap", states[:, 2 * n : 3 * n]),
            "p_rod": setup.read("p_rod", states[:, 3 * n : 4 * n]),
        }
        if m.piston is not None:
            s_true, _ = dynamics.cylinder(params, states[:, :n])
            simulated["s"] = setup.read("piston", s_true)
    fit, notes = fit_ratios(measured, simulated, n, min(round(settle_s / period), len(m.q) - 2))
    return ClosedLoopResult(m.t, measured, simulated, fit, refs, notes)


def control_setup(
    profile: Any,
    experiment: Mapping[str, Any] | Experiment,
    gains: Sequence[Mapping[str, float]] | None = None,
    controller_params: PlantParams | None = None,
) -> ControlSetup:
    """The controller the service builds for `run` of `experiment` on `profile` (its gains and
    limits, `daq.service.control_api`), with `gains` (the recorded per-joint PID values, if the
    run's were not the profile's) over them."""
    from daq.loop.feedback_map import FIELDS  # the loop's field ↔ role map
    from daq.sim_closed_loop import gains_limits  # the service's own builders

    exp = experiment if isinstance(experiment, Experiment) else Experiment.from_dict(experiment)
    base, limits = gains_limits(profile)
    if gains is not None:
        base = [replace(b, **dict(g)) for b, g in zip(base, gains, strict=True)]
    joints = [j.name for j in profile.joints]
    amp_of = {j.name: j.limits.valve_max_v for j in profile.joints}
    lo, hi = np.full(len(joints), -np.inf), np.full(len(joints), np.inf)
    vmin, vlsb = np.zeros(len(joints)), np.ones(len(joints))
    for c in profile.outputs:
        j = joints.index(str(c.joint))
        amp = amp_of[str(c.joint)]  # the interlocks' clamp (daq.loop.interlocks)
        lo[j] = max(c.null_volts - amp, c.converter.min)
        hi[j] = min(c.null_volts + amp, c.converter.max)
        vmin[j] = c.converter.min
        vlsb[j] = (c.converter.max - c.converter.min) / (1 << c.converter.bits)
    sensing = {
        name: Resolution([profile.joint_channel(j, role) for j in joints]) for name, role in FIELDS
    }
    return ControlSetup(exp, base, limits, lo, hi, vmin, vlsb, sensing, controller_params)


def fit_initial_velocity(
    params: PlantParams,
    period: float,
    m: Measured,
    setup: ControlSetup,
    x0: np.ndarray,
    effects: PlantEffects | None,
    oil_c: float | None,
    window_s: float,
    sensor_noise: Mapping[str, np.ndarray] | None = None,
) -> np.ndarray:
    """The initial velocities that make the replay follow the measured angles and pressures
    best over the first `window_s` (the rows the FIT then leaves out): the initial condition
    estimated as a nuisance parameter, as an output-error comparison does. One row gives the
    velocity only to ~0.01 rad/s (a resolver step over 50 ms), and a stiction or cavitating
    plant carries the pressure error that follows for seconds. Starts from `x0`'s velocities;
    Nelder–Mead over n values, each cost a replay of `window_s`. `sensor_noise`: as in
    `validate_closed_loop`, the replay's readings compared."""
    n = params.n
    k = max(2, min(round(window_s / period), m.q.shape[0]))
    y = np.concatenate(
        [m.q[:k] / ANGLE_SCALE, m.p_cap[:k] / PRESSURE_SCALE, m.p_rod[:k] / PRESSURE_SCALE], axis=1
    )
    x = x0.copy()
    seen = None if sensor_noise is None else {f: np.empty((k, n)) for f in ("q", "p_cap", "p_rod")}

    def cost(qd: np.ndarray) -> float:
        x[n : 2 * n] = qd
        with np.errstate(all="ignore"):
            st, _, _ = simulate_closed_loop(
                params, period, x, setup, k, effects, oil_c, sensor_noise, seen
            )
        if seen is not None:
            q, pc, pr = seen["q"], seen["p_cap"], seen["p_rod"]
        else:
            q = setup.read("q", st[:, :n])
            pc = setup.read("p_cap", st[:, 2 * n : 3 * n])
            pr = setup.read("p_rod", st[:, 3 * n : 4 * n])
        yh = np.concatenate([q / ANGLE_SCALE, pc / PRESSURE_SCALE, pr / PRESSURE_SCALE], axis=1)
        c = float(np.mean((y - yh) ** 2))
        return c if np.isfinite(c) else np.inf

    start = np.asarray(x0[n : 2 * n], dtype=float)
    res = minimize(
        cost,
        start,
        method="Nelder-Mead",
        options={
            "initial_simplex": _simplex(start),
            "xatol": 1e-4,
            "fatol": 1e-9,
            "maxfev": 30 * n,
        },
    )
    return np.asarray(res.x if res.fun <= cost(start) else start, dtype=float)


def _simplex(start: np.ndarray) -> np.ndarray:
    """Nelder–Mead's first simplex: the start and a step of `VELOCITY_STEP` along each joint."""
    out = np.repeat(start[None, :], start.size + 1, axis=0)
    out[1:] += VELOCITY_STEP * np.eye(start.size)
    return out


def initial_velocity(q: np.ndarray, k0: int, period: float) -> np.ndarray:
    """The joints' velocity at row `k0` of the angles `q` (N, n): the slope of a straight line
    through the rows up to it where there are such rows (what the arm did before the run: its
    state at the first row is the outcome of that past), else through the first rows after it.
    A zero-phase derivative is no good here: its edge transient at a record's first row, and
    the jerk of a runner taking over smeared back into it, read an arm at rest as moving at
    0.02–0.2 rad/s, and the replay of a stiction plant is sensitive to it (0.2 rad/s costs
    200 kPa of pressure error in the first 20 ms)."""
    k = max(3, round(VELOCITY_FIT_S / period))
    before = k0 + 1 >= k
    rows = q[k0 - k + 1 : k0 + 1] if before else q[k0 : k0 + k]
    t = np.arange(rows.shape[0]) * period
    t -= t[-1] if before else 0.0  # the fit's derivative at t = 0 is the one at row k0
    return np.asarray(np.polyfit(t, rows, 2)[1], dtype=float)


@njit
def _write_valves(k, ref, volts, v_lo, v_hi, v_min, v_lsb, refs, cmds):
    """The valve volts as the rig's outputs write them: the interlocks' amplitude clamp, then
    the D/A's whole codes (the simulator's write(), the profile's converter); row k of the
    references and commands stored."""
    for j in range(volts.shape[0]):
        v = volts[j]
        if v < v_lo[j]:
            v = v_lo[j]
        elif v > v_hi[j]:
            v = v_hi[j]
        v = np.floor((v - v_min[j]) / v_lsb[j] + 0.5) * v_lsb[j]  # NaN stays NaN
        volts[j] = v + v_min[j]
        refs[k, j] = ref[j]
        cmds[k, j] = volts[j]


#: The feedback fields in the order `_read_fields` fills its rows (controller.feedback.Feedback).
SENSED = ("q", "p_cap", "p_rod", "spool", "piston")


def _sensing(
    fb: Feedback,
    x: np.ndarray,
    P: np.ndarray,
    n: int,
    period: float,
    setup: ControlSetup,
    sensor_noise: Mapping[str, np.ndarray] | None,
    steps: int,
) -> Callable[[int], None]:
    """`sense(k)`: the simulated state `x` as the channels read it at cycle k, into `fb` — per
    value the true sensor's error, the run's noise, the converter's step, the calibration's
    correction (`SensorFrame`, `Resolution`). One compiled call per cycle (`_read_fields`)
    where every channel's scaling is linear; per field in Python otherwise (the same
    arithmetic in the same order: bit-equal)."""
    if any(res.other for res in setup.sensing.values()):
        return _sensing_python(fb, x, P, n, period, setup, sensor_noise)
    rows = np.full((len(SENSED), n), np.nan)
    for i, name in enumerate(SENSED):  # the fields become views of one block
        setattr(fb, name, rows[i])
    shape = (len(SENSED), n)
    # Per field and joint (rows in SENSED order); the identity where a field has no true
    # sensor frame or no converter (×1, +0, /1: exact, so the arithmetic stays bit-equal).
    gain, cal_gain, r_gain, r_lsb, r_full = (np.ones(shape) for _ in range(5))
    offset, cal_offset, r_offset, r_min = (np.zeros(shape) for _ in range(4))
    r_wraps, r_linear, r_missing = (np.zeros(shape, bool) for _ in range(3))
    noise = np.zeros((steps if sensor_noise else 1, *shape))
    for i, name in enumerate(SENSED):
        f = setup.sensors.get(name)
        if f is not None:
            gain[i], offset[i] = f.gain, f.offset
            cal_gain[i], cal_offset[i] = f.cal_gain, f.cal_offset
        res = setup.sensing.get(name)
        if res is not None:
            r_gain[i], r_offset[i], r_min[i], r_lsb[i] = res.gain, res.offset, res.cmin, res.lsb
            r_full[i], r_wraps[i] = res.full, res.wraps
            r_linear[i], r_missing[i] = res.linear, res.missing
        if sensor_noise and name in sensor_noise:
            noise[:, i] = sensor_noise[name][:steps]
    noisy = bool(sensor_noise)
    conv = (r_gain, r_offset, r_min, r_lsb, r_full, r_wraps, r_linear, r_missing)

    def sense(k: int) -> None:
        fb.t = k * period
        _read_fields(x, P, n, rows, gain, offset, noise[k if noisy else 0], *conv, cal_gain,
                     cal_offset)  # fmt: skip

    return sense


def _sensing_python(
    fb: Feedback,
    x: np.ndarray,
    P: np.ndarray,
    n: int,
    period: float,
    setup: ControlSetup,
    sensor_noise: Mapping[str, np.ndarray] | None,
) -> Callable[[int], None]:
    """`_sensing` for channels with a scaling `_read_fields` does not compile: per field."""
    noise = [(getattr(fb, name), e) for name, e in (sensor_noise or {}).items()]
    frames = [(getattr(fb, name), f) for name, f in setup.sensors.items()]
    resolutions = [(getattr(fb, name), res) for name, res in setup.sensing.items()]

    def sense(k: int) -> None:
        fb.t = k * period
        fb.q[:] = x[:n]
        fb.p_cap[:] = x[2 * n : 3 * n]
        fb.p_rod[:] = x[3 * n : 4 * n]
        fb.spool[:] = x[4 * n : 5 * n]
        for j in range(n):
            fb.piston[j], _ = dynamics.piston(P, j, x[j])
        for arr, f in frames:
            f.error(arr)
        for arr, e in noise:
            arr += e[k]
        for arr, res in resolutions:
            res.apply(arr)
        for arr, f in frames:
            f.correct(arr)

    return sense


@njit
def _read_fields(x, P, n, rows, gain, offset, noise, r_gain, r_offset, r_min, r_lsb, r_full,
                 r_wraps, r_linear, r_missing, cal_gain, cal_offset):  # fmt: skip
    """`_sensing_python`'s `sense` for linear channels, every field in one pass (rows in
    `SENSED` order): (true · g + o) + noise, the converter's step, then the calibration."""
    for j in range(n):
        rows[0, j] = x[j]
        rows[1, j] = x[2 * n + j]
        rows[2, j] = x[3 * n + j]
        rows[3, j] = x[4 * n + j]
        rows[4, j] = dynamics.piston(P, j, x[j])[0]
    for i in range(rows.shape[0]):
        for j in range(n):
            y = rows[i, j] * gain[i, j]
            y += offset[i, j]
            y += noise[i, j]
            if r_linear[i, j]:
                y = _quantised(y, r_gain[i, j], r_offset[i, j], r_min[i, j], r_lsb[i, j],
                               r_full[i, j], r_wraps[i, j])  # fmt: skip
            if r_missing[i, j]:
                y = np.nan
            y -= cal_offset[i, j]
            rows[i, j] = y / cal_gain[i, j]


class Resolution:
    """The joints' input channels of one feedback field at their converters' resolution: eng →
    counts → eng as the loop sees them (`daq.scaling`; linear scalings vectorised, others per
    value); NaN where a joint has no such channel, as in the loop's Feedback."""

    def __init__(self, channels: Sequence[Any]) -> None:
        from daq.profile.schema import LinearScaling

        self.channels = list(channels)
        self.missing = np.array([c is None for c in channels])
        lin = [c is not None and isinstance(c.scaling, LinearScaling) for c in channels]
        self.linear = np.array(lin)
        self.other = [j for j, c in enumerate(channels) if c is not None and not lin[j]]

        def arr(f: Callable[[Any], float], default: float) -> np.ndarray:
            return np.array([f(c) if ok else default for c, ok in zip(channels, lin, strict=True)])

        self.gain = arr(lambda c: c.scaling.gain, 1.0)
        self.offset = arr(lambda c: c.scaling.offset, 0.0)
        self.cmin = arr(lambda c: c.converter.min, 0.0)
        self.lsb = arr(lambda c: (c.converter.max - c.converter.min) / (1 << c.converter.bits), 1.0)
        self.full = arr(lambda c: float(1 << c.converter.bits), 1.0)
        self.wraps = arr(lambda c: float(c.converter.wraps), 0.0).astype(bool)

    def apply(self, y: np.ndarray) -> None:
        """`y` (per joint, eng) in place as the channels report it."""
        _quantise(
            y, self.gain, self.offset, self.cmin, self.lsb, self.full, self.wraps, self.linear
        )
        if self.other:
            from daq.scaling import counts_to_units, eng_to_counts, to_eng

            for j in self.other:
                c = self.channels[j]
                y[j] = to_eng(c.scaling, counts_to_units(c.converter, eng_to_counts(c, y[j])))
        y[self.missing] = np.nan


@njit
def _quantised(y, gain, offset, cmin, lsb, full, wraps):
    """One linear channel's value: eng → nearest code (wrapped or saturated,
    `daq.scaling.units_to_counts`) → eng."""
    code = np.floor(((y - offset) / gain - cmin) / lsb + 0.5)  # NaN stays NaN
    if wraps:
        code = code % full
    else:
        code = min(max(code, 0.0), full - 1.0)
    return gain * (cmin + code * lsb) + offset


@njit
def _quantise(y, gain, offset, cmin, lsb, full, wraps, linear):
    """Linear channels of `y` through `_quantised`, in place."""
    for j in range(y.shape[0]):
        if linear[j]:
            y[j] = _quantised(y[j], gain[j], offset[j], cmin[j], lsb[j], full[j], wraps[j])
