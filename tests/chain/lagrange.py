"""An independent formulation of a chain's rigid-body dynamics: the Lagrangian of every body
(major links, cylinders, pistons) built with sympy.physics.mechanics from the same
description, and Lagrange's equations τ = d/dt ∂L/∂q̇ − ∂L/∂q. It shares no code with
`controller.plant.chain.rnea`: positions come from mechanics' frames and points, the jack's
turn from atan2 of its pin-to-pin vector, velocities and accelerations from sympy's
differentiation."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import sympy as sp
import sympy.physics.mechanics as me

from controller.plant.chain.model import Chain


def lagrange_inverse_dynamics(
    chain: Chain,
) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    n = chain.n
    t = me.dynamicsymbols._t
    q = me.dynamicsymbols(f"q0:{n}")
    qd = [qi.diff(t) for qi in q]
    world = me.ReferenceFrame("W")
    origin = me.Point("O")
    origin.set_vel(world, 0)
    g = sum(
        (c * v for c, v in zip(chain.gravity, (world.x, world.y, world.z), strict=True)),
        sp.S(0) * world.x,
    )
    bodies = []
    parent_frame, parent_point = world, origin

    def moving_point(name: str, base: me.Point, offset: me.Vector) -> me.Point:
        p = base.locatenew(name, offset)
        p.set_vel(world, p.pos_from(origin).dt(world))
        return p

    def add_body(name, frame, point, mass, inertia_dyadic):  # type: ignore[no-untyped-def]
        body = me.RigidBody(name, point, frame, mass, (inertia_dyadic, point))
        body.potential_energy = -mass * me.dot(g, point.pos_from(origin))
        bodies.append(body)

    for i, joint in enumerate(chain.joints):
        lk = joint.link
        fi = me.ReferenceFrame(f"F{i}")
        fi.orient_axis(parent_frame, parent_frame.z, q[i] + lk.dh.theta_offset)
        fi.set_ang_vel(parent_frame, qd[i] * parent_frame.z)
        com = moving_point(
            f"C{i}", parent_point, lk.com[0] * fi.x + lk.com[1] * fi.y + lk.com[2] * fi.z
        )
        ixx, iyy, izz, ixy, ixz, iyz = lk.inertia
        add_body(f"link{i}", fi, com, lk.mass, me.inertia(fi, ixx, iyy, izz, ixy, iyz, ixz))
        if isinstance(joint.drive, tuple):
            for k, jack in enumerate(joint.drive):
                a = moving_point(
                    f"A{i}{k}", parent_point,
                    _in_frame_before(chain, i, parent_frame, jack.pin_parent),
                )  # fmt: skip
                b = moving_point(f"B{i}{k}", parent_point, sum(
                    (c * v for c, v in zip(jack.pin_child, (fi.x, fi.y, fi.z), strict=True)),
                    sp.S(0) * fi.x,
                ))  # fmt: skip
                d = b.pos_from(a).to_matrix(parent_frame)
                ell = sp.sqrt(d[0] ** 2 + d[1] ** 2 + d[2] ** 2)
                u = b.pos_from(a) / ell
                jf = me.ReferenceFrame(f"J{i}{k}")
                # The jack turns about the joint axis: its x along u (pins in one plane).
                jf.orient_axis(parent_frame, parent_frame.z, sp.atan2(d[1], d[0]))
                for tag, body, at, sign in (
                    ("cyl", jack.cylinder, a, 1.0),
                    ("pis", jack.piston, b, -1.0),
                ):
                    if body.mass == 0.0 and body.inertia_transverse == 0.0:
                        continue
                    p = moving_point(f"{tag}{i}{k}", at, sign * body.distance * u)
                    inertia = me.inertia(
                        jf, body.inertia_axial, body.inertia_transverse, body.inertia_transverse
                    )
                    add_body(f"{tag}{i}{k}", jf, p, body.mass, inertia)
        # Frame i: C = Trans(z, d) Trans(x, a) Rot(x, α) Rot(y, β), as thesis eq. 3.8.
        nxt = me.ReferenceFrame(f"D{i}")
        nxt.orient_body_fixed(fi, (lk.dh.alpha, lk.dh.beta, 0), "XYZ")
        parent_point = parent_point.locatenew(f"O{i + 1}", lk.dh.a * fi.x + lk.dh.d * fi.z)
        parent_frame = nxt

    lagrangian = me.Lagrangian(world, *bodies)
    syms_q = sp.symbols(f"x0:{n}")
    syms_qd = sp.symbols(f"v0:{n}")
    syms_qdd = sp.symbols(f"a0:{n}")
    # L(q, q̇) on plain symbols (xreplace: q̇ is replaced as a whole before q inside it), then
    # Lagrange's equations with d/dt by the chain rule: Σ_j ∂(∂L/∂q̇_k)/∂q_j q̇_j + …/∂q̇_j q̈_j.
    plain = lagrangian.xreplace(dict(zip(qd, syms_qd, strict=True))).xreplace(
        dict(zip(q, syms_q, strict=True))
    )
    exprs = []
    for k in range(n):
        dl = sp.diff(plain, syms_qd[k])
        ddt = sum(
            sp.diff(dl, syms_q[j]) * syms_qd[j] + sp.diff(dl, syms_qd[j]) * syms_qdd[j]
            for j in range(n)
        )
        exprs.append(ddt - sp.diff(plain, syms_q[k]))
    fn = sp.lambdify([syms_q, syms_qd, syms_qdd], exprs, modules="numpy", cse=True)

    def tau(x: np.ndarray, v: np.ndarray, a: np.ndarray) -> np.ndarray:
        return np.array(fn(list(x), list(v), list(a)), dtype=float)

    return tau


def _in_frame_before(
    chain: Chain, i: int, frame: me.ReferenceFrame, p: tuple[float, float, float]
) -> me.Vector:
    """A point given in frame i−1 (the D-H frame whose z is joint i's axis)."""
    return p[0] * frame.x + p[1] * frame.y + p[2] * frame.z
