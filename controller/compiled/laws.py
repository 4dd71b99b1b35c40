"""The control laws (`controller.laws`) as compiled code over arrays — the compiled cycle's one
place for control-law maths.

`compile_law(law)` packs a law object's numbers once, when the experiment is loaded:
`CompiledLaw.kind` (one of the `LAW_*` codes), per-joint parameters `lp[j, :]` and state
`ls[j, :]` (columns per kind below), the PID family's `pidp`/`pids` (`controller.compiled.pid`),
the plant model's `mp`/`ms` (`controller.compiled.model`) and each joint's `valve_max_v`.
`law_enable`/`law_update` dispatch on the kind; each law's branch is its class's `enable`/
`update`, the same operations in the same order (tests/controller/test_compiled.py).

Adding a law or a term: write it here as a `@kernel` function over these arrays (scalar maths, no
allocation), give its numbers columns in `lp`/`ls` in `compile_law`, and call it from
`law_update`'s branch — the Python class in `controller.laws` stays the reference it must equal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from controller import compensation as comp
from controller.compiled.jit import kernel
from controller.compiled.model import (
    M_AC,
    M_AR,
    M_KV,
    N_MP,
    N_MS,
    cylinder,
    gravity_friction,
    inverse_dynamics,
    model_arrays,
    spool_measured,
    spool_steady,
)
from controller.compiled.pid import (
    N_PAR,
    N_STATE,
    pid_arrays,
    pid_disable,
    pid_enable,
    pid_update,
)
from controller.feedforward import COULOMB_SMOOTH_M_S, PlantModel
from controller.laws import (
    FeedforwardPid,
    GravityCompPD,
    Law,
    PidLaw,
    ValveSine,
    VelocityLimitedPD,
)
from controller.pid import Pid

LAW_PID, LAW_PID_FF, LAW_GRAVITY_PD, LAW_VLPD, LAW_VALVE_SINE = 0, 1, 2, 3, 4

# lp / ls columns per kind.
FF_MEASURED, FF_ALPHA, FF_PERIOD = 0, 1, 2  # lp
FF_FORCE_PREV, FF_PC, FF_PR, FF_VOLTS = 0, 1, 2, 3  # ls
GP_KP, GP_KD, GP_KF, GP_VALPHA, GP_PERIOD = 0, 1, 2, 3, 4  # lp
VEL_PREV, VEL_V = 0, 1  # ls (gravity_pd and vlpd: the velocity estimate)
VL_KP, VL_KD, VL_VMAX, VL_JG, VL_VFF, VL_VALPHA, VL_PERIOD, VL_LEAK = range(8)  # lp
VL_OUT, VL_QD_PREV, VL_R = 2, 3, 4  # ls
VS_AMP, VS_FREQ, VS_OFFSET, VS_CENTERING = 0, 1, 2, 3  # lp
# The PID family's load-pressure feedback (controller.pressure_feedback) and the feed-forward's
# Coulomb term (controller.compensation), after every kind's own columns.
DP_GAIN, DP_ALPHA, DP_AC, DP_AR, CF_SCALE, CF_POS, CF_NEG = 8, 9, 10, 11, 12, 13, 14  # lp
DP_PREV, DP_OUT, DP_VOLTS = 5, 6, 7  # ls
# The feed-forward's valve null and lap (controller.compensation.valve_spool; 0 = off).
VC_B0, VC_LAP = 15, 16  # lp
N_LP, N_LS = 17, 8


#: A compiled law is one float blob: a header (kind, joints, drives-to-reference), then its
#: arrays (`law_views`). One blob, because numba's dispatcher costs ~0.25 µs per array argument.
L_KIND, L_N, L_DRIVES, L_HEADER = 0, 1, 2, 4


def _sizes(n: int) -> tuple[int, ...]:
    # lp, ls, pidp, pids, mp, ms, vlim, work, open_loop
    return (n * N_LP, n * N_LS, n * N_PAR, n * N_STATE, n * N_MP, N_MS, n, n, n)


def law_blob(kind: int, n: int) -> np.ndarray:
    """An all-zero law blob of `kind` for n joints."""
    lb = np.zeros(L_HEADER + sum(_sizes(n)))
    lb[L_KIND], lb[L_N] = kind, n
    return lb


@kernel
def law_views(lb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                       np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                       np.ndarray]:  # fmt: skip
    """(lp, ls, pidp, pids, mp, ms, vlim, work, open_loop) as views of the blob."""
    n = int(lb[L_N])
    o = L_HEADER
    lp = lb[o : o + n * N_LP].reshape(n, N_LP)
    o += n * N_LP
    ls = lb[o : o + n * N_LS].reshape(n, N_LS)
    o += n * N_LS
    pidp = lb[o : o + n * N_PAR].reshape(n, N_PAR)
    o += n * N_PAR
    pids = lb[o : o + n * N_STATE].reshape(n, N_STATE)
    o += n * N_STATE
    mp = lb[o : o + n * N_MP].reshape(n, N_MP)
    o += n * N_MP
    ms = lb[o : o + N_MS]
    o += N_MS
    vlim = lb[o : o + n]
    work = lb[o + n : o + 2 * n]
    open_loop = lb[o + 2 * n : o + 3 * n]
    return lp, ls, pidp, pids, mp, ms, vlim, work, open_loop


@dataclass
class CompiledLaw:
    """A law's blob and the Python-side facts about it (see module doc)."""

    lb: np.ndarray
    kind: int
    drives_to_reference: bool
    open_loop: np.ndarray


