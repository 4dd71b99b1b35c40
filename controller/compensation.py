"""Friction and valve compensation from the identified parameters: the per-cycle maths, as
numba-compatible pure functions (floats in, a float out; nothing allocated).

Coulomb feed-forward (Lin's friction, seed 001 eq. 20, as `estimator.models_lin` identifies
it): the piston force F_c± σ(ṡ), σ(ṡ) = tanh(ṡ / v_ε), ± by the sign of the reference's piston
velocity ṡ, with v_ε the band the estimator identified it with
(`controller.feedforward.COULOMB_SMOOTH_M_S`). The feed-forward adds it to the force the valve
must deliver: without it, the position error has to build up F_c/k before the seals let go at
every reversal, which is most of what is left of a model-based tracker's error on a rig with
real seals. `scale` switches it (0 = off, 1 = the identified force; a stiction allowance is
a scale above 1, bounded by `MAX_SCALE`).

Valve null and lap (the valve of DESIGN §1.2 as `controller.plant.dynamics.valve_edges` and
`estimator.models_lin` model it): the metering edges see w = u + b₀ (b₀ the null offset) and
edge e opens max(s_e w − d, 0), d the lap (> 0 overlap: a dead band; < 0 underlap: both edges
of a chamber open around null). A chamber's net opening is then
    w − d·sign(w)  for |w| > |d|,    2w (underlap) or 0 (overlap)  for |w| ≤ |d|,
so the laws, which reckon with a centred, zero-lapped valve, see a dead band or a doubled gain
around null and a step of ±|d| beyond it. `valve_spool` inverts that: for a wanted opening w
it returns the spool command
    x = w + d·clip(w / 2|d|, −1, 1) − b₀   (underlap: the exact inverse, continuous)
    x = w + d·tanh(2w / d) − b₀            (overlap: smoothed, since the exact inverse jumps by
                                            2d at w = 0 and would chatter the spool; a dead
                                            band of |w| < 0.37 d is left of the valve's |w| < d,
                                            and the gain at null is 3×, not infinite)
whose correction is bounded by |d| + |b₀|. The batch identifies b₀ and d by its structure
search (`[structure]` of its parameter file, `estimator.structure`): b₀ is the identification
run's mean null, at that run's oil temperature (a servo valve's null drifts ~0.05 % of travel
per kelvin).
"""

from __future__ import annotations

import math

#: Largest Coulomb feed-forward scale accepted: stiction of real seals is 1.2–1.5 × Coulomb
#: (docs/simulator.md); more than twice the identified force would be guessing.
MAX_SCALE = 2.0
#: Largest null offset and lap accepted, spool units (V of the LVDT): 5 % of a 1.4 V travel,
#: ten times a servo valve's trimmed null bias or underlap (docs/simulator.md). A wider one is
#: not a lap but a wrong file, and inverting it would throw the spool about.
MAX_VALVE_OFFSET = 0.07


def coulomb_force(sd: float, fc_pos: float, fc_neg: float, v_eps: float, scale: float) -> float:
    """Piston Coulomb force at piston velocity ṡ (m/s), N: scale·F_c± tanh(ṡ/v_ε)."""
    if scale == 0.0 or v_eps <= 0.0:
        return 0.0
    fc = fc_pos if sd >= 0.0 else fc_neg
    return scale * fc * math.tanh(sd / v_eps)


def valve_spool(w: float, b0: float, lap: float) -> float:
    """Spool command (LVDT volts) that opens the metering edges as a centred, zero-lapped valve
    would at w: w + d·clip(w/2|d|) (underlap) or w + d·tanh(2w/d) (overlap), minus b₀ (module
    doc). b₀ = d = 0 gives w back exactly."""
    x = w
    if lap < 0.0:
        r = w / (-2.0 * lap)
        x = w + lap * (1.0 if r > 1.0 else -1.0 if r < -1.0 else r)
    elif lap > 0.0:
        x = w + lap * math.tanh(2.0 * w / lap)
    return x - b0
