"""Today's 1- and 2-DOF plant (`PlantParams`, DESIGN §1.1) as an instance of the chain.

The planar arm's mechanics has the base parameters M1, M2, R12, W1, W2 (DESIGN §2.1):
M11 = M1 + 2 R12 cos q2, M12 = M2 + R12 cos q2, M22 = M2, g = [W1 g sin q1 + W2 g sin(q1+q2),
W2 g sin(q1+q2)]. A chain of two links with parallel axes and gravity along frame 0's x
(so q = 0 hangs down) reproduces them with link 1 of length ℓ1 = R12/W2, link 2 with its
first moment W2 on its x axis at ℓ1 (mass m2 = W2/ℓ1) and inertia about its joint M2,
link 1 with first moment W1 − m2 ℓ1 and inertia about its joint M1 − M2 − m2 ℓ1². Any such
split gives the same numbers: only the base parameters enter the dynamics.

Each cylinder is a massless jack with pins a (on the parent, along its x) and b (on the child
at θ0 from its x), so ℓ² = a² + b² − 2ab cos(q + θ0) as `controller.plant.dynamics.piston`.
"""

from __future__ import annotations

import math

from controller.plant.chain.model import DH, Chain, Jack, Joint, Link, Valve
from controller.plant.params import PlantParams


def _inertia_zz(i_zz: float) -> tuple[float, float, float, float, float, float]:
    return (0.0, 0.0, i_zz, 0.0, 0.0, 0.0)


def chain_from_planar(p: PlantParams) -> Chain:
    """The chain whose dynamics equal the n-joint (n = 1, 2) `PlantParams` plant's."""
    g = p.gravity
    if p.n == 1:
        # One link: mass W1 at unit distance (first moment W1), inertia about the joint M1.
        links = [(0.0, float(p.gravity_moment[0]), 1.0, p.inertia[0] - p.gravity_moment[0])]
    else:
        w2 = float(p.gravity_moment[1])
        if w2 == 0.0:
            raise ValueError("W2 = 0: the 2-DOF plant then has no chain with R12 ≠ 0")
        l1 = p.coupling / w2
        m2 = w2 / l1
        j1 = p.inertia[0] - p.inertia[1] - m2 * l1 * l1
        m1c = p.gravity_moment[0] - m2 * l1
        # (a, mass, com x, inertia about the com): link 1 has mass 1 at x = m1c.
        links = [
            (l1, 1.0, m1c, j1 - m1c * m1c),
            (0.0, m2, l1, p.inertia[1] - m2 * l1 * l1),
        ]
    joints = []
    for i, (a, mass, cx, izz) in enumerate(links):
        valve = Valve(
            flow_gains=tuple(float(c) for c in p.flow_gains[i]),  # type: ignore[arg-type]
            gain=float(p.valve_gain[i]),
            tau=float(p.valve_tau[i]),
            spool_max=float(p.spool_max[i]),
            dead_volume=float(p.dead_volume[i]),
        )
        # Pin A on the parent along frame i−1's x, B on the child at θ0 from its x.
        pa, pb, th0 = float(p.pin_a[i]), float(p.pin_b[i]), float(p.theta0[i])
        jack = Jack(
            pin_parent=(pa, 0.0, 0.0),
            pin_child=(pb * math.cos(th0), pb * math.sin(th0), 0.0),
            closed_length=float(p.closed_length[i]),
            stroke=float(p.stroke[i]),
            area_cap=float(p.area_cap[i]),
            area_rod=float(p.area_rod[i]),
        )
        link = Link(
            name=f"j{i + 1}",
            dh=DH(a=a),
            mass=mass,
            com=(cx, 0.0, 0.0),
            inertia=_inertia_zz(izz),
            viscous_friction=float(p.viscous_friction[i]),
        )
        joints.append(Joint(link=link, drive=(jack,), valve=valve))
    return Chain(
        joints=tuple(joints),
        gravity=(g, 0.0, 0.0),
        supply_pressure=p.supply_pressure,
        bulk_modulus=p.bulk_modulus,
        relief_ratio=p.relief_ratio,
        relief_gain=p.relief_gain,
    )