def _alpha(cutoff_hz: float, period: float) -> float:
    return 1.0 - math.exp(-2 * math.pi * cutoff_hz * period) if cutoff_hz > 0 else 1.0


def _pids(pids: list[Pid], n: int, period: float) -> tuple[np.ndarray, np.ndarray]:
    par, st = pid_arrays([p.params for p in pids], period)
    for j, p in enumerate(pids):
        par[j, 14] = p._d_alpha  # exactly the Python PID's α
    return par, st


def compile_law(law: Law) -> CompiledLaw | None:
    """The compiled form of `law`, or None for a class this module does not know (that runner
    then runs on the Python path)."""
    n = law.n
    lp, ls = np.zeros((n, N_LP)), np.zeros((n, N_LS))
    model = None
    pid_list: list[Pid] = []
    if type(law) is PidLaw or type(law) is FeedforwardPid:
        pid_list = law.pids
        lp[:, DP_GAIN], lp[:, DP_ALPHA] = law.dp_gain, law.dp_alpha
        lp[:, DP_AC], lp[:, DP_AR] = law.dp_ac, law.dp_ar
    if type(law) is PidLaw:
        kind = LAW_PID
    elif type(law) is FeedforwardPid:
        kind, model = LAW_PID_FF, law.model
        lp[:, FF_MEASURED] = 1.0 if law.source == "measured" else 0.0
        lp[:, FF_ALPHA] = law._alpha
        lp[:, FF_PERIOD] = law.period
        lp[:, CF_SCALE], lp[:, CF_POS], lp[:, CF_NEG] = law.coulomb_scale, law.fc_pos, law.fc_neg
        lp[:, VC_B0], lp[:, VC_LAP] = law.valve_b0, law.valve_d
    elif type(law) is GravityCompPD:
        kind, model = LAW_GRAVITY_PD, law.model
        lp[:, GP_KP], lp[:, GP_KD], lp[:, GP_KF] = law.kp, law.kd, law.kf
        lp[:, GP_VALPHA], lp[:, GP_PERIOD] = law.vel.alpha, law.vel.period
    elif type(law) is VelocityLimitedPD:
        kind = LAW_VLPD
        lp[:, VL_KP], lp[:, VL_KD], lp[:, VL_VMAX] = law.kp, law.kd, law.vmax
        lp[:, VL_JG], lp[:, VL_VFF] = law.jg, law.vff
        lp[:, VL_VALPHA], lp[:, VL_PERIOD] = law.vel.alpha, law.period
        lp[:, VL_LEAK] = law.REF_LEAK_S
    elif type(law) is ValveSine:
        kind = LAW_VALVE_SINE
        pid_list = law.hold.pids
        lp[:, VS_AMP], lp[:, VS_FREQ] = law.amp, law.freq
        lp[:, VS_OFFSET], lp[:, VS_CENTERING] = law.offset, law.centering
    else:
        return None
    if model is not None and type(model) is not PlantModel:
        return None  # a chain's model (controller.feedforward_chain): the Python path
    lb = law_blob(kind, n)
    lp_, ls_, pidp, pids, mp, ms, vlim, _work, open_loop = law_views(lb)
    lp_[:], ls_[:] = lp, ls
    if pid_list:
        pidp[:], pids[:] = _pids(pid_list, n, pid_list[0].period)
    mp[:], ms[:] = model_arrays(model, n)
    vlim[:] = [lim.valve_max_v for lim in law.limits]
    open_loop[:] = [1.0 if x else 0.0 for x in law.open_loop][:n] + [0.0] * (n - len(law.open_loop))
    lb[L_DRIVES] = 1.0 if law.drives_to_reference else 0.0
    return CompiledLaw(lb, kind, bool(law.drives_to_reference), open_loop)


