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
from typing import Any

import numpy as np

from controller.compiled.jit import kernel, register_source
from controller.compiled.runner import phase_step
from daq.loop.feedback_map import FIELDS
from daq.loop.interlocks import CLAMP_FLAG, Trip
from daq.profile.schema import LinearScaling, PolynomialScaling
from daq.scaling import lsb

log = logging.getLogger(__name__)
register_source(__file__)  # this module's kernels call the controller's: one cache hash

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


# ---------------------------------------------------------------------------- the blob layout
# numba's dispatcher costs ~0.25 µs per array argument on each call, more than the maths of a
# cycle: so every array of the cycle lives in one float blob `F` and one int blob `I`, and the
# Python objects (`ChannelScaler.gain`, `Interlocks.soft_min`, `Loop.volts`, ...) hold views of
# them — a calibration swap or a jog that changes them in place changes what the kernels read.
# `I[:HEADER]` holds the sizes and every field's offset.
H_NI, H_NO, H_NJ, H_NP, H_NL, H_W, H_SUPPLY, H_RAW, H_ENG = range(9)
_FOFF, _IOFF, HEADER = 16, 48, 64
(GAIN, OFFSET, CORR_OFF, CORR_INV, VMIN, VMAX, PMAX, SOFT_MIN, SOFT_MAX, FE_BASE, FE_PV, V_LO,
 V_HI, V_STEP, PREV_VOLTS, VOLTS, JOINT_VOLTS, REF, REF_PREV, REF_VEL, FBM, QR, QDR, QDDR,
 TRIP_F, NL_U, NL_COEF, NL_X, SCALARS) = range(29)  # fmt: skip
NL_INDEX, NL_KIND, P_INDEX, FB_INDEX, JOINT_OF_OUTPUT, CFG, TRIP_I = range(7)
S_SUPPLY_MIN, S_PERIOD = 0, 1


@kernel
def _f(F: np.ndarray, I: np.ndarray, k: int, size: int) -> np.ndarray:
    o = I[_FOFF + k]
    return F[o : o + size]


@kernel
def _i(I: np.ndarray, k: int, size: int) -> np.ndarray:
    o = I[_IOFF + k]
    return I[o : o + size]


@kernel
def k_scale(row: np.ndarray, F: np.ndarray, I: np.ndarray) -> None:
    """This cycle's counts (the row's raw slice) → the row's eng slice and the feedback."""
    ni, nj, nl, w = I[H_NI], I[H_NJ], I[H_NL], I[H_W]
    scale_fill(
        row[I[H_RAW] : I[H_RAW] + ni], row[I[H_ENG] : I[H_ENG] + ni],
        _f(F, I, GAIN, ni), _f(F, I, OFFSET, ni), _i(I, NL_INDEX, nl), _i(I, NL_KIND, nl),
        _f(F, I, NL_U, nl * 3).reshape(nl, 3), _f(F, I, NL_COEF, nl * w).reshape(nl, w),
        _f(F, I, NL_X, nl * w).reshape(nl, w), _f(F, I, CORR_OFF, ni), _f(F, I, CORR_INV, ni),
        _i(I, FB_INDEX, 5 * nj).reshape(5, nj), _f(F, I, FBM, 5 * nj).reshape(5, nj),
    )  # fmt: skip


#: Flags of the checks before the law: a trip among them means the runner is not stepped.
CHECK_FLAGS = sum(1 << (c - 1) for c in (_CHANNEL_RANGE, _CHANNEL_FAULT, _SOFT_LIMIT, _PRESSURE,
                                         _SUPPLY_LOST))  # fmt: skip


