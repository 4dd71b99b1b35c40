"""`controller.pid.Pid` as compiled code over arrays: one row per joint.

Parameters `par[j, P_*]` (the `PidParams` fields plus the derivative filter's α and the period),
state `st[j, S_*]` (the `Pid` attributes). `pid_update` is `Pid.update` line for line — the same
operations in the same order, so both give the same numbers; tests/controller/test_compiled.py
runs them side by side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from controller.compiled.jit import kernel
from controller.pid import PidParams

# Parameter columns.
P_P, P_I, P_D, P_FF0, P_FF1, P_FF2, P_BIAS, P_DEADBAND = 0, 1, 2, 3, 4, 5, 6, 7
P_MAX_OUTPUT, P_MAX_ERROR, P_MAX_ERROR_I, P_MAX_ERROR_D, P_MAX_CMD_D, P_MAX_I = 8, 9, 10, 11, 12, 13
P_D_ALPHA, P_DT = 14, 15
N_PAR = 16
# State columns.
S_ENABLED, S_ERROR, S_ERROR_I, S_ERROR_D, S_CMD_D, S_CMD_DD, S_OUTPUT, S_LIMIT = (
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7,
)
S_SATURATED, S_SATURATED_S, S_SATURATED_COUNT, S_PREV_CMD, S_PREV_FB = 8, 9, 10, 11, 12
N_STATE = 13

_INT32_MAX = 2_147_483_647.0


def pid_arrays(gains: Sequence[PidParams], period: float) -> tuple[np.ndarray, np.ndarray]:
    """(par, st) for one PID per joint, as `controller.pid.Pid(g, period)` builds them."""
    n = len(gains)
    par = np.zeros((n, N_PAR))
    for j, g in enumerate(gains):
        par[j, :14] = (
            g.p, g.i, g.d, g.ff0, g.ff1, g.ff2, g.bias, g.deadband, g.max_output, g.max_error,
            g.max_error_i, g.max_error_d, g.max_cmd_d, g.max_i,
        )  # fmt: skip
        par[j, P_D_ALPHA] = (
            1.0 - math.exp(-2.0 * math.pi * g.d_filter_hz * period) if g.d_filter_hz > 0.0 else 1.0
        )
        par[j, P_DT] = period
    return par, np.zeros((n, N_STATE))


@kernel
def pid_enable(st: np.ndarray, j: int, command: float, feedback: float) -> None:
    """`Pid.enable`: bumpless, histories from the present values, integrator empty."""
    st[j, S_ENABLED] = 1.0
    st[j, S_PREV_CMD] = command
    st[j, S_PREV_FB] = feedback
    st[j, S_ERROR_I] = 0.0
    st[j, S_ERROR_D] = 0.0
    st[j, S_CMD_D] = 0.0
    st[j, S_CMD_DD] = 0.0
    st[j, S_LIMIT] = 0.0


@kernel
def pid_disable(st: np.ndarray, j: int) -> None:
    """`Pid.disable`."""
    st[j, S_ENABLED] = 0.0
    st[j, S_ERROR_I] = 0.0
    st[j, S_OUTPUT] = 0.0
    st[j, S_LIMIT] = 0.0
    st[j, S_SATURATED] = 0.0
    st[j, S_SATURATED_S] = 0.0
    st[j, S_SATURATED_COUNT] = 0.0


@kernel
def pid_update(par: np.ndarray, st: np.ndarray, j: int, command: float, feedback: float) -> float:
    """`Pid.update` (controller/pid.py): one cycle of joint j's PID; returns the output."""
    dt = par[j, P_DT]
    e = command - feedback
    st[j, S_ERROR] = e
    lim = par[j, P_MAX_ERROR]
    if lim != 0.0:
        e = lim if e > lim else (-lim if e < -lim else e)
    db = par[j, P_DEADBAND]
    e = e - db if e > db else (e + db if e < -db else 0.0)
    enabled = st[j, S_ENABLED] != 0.0
    error_i = st[j, S_ERROR_I]
    if enabled:
        if e * st[j, S_LIMIT] <= 0.0:
            error_i += e * dt
        lim = par[j, P_MAX_ERROR_I]
        if lim != 0.0:
            error_i = lim if error_i > lim else (-lim if error_i < -lim else error_i)
    else:
        error_i = 0.0
    st[j, S_ERROR_I] = error_i
    error_d = st[j, S_ERROR_D] + par[j, P_D_ALPHA] * (
        (st[j, S_PREV_FB] - feedback) / dt - st[j, S_ERROR_D]
    )
    st[j, S_PREV_FB] = feedback
    lim = par[j, P_MAX_ERROR_D]
    if lim != 0.0:
        error_d = lim if error_d > lim else (-lim if error_d < -lim else error_d)
    st[j, S_ERROR_D] = error_d
    prev_cmd_d = st[j, S_CMD_D]
    cmd_d = (command - st[j, S_PREV_CMD]) / dt
    lim = par[j, P_MAX_CMD_D]
    if lim != 0.0:
        cmd_d = lim if cmd_d > lim else (-lim if cmd_d < -lim else cmd_d)
    st[j, S_CMD_D] = cmd_d
    st[j, S_PREV_CMD] = command
    cmd_dd = (cmd_d - prev_cmd_d) / dt
    st[j, S_CMD_DD] = cmd_dd
    limit_state = 0.0
    if enabled:
        i_term = par[j, P_I] * error_i
        lim = par[j, P_MAX_I]
        if lim != 0.0:
            i_term = lim if i_term > lim else (-lim if i_term < -lim else i_term)
        out = (
            par[j, P_BIAS]
            + par[j, P_P] * e
            + i_term
            + par[j, P_D] * error_d
            + par[j, P_FF0] * command
            + par[j, P_FF1] * cmd_d
            + par[j, P_FF2] * cmd_dd
        )
        lim = par[j, P_MAX_OUTPUT]
        if lim != 0.0:
            if out > lim:
                out, limit_state = lim, 1.0
            elif out < -lim:
                out, limit_state = -lim, -1.0
    else:
        out = 0.0
    st[j, S_LIMIT] = limit_state
    st[j, S_OUTPUT] = out
    if limit_state != 0.0:
        st[j, S_SATURATED] = 1.0
        st[j, S_SATURATED_S] += dt
        if st[j, S_SATURATED_COUNT] < _INT32_MAX:
            st[j, S_SATURATED_COUNT] += 1.0
    else:
        st[j, S_SATURATED] = 0.0
        st[j, S_SATURATED_S] = 0.0
        st[j, S_SATURATED_COUNT] = 0.0
    return out