@kernel
def _clamp(vlim: np.ndarray, j: int, v: float) -> float:
    """`Law._clamp` (the count of saturations is not kept: nothing reads it)."""
    lim = vlim[j]
    if v > lim:
        return lim
    if v < -lim:
        return -lim
    return v


@kernel
def law_enable(
    lb: np.ndarray, q: np.ndarray, p_cap: np.ndarray, p_rod: np.ndarray, q_ref: np.ndarray
) -> None:
    """`Law.enable(fb, q_ref)`: bumpless start from the measured state."""
    kind = int(lb[L_KIND])
    views = law_views(lb)
    ls, pids = views[1], views[3]
    n = q.shape[0]
    if kind == LAW_PID or kind == LAW_VALVE_SINE or kind == LAW_PID_FF:
        for j in range(n):
            pid_enable(pids, j, q_ref[j], q[j])
            ls[j, DP_PREV] = math.nan  # controller.pressure_feedback.reset_state
            ls[j, DP_OUT] = 0.0
            ls[j, DP_VOLTS] = 0.0
        if kind == LAW_PID_FF:
            for j in range(n):
                ls[j, FF_FORCE_PREV] = math.nan
                ls[j, FF_PC] = p_cap[j]
                ls[j, FF_PR] = p_rod[j]
    elif kind == LAW_GRAVITY_PD:
        for j in range(n):
            ls[j, VEL_PREV] = q[j]
            ls[j, VEL_V] = 0.0
    else:  # LAW_VLPD
        for j in range(n):
            ls[j, VEL_PREV] = q[j]
            ls[j, VEL_V] = 0.0
            ls[j, VL_OUT] = 0.0
            ls[j, VL_QD_PREV] = 0.0
            ls[j, VL_R] = q[j]


@kernel
def law_disable(lb: np.ndarray) -> None:
    """`Law.disable()`: the PID family resets its integrators."""
    kind = int(lb[L_KIND])
    pids = law_views(lb)[3]
    if kind == LAW_PID or kind == LAW_VALVE_SINE or kind == LAW_PID_FF:
        for j in range(pids.shape[0]):
            pid_disable(pids, j)


@kernel
def _dp(lp: np.ndarray, ls: np.ndarray, j: int, p_cap: float, p_rod: float,
        expected_force: float) -> float:  # fmt: skip
    """`PidLaw._dp`: joint j's ΔP term, V (0 where off) — `pressure_feedback.load_force` and
    `dp_feedback_step`, the same operations in the same order."""
    gain = lp[j, DP_GAIN]
    if gain == 0.0:
        return 0.0
    force = (p_cap * lp[j, DP_AC] - p_rod * lp[j, DP_AR]) - expected_force
    if force != force:
        return 0.0
    prev = ls[j, DP_PREV]
    alpha = lp[j, DP_ALPHA]
    if alpha >= 1.0:
        y = force
    elif prev != prev:
        y = 0.0
    else:
        y = alpha * (ls[j, DP_OUT] + force - prev)
    ls[j, DP_PREV] = force
    ls[j, DP_OUT] = y
    v = -gain * y
    ls[j, DP_VOLTS] = v
    return v


