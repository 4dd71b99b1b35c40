"""Load-pressure (ΔP) feedback: the per-cycle maths, as numba-compatible pure functions.

A valve-controlled cylinder is a mass on an oil spring: the hydraulic resonance (DESIGN §1.2,
`controller.hydraulic_linear.hydraulic_mode`) is barely damped, because a critically lapped
valve at null has no flow-pressure coefficient and the seals' viscous friction is small. The
position loop's gain is then capped near 2ζ_h·ω_h (the reason the reference rig's profile holds
p = 2 V/rad). Feeding the load force back into the valve command,

    v −= k_Δp · HP(F_L − F_expected),    F_L = p_cap·A_cap − p_rod·A_rod   (N)

makes the valve pass flow in proportion to the load pressure: an artificial flow-pressure
coefficient K_q·k_Δp·A (m³/s per Pa) that damps the oil column the way leakage would, without
wasting oil (Merritt §5; MTS's "delta-P" stabilisation). With the resonance damped the position
gain can rise.

Why high-passed: the load force of a held joint is its gravity load (hundreds of N), and fed
back unfiltered it is a position offset k_Δp·F_g/k_p — on the reference rig 1 V/kN × 500 N at
2 V/rad is 14°. Only the dynamic part, around the hydraulic resonance (5–15 Hz), needs damping,
so the force is high-passed with a corner (`dp_hp_hz`, typically 0.5–2 Hz) well below it; a
corner of 0 feeds the raw force back (for a rig with no static load, or a force-controlled
joint). A model-based law subtracts the force its inverse model expects for the reference
motion (`F_expected`), so that ΔP feedback opposes only what the model did not ask for.

Per cycle nothing is allocated: the filter's state is a float array (n joints × 2) made once.
These functions take and return floats and write into that array only, so the loop's compiled
(numba) path can call them as they are.
"""

from __future__ import annotations

import math

import numpy as np

#: State columns per joint: the filter's previous input and its output.
HP_PREV, HP_OUT = 0, 1


def new_state(n: int) -> np.ndarray:
    """The high-pass state of `n` joints (NaN previous input: start from the first sample)."""
    s = np.zeros((n, 2))
    s[:, HP_PREV] = np.nan
    return s


def load_force(p_cap: float, p_rod: float, area_cap: float, area_rod: float) -> float:
    """Net piston force of the pressures, N (NaN if either pressure is NaN)."""
    return p_cap * area_cap - p_rod * area_rod


def highpass_coefficient(corner_hz: float, period: float) -> float:
    """α of the first-order high-pass y_k = α (y_{k−1} + x_k − x_{k−1}); 1 (no filter) at 0 Hz."""
    if corner_hz <= 0.0:
        return 1.0
    tau = 1.0 / (2.0 * math.pi * corner_hz)
    return tau / (tau + period)


def dp_feedback_step(
    state: np.ndarray, j: int, force: float, gain_v_per_n: float, alpha: float
) -> float:
    """One cycle of joint j's ΔP term, volts: −gain · HP(force).

    `alpha` = 1 is the unfiltered force (no high-pass). A NaN force (no channel, a dropped
    sample) returns 0 V and leaves the filter as it was; the first sample after `reset_state`
    starts the high-pass from zero output (bumpless)."""
    if force != force:
        return 0.0
    prev = state[j, HP_PREV]
    if alpha >= 1.0:
        y = force
    elif prev != prev:
        y = 0.0
    else:
        y = alpha * (state[j, HP_OUT] + force - prev)
    state[j, HP_PREV] = force
    state[j, HP_OUT] = y
    return -gain_v_per_n * y


def reset_state(state: np.ndarray, j: int) -> None:
    """Forget joint j's history (at enable): the next sample starts the filter."""
    state[j, HP_PREV] = np.nan
    state[j, HP_OUT] = 0.0
