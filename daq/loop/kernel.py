"""The compiled cycle's loop-side kernels: scaling, the feedback map, the interlocks, the outputs.

Each kernel is the Python class method it replaces, over the same preallocated arrays and with the
same operations in the same order (`daq.scaling.ChannelScaler.scale`, `FeedbackMap.fill`/
`to_channels`, `Interlocks.check_inputs`/`check_position`/`check_following`/`limit_outputs`, the
station's supply check). A check that fires returns its flag bit and, if it is the first of the
call, writes its cause into `trip_i = [code, index]`, `trip_f = [value, limit]`; the loop turns
that into the `TripInfo` (the rare path) — the compiled code never allocates.

`CompiledCycle` owns the arrays that are not already the Python objects' own; everything the
rare paths change in place (a calibration swap, a jog's soft limits) is shared, not copied.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np

from controller.compiled.jit import kernel
from daq.loop.feedback_map import FIELDS, FeedbackMap
from daq.loop.interlocks import CLAMP_FLAG, Interlocks, Trip
from daq.profile.schema import LinearScaling, PolynomialScaling
from daq.scaling import ChannelScaler, lsb

log = logging.getLogger(__name__)

_POLY, _TABLE = 0, 1
_CHANNEL_RANGE, _CHANNEL_FAULT, _SOFT_LIMIT, _PRESSURE = 1, 2, 3, 4
_FOLLOWING, _VALVE_RATE, _COMMAND_INVALID, _SUPPLY_LOST = 5, 6, 7, 15
_CLAMP = CLAMP_FLAG


@kernel
def _trip(trip_i: np.ndarray, trip_f: np.ndarray, code: int, index: int, value: float,
          limit: float) -> int:  # fmt: skip
    if trip_i[0] == 0:
        trip_i[0] = code
        trip_i[1] = index
        trip_f[0] = value
        trip_f[1] = limit
    return 1 << (code - 1)


@kernel
def scale_fill(
    raw: np.ndarray,
    eng: np.ndarray,
    gain: np.ndarray,
    offset: np.ndarray,
    nl_index: np.ndarray,
    nl_kind: np.ndarray,
    nl_u: np.ndarray,
    nl_coef: np.ndarray,
    nl_x: np.ndarray,
    corr_offset: np.ndarray,
    corr_inv_gain: np.ndarray,
    fb_index: np.ndarray,
    fbm: np.ndarray,
) -> None:
    """Counts → engineering units with the calibration (`ChannelScaler.scale`), then the
    feedback rows (`FeedbackMap.fill`; `fbm[f, j]` is field f of joint j, −1: no channel)."""
    for i in range(raw.shape[0]):
        eng[i] = raw[i] * gain[i]
        eng[i] = eng[i] + offset[i]
    for m in range(nl_index.shape[0]):
        i = nl_index[m]
        x = nl_u[m, 0] + raw[i] * nl_u[m, 1]  # converter units (daq.scaling.counts_to_units)
        count = int(nl_u[m, 2])
        if nl_kind[m] == _POLY:
            y = 0.0
            for k in range(count - 1, -1, -1):
                y = y * x + nl_coef[m, k]
        else:  # table: daq.scaling._interp
            k = 1
            while k < count - 1 and x > nl_x[m, k]:
                k += 1
            x0, x1, y0, y1 = nl_x[m, k - 1], nl_x[m, k], nl_coef[m, k - 1], nl_coef[m, k]
            y = y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        eng[i] = (y - corr_offset[i]) * corr_inv_gain[i]
    for f in range(fb_index.shape[0]):
        for j in range(fb_index.shape[1]):
            i = fb_index[f, j]
            if i >= 0:
                fbm[f, j] = eng[i]


@kernel
def check_cycle(
    eng: np.ndarray,
    channel_fault: np.ndarray,
    q: np.ndarray,
    cfg: np.ndarray,
    valid_min: np.ndarray,
    valid_max: np.ndarray,
    p_index: np.ndarray,
    p_max: np.ndarray,
    live: bool,
    supply_index: int,
    supply_min: float,
    soft_min: np.ndarray,
    soft_max: np.ndarray,
    trip_i: np.ndarray,
    trip_f: np.ndarray,
) -> int:
    """`Interlocks.check_inputs` (every state), then while live the station's supply check
    (`supply_index` −1: none) and `Interlocks.check_position`. Returns the flags raised."""
    trip_i[0] = 0
    flags = 0
    if cfg[0]:  # channel_range
        for i in range(eng.shape[0]):
            v = eng[i]
            if v < valid_min[i] or v > valid_max[i] or math.isnan(v):
                lim = valid_min[i] if v < valid_min[i] else valid_max[i]
                flags |= _trip(trip_i, trip_f, _CHANNEL_RANGE, i, v, lim)
                break
        for i in range(channel_fault.shape[0]):
            if channel_fault[i]:
                flags |= _trip(trip_i, trip_f, _CHANNEL_FAULT, i, float(channel_fault[i]), 0.0)
                break
    if cfg[1]:  # pressure
        for k in range(p_index.shape[0]):
            v = eng[p_index[k]]
            if v > p_max[k]:
                flags |= _trip(trip_i, trip_f, _PRESSURE, k, v, p_max[k])
                break
    if live:
        if supply_index >= 0:
            v = eng[supply_index]
            if not v >= supply_min:
                flags |= _trip(trip_i, trip_f, _SUPPLY_LOST, supply_index, v, supply_min)
        if cfg[2]:  # soft_limits
            for j in range(q.shape[0]):
                v = q[j]
                if v < soft_min[j] or v > soft_max[j]:
                    lim = soft_min[j] if v < soft_min[j] else soft_max[j]
                    flags |= _trip(trip_i, trip_f, _SOFT_LIMIT, j, v, lim)
                    break
    return flags


@kernel
def finish_outputs(
    joint_volts: np.ndarray,
    joint_of_output: np.ndarray,
    volts: np.ndarray,
    ref: np.ndarray,
    ref_prev: np.ndarray,
    ref_velocity: np.ndarray,
    fresh: bool,
    period: float,
    q: np.ndarray,
    cfg: np.ndarray,
    fe_base: np.ndarray,
    fe_per_velocity: np.ndarray,
    v_lo: np.ndarray,
    v_hi: np.ndarray,
    v_step: np.ndarray,
    prev_volts: np.ndarray,
    trip_i: np.ndarray,
    trip_f: np.ndarray,
) -> int:
    """After the law: joint volts → output channels (`FeedbackMap.to_channels`), the reference
    velocity, `Interlocks.check_following` and `Interlocks.limit_outputs`. Returns the flags
    (`CLAMP_FLAG` included when a command was clamped)."""
    trip_i[0] = 0
    flags = 0
    for o in range(volts.shape[0]):
        volts[o] = joint_volts[joint_of_output[o]]
    inv = 1.0 / period
    for j in range(ref.shape[0]):
        ref_velocity[j] = 0.0 if fresh else (ref[j] - ref_prev[j]) * inv
        ref_prev[j] = ref[j]
    if cfg[3]:  # following_error
        for j in range(ref.shape[0]):
            err = abs(ref[j] - q[j])
            lim = abs(ref_velocity[j]) * fe_per_velocity[j] + fe_base[j]
            if err > lim:
                flags |= _trip(trip_i, trip_f, _FOLLOWING, j, err, lim)
                break
    if not cfg[4]:  # valve_limits
        return flags
    for o in range(volts.shape[0]):
        if not math.isfinite(volts[o]):
            return flags | _trip(trip_i, trip_f, _COMMAND_INVALID, o, volts[o], v_hi[o])
    clamped = False
    for o in range(volts.shape[0]):
        if volts[o] > v_hi[o] or volts[o] < v_lo[o]:
            clamped = True
    if clamped:
        flags |= _CLAMP
        for o in range(volts.shape[0]):
            volts[o] = min(max(volts[o], v_lo[o]), v_hi[o])
    for o in range(volts.shape[0]):
        step = abs(volts[o] - prev_volts[o])
        if step > v_step[o]:
            flags |= _trip(trip_i, trip_f, _VALVE_RATE, o, step / period, v_step[o] / period)
            break
    return flags


class CompiledCycle:
    """The arrays of one loop's compiled kernels, built once from its Python objects."""

    def __init__(
        self,
        scaler: ChannelScaler,
        fbmap: FeedbackMap,
        fbm: np.ndarray,
        interlocks: Interlocks,
        supply_index: int,
        supply_min: float,
        period: float,
    ) -> None:
        self.scaler, self.interlocks, self.period = scaler, interlocks, period
        nl = scaler.nonlinear
        width = 1 + max(
            [len(c.scaling.coefficients) if isinstance(c.scaling, PolynomialScaling)
             else len(c.scaling.points) for c in (scaler.channels[i] for i in nl)] or [1]
        )  # fmt: skip
        self.nl_index = np.array(nl, dtype=np.intp)
        self.nl_kind = np.zeros(len(nl), dtype=np.intp)
        self.nl_u = np.zeros((len(nl), 3))
        self.nl_coef = np.zeros((len(nl), width))
        self.nl_x = np.zeros((len(nl), width))
        for m, i in enumerate(nl):
            ch = scaler.channels[i]
            s = ch.scaling
            assert not isinstance(s, LinearScaling)
            self.nl_u[m, 0], self.nl_u[m, 1] = ch.converter.min, lsb(ch.converter)
            if isinstance(s, PolynomialScaling):
                self.nl_kind[m] = _POLY
                self.nl_u[m, 2] = len(s.coefficients)
                self.nl_coef[m, : len(s.coefficients)] = s.coefficients
            else:
                self.nl_kind[m] = _TABLE
                self.nl_u[m, 2] = len(s.points)
                self.nl_x[m, : len(s.points)] = [p[0] for p in s.points]
                self.nl_coef[m, : len(s.points)] = [p[1] for p in s.points]
        self.fbm = fbm
        self.fb_index = np.full((len(FIELDS), fbmap.n_joints), -1, dtype=np.intp)
        rows = {name: f for f, (name, _) in enumerate(FIELDS)}
        for name, idx in fbmap.full:
            self.fb_index[rows[name]] = idx
        for name, pairs in fbmap.partial:
            for j, i in pairs:
                self.fb_index[rows[name], j] = i
        self.joint_of_output = fbmap.joint_of_output
        cfg = interlocks.cfg
        self.cfg = np.array(
            [cfg.channel_range, cfg.pressure and len(interlocks.p_index) > 0, cfg.soft_limits,
             cfg.following_error, cfg.valve_limits], dtype=np.bool_,
        )  # fmt: skip
        self.supply_index, self.supply_min = supply_index, supply_min
        self.trip_i = np.zeros(2, dtype=np.int64)
        self.trip_f = np.zeros(2)

    def where(self, code: int, index: int, supply_name: str) -> str:
        """The `TripInfo.where` of a kernel's trip (the rare path)."""
        il = self.interlocks
        if code in (_CHANNEL_RANGE, _CHANNEL_FAULT):
            return il.input_names[index]
        if code == _PRESSURE:
            return il.p_names[index]
        if code in (_SOFT_LIMIT, _FOLLOWING):
            return il.joint_names[index]
        if code in (_VALVE_RATE, _COMMAND_INVALID):
            return il.output_names[index]
        if code == _SUPPLY_LOST:
            return supply_name
        return ""

    def record(self, flags: int, supply_name: str) -> None:
        """A kernel's flags into the interlocks (and the first trip's `TripInfo`)."""
        il = self.interlocks
        if flags & CLAMP_FLAG:
            il.clamped += 1
        il.flags |= flags
        code = int(self.trip_i[0])
        if code and il.first is None:
            il.trip(
                Trip(code),
                self.where(code, int(self.trip_i[1]), supply_name),
                float(self.trip_f[0]),
                float(self.trip_f[1]),
            )
            il.flags |= flags