# The compensation's maths compiled from its one source (controller.compensation; its file is
# in the kernel cache's hash, controller.compiled.jit).
_coulomb_force = kernel(comp.coulomb_force)
_valve_spool_of = kernel(comp.valve_spool)


@kernel
def _coulomb(lp: np.ndarray, j: int, sd: float) -> float:
    """`compensation.coulomb_force` with the law's scale and F_c± (N)."""
    return _coulomb_force(sd, lp[j, CF_POS], lp[j, CF_NEG], COULOMB_SMOOTH_M_S, lp[j, CF_SCALE])


@kernel
def _valve_spool(lp: np.ndarray, j: int, w: float) -> float:
    """`compensation.valve_spool` with the law's null offset and lap (spool units)."""
    return _valve_spool_of(w, lp[j, VC_B0], lp[j, VC_LAP])


@kernel
def _velocity_update(lp: np.ndarray, ls: np.ndarray, alpha_col: int, period_col: int,
                     q: np.ndarray) -> None:  # fmt: skip
    """`controller.laws._VelocityEstimate.update`."""
    for j in range(q.shape[0]):
        raw = (q[j] - ls[j, VEL_PREV]) / lp[j, period_col]
        ls[j, VEL_PREV] = q[j]
        ls[j, VEL_V] += lp[j, alpha_col] * (raw - ls[j, VEL_V])


@kernel
def law_update(
    lb: np.ndarray,
    t: float,
    q: np.ndarray,
    p_cap: np.ndarray,
    p_rod: np.ndarray,
    q_ref: np.ndarray,
    qd_ref: np.ndarray,
    qdd_ref: np.ndarray,
    volts_out: np.ndarray,
) -> None:
    """`Law.update(t, fb, q_ref, qd_ref, qdd_ref, volts_out)` for every kind."""
    kind = int(lb[L_KIND])
    lp, ls, pidp, pids, mp, ms, vlim, work, _ = law_views(lb)
    n = q.shape[0]
    if kind == LAW_PID:
        for j in range(n):
            v = pid_update(pidp, pids, j, q_ref[j], q[j])
            volts_out[j] = _clamp(vlim, j, v + _dp(lp, ls, j, p_cap[j], p_rod[j], 0.0))
    elif kind == LAW_VALVE_SINE:
        for j in range(n):
            amp = lp[j, VS_AMP]
            if amp == 0.0:
                v = pid_update(pidp, pids, j, q_ref[j], q[j])
            else:
                v = (
                    lp[j, VS_OFFSET]
                    + amp * math.sin(2 * math.pi * lp[j, VS_FREQ] * t)
                    + lp[j, VS_CENTERING] * (q_ref[j] - q[j])
                )
            volts_out[j] = _clamp(vlim, j, v)
    elif kind == LAW_PID_FF:
        feedforward_pid(lp, ls, pidp, pids, mp, ms, vlim, work, q, p_cap, p_rod, q_ref, qd_ref,
                        qdd_ref, volts_out)  # fmt: skip
    elif kind == LAW_GRAVITY_PD:
        _velocity_update(lp, ls, GP_VALPHA, GP_PERIOD, q)
        qd = ls[:, VEL_V]
        gravity_friction(mp, ms, q, qd, work)
        for j in range(n):
            tau = -lp[j, GP_KD] * qd[j] + lp[j, GP_KP] * (q_ref[j] - q[j]) + work[j]
            _, r = cylinder(mp, j, q[j])
            f_meas = mp[j, M_AC] * p_cap[j] - mp[j, M_AR] * p_rod[j]
            volts_out[j] = _clamp(vlim, j, lp[j, GP_KF] * (tau / r - f_meas))
    else:  # LAW_VLPD
        _velocity_update(lp, ls, VL_VALPHA, VL_PERIOD, q)
        for j in range(n):
            qd = ls[j, VEL_V]
            e = q_ref[j] - q[j]
            ratio = lp[j, VL_KP] / lp[j, VL_KD]
            denom = ratio * abs(e)
            vmax = lp[j, VL_VMAX]
            v_lim = 1.0 if denom <= vmax else vmax / denom  # Lin eq. 36
            qd_demand = ratio * v_lim * e
            qdd_star = lp[j, VL_KD] * (qd_demand - qd)  # eq. 34
            period = lp[j, VL_PERIOD]
            mem = ls[j, VL_OUT] + lp[j, VL_JG] * (qdd_star - (qd - ls[j, VL_QD_PREV]) / period)
            ls[j, VL_QD_PREV] = qd
            ff = lp[j, VL_VFF] * qd_demand
            clamped = _clamp(vlim, j, ff + mem)
            ls[j, VL_OUT] = clamped - ff
            volts_out[j] = clamped
            v_r = ratio * (q_ref[j] - ls[j, VL_R])
            v_r = vmax if v_r > vmax else -vmax if v_r < -vmax else v_r
            ls[j, VL_R] += (v_r + (q[j] - ls[j, VL_R]) / lp[j, VL_LEAK]) * period


