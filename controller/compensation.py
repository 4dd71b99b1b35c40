"""Friction compensation from the identified parameters: the per-cycle maths, as
numba-compatible pure functions (floats in, a float out; nothing allocated).

Coulomb feed-forward (Lin's friction, seed 001 eq. 20, as `estimator.models_lin` identifies
it): the piston force F_c± σ(ṡ), σ(ṡ) = tanh(ṡ / v_ε), ± by the sign of the reference's piston
velocity ṡ, with v_ε the band the estimator identified it with
(`controller.feedforward.COULOMB_SMOOTH_M_S`). The feed-forward adds it to the force the valve
must deliver: without it, the position error has to build up F_c/k before the seals let go at
every reversal, which is most of what is left of a model-based tracker's error on a rig with
real seals. `scale` switches it (0 = off, 1 = the identified force; a stiction allowance is
a scale above 1, bounded by `MAX_SCALE`).
"""

from __future__ import annotations

import math

#: Largest Coulomb feed-forward scale accepted: stiction of real seals is 1.2–1.5 × Coulomb
#: (docs/simulator.md); more than twice the identified force would be guessing.
MAX_SCALE = 2.0


def coulomb_force(sd: float, fc_pos: float, fc_neg: float, v_eps: float, scale: float) -> float:
    """Piston Coulomb force at piston velocity ṡ (m/s), N: scale·F_c± tanh(ṡ/v_ε)."""
    if scale == 0.0 or v_eps <= 0.0:
        return 0.0
    fc = fc_pos if sd >= 0.0 else fc_neg
    return scale * fc * math.tanh(sd / v_eps)
