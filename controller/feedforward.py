"""Scalar plant model for the loop: inverse dynamics and the valve's inverse (DESIGN §1–2).

`controller.plant.dynamics` is vectorised numpy (it allocates); this is the same physics in
scalar float maths for one cycle of at most two joints, so that the feed-forward allocates
nothing. Tests check it against `controller.plant.dynamics`.

Valve inverse (DESIGN §1.2). With the flow equations solved for the spool u, for u > 0

    Cf⁺⁺ √(ps − p⁺) u = A⁺ ṡ + V⁺ ṗ⁺ / b        (oil into the cap side)
    Cf⁻⁺ √p⁻        u = A⁻ ṡ − V⁻ ṗ⁻ / b        (oil out of the rod side)

(u < 0: Cf⁺⁻ √p⁺ and Cf⁻⁻ √(ps − p⁻)). Adding both gives u from the required piston velocity,
the measured pressures and the pressure rates that the required force change needs; the
command is then v = u / k_v. Without measured pressures ("model" source) the steady state is
solved in closed form from the required force F = τ / r (compressibility neglected):

    u > 0:  A⁺ps − F = K⁺ ṡ² / u²,   K⁺ = A⁺³/Cf⁺⁺² + A⁻³/Cf⁻⁺²
    u < 0:  F + A⁻ps = K⁻ ṡ² / u²,   K⁻ = A⁺³/Cf⁺⁻² + A⁻³/Cf⁻⁻²
"""

from __future__ import annotations

import math
from collections.abc import MutableSequence
from typing import Any

_EPS_H = 1.0  # √Pa: below this a flow path is treated as closed (avoid division by ~0)
#: v_ε (m/s of piston velocity) of the Coulomb term's smooth sign: the estimator's
#: `estimator.models_lin.SMOOTH_SIGN_M_S`, so the controller compensates the friction exactly
#: as it was identified (a test holds the two equal; controller cannot import the estimator).
COULOMB_SMOOTH_M_S = 5.0e-3