@kernel
def k_rest(
    row: np.ndarray,
    F: np.ndarray,
    I: np.ndarray,
    channel_fault: np.ndarray,
    live: bool,
    step: bool,
    tr: float,
    tkind: int,
    coef: np.ndarray,
    lb: np.ndarray,
    fresh: bool,
) -> int:
    """The cycle after the commands: the input checks (every state), and while live the supply
    and soft-limit checks; then, if `step` and nothing tripped, the runner's phase at `tr`
    (`controller.compiled.runner.phase_step`) and the output checks. Returns the flags."""
    ni, no, nj, n_p = I[H_NI], I[H_NO], I[H_NJ], I[H_NP]
    eng = row[I[H_ENG] : I[H_ENG] + ni]
    fbm = _f(F, I, FBM, 5 * nj).reshape(5, nj)
    cfg = _i(I, CFG, 5)
    trip_i, trip_f = _i(I, TRIP_I, 2), _f(F, I, TRIP_F, 2)
    flags = check_cycle(
        eng, channel_fault, fbm[0], cfg, _f(F, I, VMIN, ni), _f(F, I, VMAX, ni),
        _i(I, P_INDEX, n_p), _f(F, I, PMAX, n_p), live, I[H_SUPPLY],
        F[I[_FOFF + SCALARS] + S_SUPPLY_MIN], _f(F, I, SOFT_MIN, nj), _f(F, I, SOFT_MAX, nj),
        trip_i, trip_f,
    )  # fmt: skip
    if not step or flags & CHECK_FLAGS:
        return flags
    joint_volts, ref = _f(F, I, JOINT_VOLTS, nj), _f(F, I, REF, nj)
    phase_step(
        tkind, coef, tr, lb, fbm[0], fbm[1], fbm[2], _f(F, I, QR, nj),
        _f(F, I, QDR, nj), _f(F, I, QDDR, nj), ref, joint_volts,
    )  # fmt: skip
    flags |= finish_outputs(
        joint_volts, _i(I, JOINT_OF_OUTPUT, no), _f(F, I, VOLTS, no), ref, _f(F, I, REF_PREV, nj),
        _f(F, I, REF_VEL, nj), fresh, F[I[_FOFF + SCALARS] + S_PERIOD], fbm[0], cfg,
        _f(F, I, FE_BASE, nj), _f(F, I, FE_PV, nj), _f(F, I, V_LO, no), _f(F, I, V_HI, no),
        _f(F, I, V_STEP, no), _f(F, I, PREV_VOLTS, no), trip_i, trip_f,
    )  # fmt: skip
    return flags


class _Packer:
    """Lays named arrays out in one blob and gives back views of it."""

    def __init__(self, dtype: type) -> None:
        self.dtype, self.parts = dtype, []  # type: ignore[var-annotated]

    def add(self, k: int, init: np.ndarray) -> None:
        self.parts.append((k, np.asarray(init, dtype=self.dtype)))

    def build(self, header: int) -> tuple[np.ndarray, dict[int, tuple[int, np.ndarray]]]:
        size = header + sum(p.size for _, p in self.parts)
        blob = np.zeros(size, dtype=self.dtype)
        out, off = {}, header
        for k, p in self.parts:
            view = blob[off : off + p.size].reshape(p.shape)
            view[...] = p
            out[k] = (off, view)
            off += p.size
        return blob, out