def compile_all() -> float:
    """Compile (or load from the cache) every kernel of the compiled cycle with the types the
    loop uses, before the loop arms; returns the seconds it took."""
    from controller.compiled.runner import phase_step

    from controller.compiled.laws import N_LP, N_LS
    from controller.compiled.model import N_MP, N_MS
    from controller.compiled.pid import N_PAR, N_STATE

    t0 = time.perf_counter()
    n, f = 2, np.zeros(2)
    i = np.zeros(2, dtype=np.intp)
    m2 = np.zeros((n, N_LS))
    scale_fill(f, f.copy(), f, f, np.zeros(0, np.intp), np.zeros(0, np.intp), np.zeros((0, 3)),
               np.zeros((0, 2)), np.zeros((0, 2)), f, f, np.zeros((5, n), np.intp),
               np.zeros((5, n)))  # fmt: skip
    cfg = np.zeros(5, dtype=np.bool_)
    ti, tf = np.zeros(2, np.int64), np.zeros(2)
    check_cycle(f, np.zeros(2, np.uint8), f, cfg, f, f, i, f, True, -1, 0.0, f, f, ti, tf)
    finish_outputs(f, i, f.copy(), f, f.copy(), f.copy(), False, 1e-3, f, cfg, f, f, f, f, f,
                   f.copy(), ti, tf)  # fmt: skip

    for kind in range(5):
        for tkind in range(4):
            phase_step(tkind, np.zeros((n, 12)), 0.0, kind, np.ones((n, N_LP)), np.ones((n, N_LS)),
                       np.ones((n, N_PAR)), np.zeros((n, N_STATE)), np.ones((n, N_MP)),
                       np.ones(N_MS), f + 1, f.copy(), np.zeros(n, np.bool_), kind == 3, f, f, f,
                       f.copy(), f.copy(), f.copy(), f.copy(), f.copy())  # fmt: skip
    from controller.compiled.laws import law_disable, law_enable
    from controller.compiled.trajectories import traj_eval

    for tkind in range(4):
        traj_eval(tkind, np.zeros((n, 12)), 0.0, f.copy(), f.copy(), f.copy())
    law_enable(0, m2, m2.copy(), np.zeros((n, N_STATE)), f, f, f, f)
    law_disable(0, np.zeros((n, N_STATE)))
    return time.perf_counter() - t0
