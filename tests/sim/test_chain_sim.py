"""The excavator's simulator (a [chain] profile): the chain's plant behind the profile's
sensors. The jacks' pistons follow the joint angles through their triangles (the closed chain),
each channel reads its own joint's quantity, and a stuck valve fault holds its spool."""

from __future__ import annotations

import math

import numpy as np
import pytest

from daq.backends.sim import SimBackend, SimRig
from daq.backends.sim.chain_backend import ChainSimBackend
from daq.profile import load_profile, parse_profile
from tests.conftest import PROFILES

PROFILE = load_profile(PROFILES / "sim-excavator.toml")


def _piston_from_pins(profile_chain, q: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Each jack's ℓ − ℓc − L/2 from its pins by plane geometry, independently of the jitted
    kinematics: B turns with the child link about the joint axis, A stays on the parent."""
    out = []
    for i, jack in profile_chain.jacks():
        th = q[i] + profile_chain.joints[i].link.dh.theta_offset
        bx, by, _ = jack.pin_child
        ax, ay, _ = jack.pin_parent
        c, s = math.cos(th), math.sin(th)
        ell = math.hypot(c * bx - s * by - ax, s * bx + c * by - ay)
        out.append(ell - jack.closed_length - 0.5 * jack.stroke)
    return np.array(out)


def _drive(rig: SimRig, seconds: float, amplitude_v: float = 2.0) -> list[np.ndarray]:
    """Open every valve with slow sines of different phases; the true state at every step."""
    states = []
    n = len(rig.outputs)
    for k in range(int(seconds / rig.period)):
        t = k * rig.period
        v = amplitude_v * np.sin(2.0 * np.pi * 0.5 * t + np.arange(n))
        rig.step(v)
        states.append(rig.backend.true_state())
    return states


def test_a_chain_profile_gets_the_chain_simulator() -> None:
    backend = SimBackend.from_profile(PROFILE)
    assert isinstance(backend, ChainSimBackend)
    assert backend.true_state().shape == (20,)


def test_the_pistons_follow_the_joint_angles_through_their_triangles() -> None:
    """The closed-chain constraint: at every step each jack joint's piston is where the pins
    put it at that step's angle, to 1e-9 m, while every joint moves."""
    rig = SimRig(PROFILE)
    backend = rig.backend
    assert isinstance(backend, ChainSimBackend)
    chain = backend.chain
    jack_joint = [i for i, _ in chain.jacks()]
    first = [jack_joint.index(i) for i in (1, 2, 3)]  # each joint's first jack
    start = backend.true_state()[:4].copy()
    worst = 0.0
    for k in range(600):
        rig.step(2.0 * np.sin(2.0 * np.pi * 0.5 * k * rig.period + np.arange(4)))
        q = backend.true_state()[:4]
        expected = _piston_from_pins(chain, q)
        # The boom's two jacks are identical, mirrored across its plane: equal lengths.
        assert expected[0] == pytest.approx(expected[1], abs=1e-12)
        worst = max(worst, float(np.max(np.abs(backend.true_pistons()[1:] - expected[first]))))
    assert worst < 1e-9
    moved = np.degrees(np.abs(backend.true_state()[:4] - start))
    assert np.all(moved > 0.5), moved  # the check above saw the jacks move
    # And the transducers read them (through noise and the 12-bit converter).
    eng = rig.read()
    for j, name in zip((1, 2, 3), ("boom", "stick", "bucket"), strict=True):
        channel = PROFILE.joint_channel(name, "potentiometer")
        assert channel is not None
        lsb = channel.scaling.gain * 20.0 / 4096  # type: ignore[union-attr]
        tol = 6.0 * channel.sim_noise + lsb
        assert eng[rig.index(f"piston_{name}")] == pytest.approx(backend.true_pistons()[j], abs=tol)


def test_each_channel_reads_its_own_joint() -> None:
    """Angles, chamber (swing: motor port) pressures and spools of the right joint."""
    quiet = PROFILE.model_dump(mode="python", exclude_none=True)
    for c in quiet["channels"]:
        c["sim_noise"] = 0.0
    rig = SimRig(parse_profile(quiet))
    _drive(rig, 0.3)
    x = rig.backend.true_state()
    eng = rig.read()
    n = 4
    for i, name in enumerate(["swing", "boom", "stick", "bucket"]):
        assert eng[rig.index(f"q_{name}")] == pytest.approx(x[i], abs=2.0 * math.pi / 2**14)
        assert eng[rig.index(f"p_cap_{name}")] == pytest.approx(x[2 * n + i], abs=2e4)
        assert eng[rig.index(f"p_rod_{name}")] == pytest.approx(x[3 * n + i], abs=2e4)
        assert eng[rig.index(f"spool_{name}")] == pytest.approx(x[4 * n + i], abs=1e-3)


def test_at_rest_with_valves_null_the_arm_stays_at_home() -> None:
    """The start state holds each joint against gravity (the chain's equilibrium)."""
    rig = SimRig(PROFILE)
    for _ in range(500):
        rig.step(np.zeros(4))
    drift = np.degrees(np.abs(rig.backend.true_state()[:4] - np.radians([0, 0, 0, 30])))
    assert np.all(drift < 1e-3), drift


def test_a_stuck_valve_holds_its_spool() -> None:
    """Stuck at 0.2 s of plant time, with the spool open: it stays open, the others move."""
    data = PROFILE.model_dump(mode="python", exclude_none=True)
    data["backend"]["sim"]["faults"] = ["valve_stick:stuck_valve@0.2"]
    rig = SimRig(parse_profile(data))
    _drive(rig, 0.2005)
    u0 = rig.backend.true_state()[4 * 4 + 2]
    assert abs(u0) > 0.1  # open when it stuck
    _drive(rig, 0.3)
    assert rig.backend.true_state()[4 * 4 + 2] == pytest.approx(u0, abs=1e-9)
    assert abs(rig.backend.true_state()[4 * 4 + 1]) > 0.01  # the boom's was not stuck


def test_a_positive_command_raises_every_joint_angle() -> None:
    """The service's controllers push a positive error with a positive command: on every joint
    (the boom's inverted valve coil included) a positive command must raise the angle."""
    for j, name in enumerate(["swing", "boom", "stick", "bucket"]):
        rig = SimRig(PROFILE)
        start = rig.backend.true_state()[j]
        v = np.zeros(4)
        v[j] = 1.0
        for _ in range(200):
            rig.step(v)
        assert rig.backend.true_state()[j] - start > math.radians(0.3), name