class CompiledCycle:
    """The blobs of one loop's kernels, built once from its Python objects, whose arrays become
    views of them (see "the blob layout")."""

    def __init__(self, loop: Any) -> None:
        scaler, fbmap, il = loop.scaler, loop.fbmap, loop.interlocks
        st = loop.station
        self.interlocks = il
        nl = scaler.nonlinear
        width = 1 + max(
            [len(c.scaling.coefficients) if isinstance(c.scaling, PolynomialScaling)
             else len(c.scaling.points) for c in (scaler.channels[i] for i in nl)] or [1]
        )  # fmt: skip
        nl_index = np.array(nl, dtype=np.intp)
        nl_kind = np.zeros(len(nl), dtype=np.intp)
        nl_u = np.zeros((len(nl), 3))
        nl_coef = np.zeros((len(nl), width))
        nl_x = np.zeros((len(nl), width))
        for m, i in enumerate(nl):
            ch = scaler.channels[i]
            s = ch.scaling
            assert not isinstance(s, LinearScaling)
            nl_u[m, 0], nl_u[m, 1] = ch.converter.min, lsb(ch.converter)
            if isinstance(s, PolynomialScaling):
                nl_kind[m] = _POLY
                nl_u[m, 2] = len(s.coefficients)
                nl_coef[m, : len(s.coefficients)] = s.coefficients
            else:
                nl_kind[m] = _TABLE
                nl_u[m, 2] = len(s.points)
                nl_x[m, : len(s.points)] = [p[0] for p in s.points]
                nl_coef[m, : len(s.points)] = [p[1] for p in s.points]
        nj = fbmap.n_joints
        fb_index = np.full((len(FIELDS), nj), -1, dtype=np.intp)
        rows = {name: f for f, (name, _) in enumerate(FIELDS)}
        for name, idx in fbmap.full:
            fb_index[rows[name]] = idx
        for name, pairs in fbmap.partial:
            for j, i in pairs:
                fb_index[rows[name], j] = i
        cfg = il.cfg
        fp, ip = _Packer(np.float64), _Packer(np.intp)
        # (float field, owner, attribute): the owner's array becomes the blob's view.
        owned = [
            (GAIN, scaler, "gain"), (OFFSET, scaler, "offset"), (CORR_OFF, scaler, "corr_offset"),
            (CORR_INV, scaler, "corr_inv_gain"), (VMIN, il, "valid_min"), (VMAX, il, "valid_max"),
            (PMAX, il, "p_max"), (SOFT_MIN, il, "soft_min"), (SOFT_MAX, il, "soft_max"),
            (FE_BASE, il, "fe_base"), (FE_PV, il, "fe_per_velocity"), (V_LO, il, "v_lo"),
            (V_HI, il, "v_hi"), (V_STEP, il, "v_step"), (PREV_VOLTS, loop, "prev_volts"),
            (VOLTS, loop, "volts"), (JOINT_VOLTS, loop, "joint_volts"), (REF, loop, "ref"),
            (REF_PREV, loop, "ref_prev"), (REF_VEL, loop, "ref_velocity"), (FBM, loop, "fbm"),
        ]  # fmt: skip
        for k, owner, name in owned:
            fp.add(k, getattr(owner, name))
        for k, init in ((QR, np.zeros(nj)), (QDR, np.zeros(nj)), (QDDR, np.zeros(nj)),
                        (TRIP_F, np.zeros(2)), (NL_U, nl_u), (NL_COEF, nl_coef), (NL_X, nl_x),
                        (SCALARS, np.array([st.supply_min, loop.period]))):  # fmt: skip
            fp.add(k, init)
        for k, init in ((NL_INDEX, nl_index), (NL_KIND, nl_kind), (P_INDEX, il.p_index),
                        (FB_INDEX, fb_index), (JOINT_OF_OUTPUT, fbmap.joint_of_output),
                        (CFG, np.array([cfg.channel_range, cfg.pressure, cfg.soft_limits,
                                        cfg.following_error, cfg.valve_limits])),
                        (TRIP_I, np.zeros(2))):  # fmt: skip
            ip.add(k, init)
        self.F, fviews = fp.build(0)
        self.I, iviews = ip.build(HEADER)
        for k, (off, _) in fviews.items():
            self.I[_FOFF + k] = off
        for k, (off, _) in iviews.items():
            self.I[_IOFF + k] = off
        for k, owner, name in owned:
            setattr(owner, name, fviews[k][1])
        # The feedback's fields are the rows of the blob's feedback matrix.
        for f, (name, _) in enumerate(FIELDS):
            setattr(loop.fb, name, loop.fbm[f])
        lay = loop.layout
        hdr = self.I
        hdr[H_NI], hdr[H_NO], hdr[H_NJ] = len(scaler.channels), len(fbmap.joint_of_output), nj
        hdr[H_NP], hdr[H_NL], hdr[H_W] = len(il.p_index), len(nl), width
        hdr[H_SUPPLY] = st.supply_index if st.check_supply else -1
        hdr[H_RAW], hdr[H_ENG] = lay.span("raw").start, lay.span("eng").start
        self.trip_i = iviews[TRIP_I][1]
        self.trip_f = fviews[TRIP_F][1]

    def where(self, code: int, index: int, supply_name: str) -> str:
        """The `TripInfo.where` of a kernel's trip (the rare path)."""
        il = self.interlocks
        if code in (_CHANNEL_RANGE, _CHANNEL_FAULT):
            return str(il.input_names[index])
        if code == _PRESSURE:
            return str(il.p_names[index])
        if code in (_SOFT_LIMIT, _FOLLOWING):
            return str(il.joint_names[index])
        if code in (_VALVE_RATE, _COMMAND_INVALID):
            return str(il.output_names[index])
        if code == _SUPPLY_LOST:
            return supply_name
        return ""

    def record(self, flags: int, supply_name: str) -> None:
        """A kernel's flags into the interlocks, and its first trip as the cycle's `TripInfo`
        when nothing tripped before it in this cycle (the order of `Interlocks`' checks)."""
        il = self.interlocks
        if flags & CLAMP_FLAG:
            il.clamped += 1
        code = int(self.trip_i[0])
        if code and il.first is None:
            il.trip(
                Trip(code),
                self.where(code, int(self.trip_i[1]), supply_name),
                float(self.trip_f[0]),
                float(self.trip_f[1]),
            )
        il.flags |= flags