class PlantModel:
    """Per-joint floats taken once from a `PlantParams`; all methods are scalar maths."""

    def __init__(self, params: Any) -> None:
        n = int(params.n)
        if n not in (1, 2):
            raise ValueError(f"PlantModel supports 1 or 2 joints, got {n}")
        f = lambda name: [float(x) for x in getattr(params, name)]  # noqa: E731
        self.n = n
        self.g = float(params.gravity)
        self.ps = float(params.supply_pressure)
        self.b = float(params.bulk_modulus)
        self.r12 = float(params.coupling) if n == 2 else 0.0
        self.M, self.Fv, self.W = f("inertia"), f("viscous_friction"), f("gravity_moment")
        self.Ac, self.Ar, self.V0 = f("area_cap"), f("area_rod"), f("dead_volume")
        self.L, self.pa, self.pb = f("stroke"), f("pin_a"), f("pin_b")
        self.lc, self.th0 = f("closed_length"), f("theta0")
        self.kv, self.umax = f("valve_gain"), f("spool_max")
        self.cf = [[float(x) for x in row] for row in params.flow_gains]
        fl = getattr(params, "friction_lin", None)
        #: Lin's friction per joint [Fv⁺, Fv⁻, Fc⁺, Fc⁻] from the parameter file, else None
        self.lin = None if fl is None else [[float(x) for x in row] for row in fl]
        vs = getattr(params, "valve_structure", None)
        #: The valve's identified null offset b₀ and lap d per joint (spool units), else None.
        self.valve_null = None if vs is None else [float(row[0]) for row in vs]
        self.valve_lap = None if vs is None else [float(row[1]) for row in vs]
        self._steady_constants()

    def _steady_constants(self) -> None:
        """K⁺, K⁻ of the steady-state valve inverse (module doc) from the areas and gains."""
        self.k_ext = [
            self.Ac[j] ** 3 / self.cf[j][0] ** 2 + self.Ar[j] ** 3 / self.cf[j][2] ** 2
            for j in range(self.n)
        ]
        self.k_ret = [
            self.Ac[j] ** 3 / self.cf[j][1] ** 2 + self.Ar[j] ** 3 / self.cf[j][3] ** 2
            for j in range(self.n)
        ]

    # ------------------------------------------------------------------ mechanics
    def cylinder(self, j: int, q: float) -> tuple[float, float]:
        """Piston displacement from mid-stroke s (m) and moment arm r = ds/dq (m/rad)."""
        a, b = self.pa[j], self.pb[j]
        th = q + self.th0[j]
        ell = math.sqrt(a * a + b * b - 2.0 * a * b * math.cos(th))
        return ell - (self.lc[j] + 0.5 * self.L[j]), a * b * math.sin(th) / ell

    def inverse_dynamics(self, q: Any, qd: Any, qdd: Any, tau: MutableSequence[float]) -> None:
        """τ = M(q) q̈ + c(q, q̇) + Fv q̇ + g(q)  (DESIGN §1.1)."""
        g = self.g
        if self.n == 1:
            tau[0] = self.M[0] * qdd[0] + self.Fv[0] * qd[0] + self.W[0] * g * math.sin(q[0])
            return
        q1, q2, d1, d2, a1, a2 = q[0], q[1], qd[0], qd[1], qdd[0], qdd[1]
        R, c2, s2 = self.r12, math.cos(q2), math.sin(q2)
        g12 = self.W[1] * g * math.sin(q1 + q2)
        tau[0] = (
            (self.M[0] + 2 * R * c2) * a1
            + (self.M[1] + R * c2) * a2
            - R * s2 * (2 * d1 * d2 + d2 * d2)
            + self.Fv[0] * d1
            + self.W[0] * g * math.sin(q1)
            + g12
        )
        tau[1] = (
            (self.M[1] + R * c2) * a1 + self.M[1] * a2 + R * d1 * d1 * s2 + self.Fv[1] * d2 + g12
        )

    def gravity_friction(self, q: Any, qd: Any, tau: MutableSequence[float]) -> None:
        """Lin eq. 37's compensation i_i: gravity plus friction torques — the reference model's
        viscous Fv q̇, or with Lin's friction (`friction_lin`) seed 001 eq. 20 as the
        estimator identifies it: Fv± q̇ + Fc± r σ(ṡ), ṡ = r q̇, ± by the sign of ṡ, σ the
        smooth sign tanh(ṡ / v_ε) of estimator/models_lin.py (`COULOMB_SMOOTH_M_S`)."""
        g = self.g
        if self.n == 1:
            tau[0] = self.W[0] * g * math.sin(q[0]) + self.friction(0, q[0], qd[0])
            return
        g12 = self.W[1] * g * math.sin(q[0] + q[1])
        tau[0] = self.W[0] * g * math.sin(q[0]) + g12 + self.friction(0, q[0], qd[0])
        tau[1] = g12 + self.friction(1, q[1], qd[1])

    def friction(self, j: int, q: float, qd: float) -> float:
        """Joint j's friction torque at (q, q̇) (see `gravity_friction`)."""
        if self.lin is None:
            return self.Fv[j] * qd
        fv_p, fv_m, fc_p, fc_m = self.lin[j]
        _, r = self.cylinder(j, q)
        sd = r * qd
        sgn = math.tanh(sd / COULOMB_SMOOTH_M_S)
        return (fv_p * qd + fc_p * r * sgn) if sd >= 0.0 else (fv_m * qd + fc_m * r * sgn)

    # ------------------------------------------------------------------ valve inverse
    def chamber_volumes(self, j: int, s: float) -> tuple[float, float]:
        """V⁺, V⁻ (m³) of joint j's chambers at piston displacement s from mid-stroke."""
        return (
            self.V0[j] + (0.5 * self.L[j] + s) * self.Ac[j],
            self.V0[j] + (0.5 * self.L[j] - s) * self.Ar[j],
        )

    def spool_measured(
        self, j: int, s: float, sd: float, pd_cap: float, pd_rod: float, p_cap: float, p_rod: float
    ) -> float:
        """Spool u (LVDT V) that delivers ṡ and the pressure rates at the measured pressures."""
        ac, ar, ps, cf = self.Ac[j], self.Ar[j], self.ps, self.cf[j]
        vc, vr = self.chamber_volumes(j, s)
        need = (ac + ar) * sd + (vc * pd_cap - vr * pd_rod) / self.b
        pc = min(max(p_cap, 0.0), ps)
        pr = min(max(p_rod, 0.0), ps)
        if need >= 0.0:
            gain = cf[0] * max(math.sqrt(ps - pc), _EPS_H) + cf[2] * max(math.sqrt(pr), _EPS_H)
        else:
            gain = cf[1] * max(math.sqrt(pc), _EPS_H) + cf[3] * max(math.sqrt(ps - pr), _EPS_H)
        return need / gain

    def spool_steady(self, j: int, force: float, sd: float) -> float:
        """Steady-state spool for piston velocity ṡ against net piston force F (closed form)."""
        ps = self.ps
        if sd >= 0.0:
            margin = max(self.Ac[j] * ps - force, 1e-3 * self.Ac[j] * ps)
            return sd * math.sqrt(self.k_ext[j] / margin)
        margin = max(force + self.Ar[j] * ps, 1e-3 * self.Ar[j] * ps)
        return sd * math.sqrt(self.k_ret[j] / margin)

    def max_piston_speed(self, j: int, force: float, spool: float) -> tuple[float, float]:
        """Steady-state piston speed reachable at |u| = spool: (extending, retracting) ≥ 0."""
        ext = max(self.Ac[j] * self.ps - force, 0.0)
        ret = max(force + self.Ar[j] * self.ps, 0.0)
        return spool * math.sqrt(ext / self.k_ext[j]), spool * math.sqrt(ret / self.k_ret[j])