@kernel
def feedforward_pid(
    lp: np.ndarray,
    ls: np.ndarray,
    pidp: np.ndarray,
    pids: np.ndarray,
    mp: np.ndarray,
    ms: np.ndarray,
    vlim: np.ndarray,
    tau: np.ndarray,
    q: np.ndarray,
    p_cap: np.ndarray,
    p_rod: np.ndarray,
    q_ref: np.ndarray,
    qd_ref: np.ndarray,
    qdd_ref: np.ndarray,
    volts_out: np.ndarray,
) -> None:
    """`FeedforwardPid.update`: PID + the inverse model's valve command (DESIGN §1.2)."""
    inverse_dynamics(mp, ms, q_ref, qd_ref, qdd_ref, tau)
    for j in range(q.shape[0]):
        s, r = cylinder(mp, j, q_ref[j])
        sd = r * qd_ref[j]
        force = tau[j] / r + _coulomb(lp, j, sd)
        prev = ls[j, FF_FORCE_PREV]
        fdot = 0.0 if prev != prev else (force - prev) / lp[j, FF_PERIOD]
        ls[j, FF_FORCE_PREV] = force
        pc, pr = ls[j, FF_PC], ls[j, FF_PR]
        mc, mr = p_cap[j], p_rod[j]
        if mc == mc and mr == mr:
            pc = mc if pc != pc else pc + lp[j, FF_ALPHA] * (mc - pc)
            ls[j, FF_PC] = pc
            pr = mr if pr != pr else pr + lp[j, FF_ALPHA] * (mr - pr)
            ls[j, FF_PR] = pr
        if lp[j, FF_MEASURED] != 0.0 and pc == pc and pr == pr:
            pdot = fdot / (mp[j, M_AC] + mp[j, M_AR])
            u = spool_measured(mp, ms, j, s, sd, pdot, -pdot, pc, pr)
        else:
            u = spool_steady(mp, ms, j, force, sd)
        ff = u / mp[j, M_KV]
        ls[j, FF_VOLTS] = ff
        dp = _dp(lp, ls, j, p_cap[j], p_rod[j], force)  # on what the model did not ask for
        v = pid_update(pidp, pids, j, q_ref[j], q[j]) + ff + dp
        kv = mp[j, M_KV]
        volts_out[j] = _clamp(vlim, j, v + (_valve_spool(lp, j, v * kv) / kv - v))


@kernel
def law_reference_out(lb: np.ndarray, ref_out: np.ndarray) -> None:
    """`Law.reference_out`: the velocity-limited PD's moving reference."""
    ls = law_views(lb)[1]
    if int(lb[L_KIND]) == LAW_VLPD:
        for j in range(ref_out.shape[0]):
            ref_out[j] = ls[j, VL_R]
