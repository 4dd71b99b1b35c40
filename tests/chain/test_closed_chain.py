"""The jacks close their triangles: along a driven excavator trajectory the jack length the
dynamics use equals the pin-to-pin distance of the links' forward kinematics (numpy 4×4
transforms, an independent statement of the geometry) to 1e-9 m, its derivative ℓ′ equals
the pin's velocity along the jack, and the sealed chambers' oil tracks the same length."""

from __future__ import annotations

import numpy as np

from controller.plant.chain.kinematics import jack_pins, joint_frames, link_frames
from controller.plant.chain.plant import ChainPlant, equilibrium_state, stroke_limits
from controller.plant.chain.profile import ChainProfile


def _trajectory(plant: ChainPlant, home: np.ndarray, seconds: float = 3.0):  # type: ignore[no-untyped-def]
    """States of the excavator driven by opening each valve in turn (constraints on)."""
    n = plant.n
    x = equilibrium_state(plant, home, 5.0e6)
    for k in range(int(seconds / 0.01)):
        t = k * 0.01
        v = np.array([2.0 * np.sin(2.0 * t + i) for i in range(n)])
        plant.integrate(x, v, 0.01, 20)
        yield x.copy()


def test_jack_length_is_the_pin_distance(excavator: ChainProfile) -> None:
    plant = ChainPlant(excavator.chain)
    worst = 0.0
    moved = np.zeros(plant.n)
    for x in _trajectory(plant, excavator.home):
        q = x[: plant.n]
        moved = np.maximum(moved, np.abs(q - excavator.home))
        lengths = plant.jack_lengths(q)
        frames = joint_frames(excavator.chain, q)
        dh = link_frames(excavator.chain, q)
        for k, (i, _, a, b) in enumerate(jack_pins(excavator.chain, q)):
            worst = max(worst, abs(lengths[k, 0] - np.linalg.norm(b - a)))
            # ℓ′: B turns about joint i's axis (z of frame i−1 through its origin).
            axis = dh[i][:3, 2]
            origin = frames[i][:3, 3]
            u = (b - a) / np.linalg.norm(b - a)
            assert abs(lengths[k, 1] - u @ np.cross(axis, b - origin)) < 1e-9
    print(f"jack length vs pin distance: worst {worst:.3g} m")
    assert worst < 1e-9, worst
    # Every joint really moved (a frozen arm would prove nothing).
    assert np.all(moved > 0.01), moved


def test_sealed_chambers_track_the_jack_length(excavator: ChainProfile) -> None:
    """Valves closed: p = p0 − b ln(V/V0) with V from the jack lengths, so the length the oil
    implies equals the geometric one."""
    plant = ChainPlant(excavator.chain)
    n = plant.n
    x = equilibrium_state(plant, excavator.home, 5.0e6)
    x[n : 2 * n] = [0.03, -0.04, 0.15, -0.3]
    v0 = plant.chamber_volumes(x[:n])
    p0 = x[2 * n : 3 * n].copy()
    cap_area = np.array(
        [0.0 if not isinstance(j.drive, tuple) else sum(k.area_cap for k in j.drive)
         for j in excavator.chain.joints]
    )  # fmt: skip
    jacks = excavator.chain.jacks()
    worst = 0.0
    for _ in range(200):
        plant.integrate(x, np.zeros(n), 0.01, 100, constrain=False)
        lengths = plant.jack_lengths(x[:n])
        v_oil = v0[:, 0] * np.exp((p0 - x[2 * n : 3 * n]) / plant.chain.bulk_modulus)
        for k, (i, jack) in enumerate(jacks):
            # The joint's jacks are identical (the boom's pair), so each has the same length.
            ell_oil = jack.closed_length + (v_oil[i] - jack_dead(plant, i)) / cap_area[i]
            worst = max(worst, abs(ell_oil - lengths[k, 0]))
    print(f"oil-implied vs geometric jack length: worst {worst:.3g} m")
    assert worst < 1e-9, worst


def jack_dead(plant: ChainPlant, i: int) -> float:
    return float(plant.chain.joints[i].valve.dead_volume)  # type: ignore[union-attr]


def test_stroke_limits_are_where_the_jacks_bottom_out(excavator: ChainProfile) -> None:
    plant = ChainPlant(excavator.chain)
    limits = stroke_limits(plant, excavator.home)
    assert np.all(np.isinf(limits[0]))  # the swing motor turns freely
    for k, (i, jack) in enumerate(excavator.chain.jacks()):
        lo, hi = jack.closed_length, jack.closed_length + jack.stroke
        for edge in limits[i]:
            q = excavator.home.copy()
            q[i] = edge
            assert (
                min(abs(plant.jack_lengths(q)[k, 0] - lo), abs(plant.jack_lengths(q)[k, 0] - hi))
                < 1e-9
            )
        assert limits[i, 0] < excavator.home[i] < limits[i, 1]