def _dummy_blobs(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A blob pair and a row for n inputs, outputs and joints (for `compile_all` only)."""
    fp, ip = _Packer(np.float64), _Packer(np.intp)
    for k in range(SCALARS + 1):
        fp.add(k, np.zeros(5 * n))
    for k in range(TRIP_I + 1):
        ip.add(k, np.zeros(5 * n))
    F, fv = fp.build(0)
    I, iv = ip.build(HEADER)
    for k, (off, _) in fv.items():
        I[_FOFF + k] = off
    for k, (off, _) in iv.items():
        I[_IOFF + k] = off
    fv[SCALARS][1][S_PERIOD] = 1e-3
    fv[VMAX][1][:] = fv[PMAX][1][:] = fv[SOFT_MAX][1][:] = fv[V_HI][1][:] = 1.0
    fv[SOFT_MIN][1][:] = fv[V_LO][1][:] = -1.0
    fv[FE_BASE][1][:] = fv[V_STEP][1][:] = 1.0
    iv[FB_INDEX][1][:] = -1
    iv[CFG][1][:] = 1
    I[H_NI] = I[H_NO] = I[H_NJ] = n
    I[H_SUPPLY], I[H_RAW], I[H_ENG] = -1, 0, n
    return F, I, np.zeros(2 * n + 8)


def compile_all() -> float:
    """Compile (or load from the disk cache) every kernel the compiled cycle calls, with the
    types the loop calls them with, before the loop can arm; returns the seconds it took."""
    from controller.compiled.laws import law_blob, law_disable, law_enable, law_views
    from controller.compiled.trajectories import traj_eval

    t0 = time.perf_counter()
    n = 2
    F, I, row = _dummy_blobs(n)
    k_scale(row, F, I)
    coef = np.zeros((n, 12))
    coef[:, 1] = 1.0  # harmonic: one term; trapezoid: one (empty) move
    for kind in range(5):
        lb = law_blob(kind, n)
        views = law_views(lb)
        for k in (0, 2, 4, 5, 6):  # lp, pidp, mp, ms, vlim: no division by zero
            views[k][...] = 1.0
        for tkind in range(4):
            k_rest(row, F, I, np.zeros(n, np.uint8), True, True, 0.0, tkind, coef, lb, False)
        f = np.zeros(n)
        law_enable(lb, f, f, f, f)
        law_disable(lb)
    for tkind in range(4):
        traj_eval(tkind, coef, 0.0, np.zeros(n), np.zeros(n), np.zeros(n))
    return time.perf_counter() - t0
