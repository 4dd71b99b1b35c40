"""Forward kinematics in plain numpy (4×4 transforms of thesis eq. 3.8): the frames, the jack
pins and the minor links' positions in frame 0. For drawings, energy checks and tests; the
dynamics (`rnea`) never call it, so it is an independent statement of the geometry."""

from __future__ import annotations

import math

import numpy as np

from controller.plant.chain.model import Chain, Jack


def _homogeneous(r: np.ndarray, p: np.ndarray) -> np.ndarray:
    t = np.eye(4)
    t[:3, :3] = r
    t[:3, 3] = p
    return t


def _rot_z(t: float) -> np.ndarray:
    c, s = math.cos(t), math.sin(t)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def joint_frames(chain: Chain, q: np.ndarray) -> list[np.ndarray]:
    """World transforms of the joint frames F_1 … F_n (F_i = frame_{i−1}·Rot(z, θ_i))."""
    out = []
    t = np.eye(4)
    for i, j in enumerate(chain.joints):
        f = t @ _homogeneous(_rot_z(float(q[i]) + j.link.dh.theta_offset), np.zeros(3))
        out.append(f)
        r, p = j.link.dh.constant()
        t = f @ _homogeneous(r, p)
    return out


def link_frames(chain: Chain, q: np.ndarray) -> list[np.ndarray]:
    """World transforms of frames 0 … n (frame i at the distal end of link i)."""
    out = [np.eye(4)]
    for f, j in zip(joint_frames(chain, q), chain.joints, strict=True):
        r, p = j.link.dh.constant()
        out.append(f @ _homogeneous(r, p))
    return out


def _point(t: np.ndarray, p: tuple[float, float, float] | np.ndarray) -> np.ndarray:
    return np.asarray(t[:3, :3] @ np.asarray(p, dtype=float) + t[:3, 3])


def jack_pins(chain: Chain, q: np.ndarray) -> list[tuple[int, Jack, np.ndarray, np.ndarray]]:
    """(joint index, jack, pin A, pin B) in frame 0 for every jack."""
    frames = joint_frames(chain, q)
    dh_frames = link_frames(chain, q)
    out = []
    for i, jack in chain.jacks():
        a = _point(dh_frames[i], jack.pin_parent)
        out.append((i, jack, a, _point(frames[i], jack.pin_child)))
    return out


def link_coms(chain: Chain, q: np.ndarray) -> list[np.ndarray]:
    """Centres of mass of the major links in frame 0."""
    return [
        _point(f, j.link.com) for f, j in zip(joint_frames(chain, q), chain.joints, strict=True)
    ]


def minor_coms(chain: Chain, q: np.ndarray) -> list[tuple[float, np.ndarray]]:
    """(mass, centre) of every cylinder and piston in frame 0."""
    out = []
    for _, jack, a, b in jack_pins(chain, q):
        u = (b - a) / np.linalg.norm(b - a)
        out.append((jack.cylinder.mass, a + jack.cylinder.distance * u))
        out.append((jack.piston.mass, b - jack.piston.distance * u))
    return out


def potential_energy(chain: Chain, q: np.ndarray) -> float:
    """Σ −m g·r over the major and minor links (J, zero at frame 0's origin)."""
    g = np.asarray(chain.gravity, dtype=float)
    total = 0.0
    for j, c in zip(chain.joints, link_coms(chain, q), strict=True):
        total -= j.link.mass * float(g @ c)
    for m, c in minor_coms(chain, q):
        total -= m * float(g @ c)
    return total
