"""Joint-space reference trajectories, all joints at once.

Every trajectory gives, for time t since its start, the reference position, velocity and
acceleration of each joint (rad, rad/s, rad/s²) two ways:

- `eval(t, q, qd, qdd)` fills caller-owned arrays using scalar float maths: the 1 kHz loop path,
  no allocation;
- `sample(t) -> (q, qd, qdd)` for an array of times (shape (N, n_joints) each): the limit checks
  and the excitation optimiser.

Sine, multisine, finite Fourier series (Swevers) and modified Fourier series (MFS paper) are one
class, `HarmonicSum`: q_j(t) = c_j + Σ_k S_jk sin(ω_jk t) + C_jk cos(ω_jk t). Trapezoidal moves and
Lin's constant-velocity sweeps are one class, `TrapezoidPath`: per joint a chain of
trapezoidal-velocity moves through waypoints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Array = np.ndarray


class Trajectory:
    """Base: `n` joints, natural `duration` (one period or the whole move), s."""

    n: int
    duration: float

    def eval(self, t: float, q: Array, qd: Array, qdd: Array) -> None:
        raise NotImplementedError

    def sample(self, t: Array) -> tuple[Array, Array, Array]:
        t = np.asarray(t, dtype=float)
        q = np.empty((t.size, self.n))
        qd = np.empty_like(q)
        qdd = np.empty_like(q)
        for k, tk in enumerate(t.ravel()):
            self.eval(float(tk), q[k], qd[k], qdd[k])
        return q, qd, qdd

    def start(self) -> Array:
        q, _, _ = self.sample(np.zeros(1))
        return q[0]


class Hold(Trajectory):
    """Stand still at `position`."""

    def __init__(self, position: Sequence[float], duration: float = 0.0) -> None:
        self.position = [float(x) for x in position]
        self.n = len(self.position)
        self.duration = float(duration)

    def eval(self, t: float, q: Array, qd: Array, qdd: Array) -> None:
        for j in range(self.n):
            q[j] = self.position[j]
            qd[j] = 0.0
            qdd[j] = 0.0

    def sample(self, t: Array) -> tuple[Array, Array, Array]:
        t = np.asarray(t, dtype=float).ravel()
        q = np.tile(np.asarray(self.position), (t.size, 1))
        return q, np.zeros_like(q), np.zeros_like(q)


class HarmonicSum(Trajectory):
    """q_j(t) = c_j + Σ_k S_jk sin(ω_jk t) + C_jk cos(ω_jk t); arrays (n, K), ω in rad/s."""

    def __init__(
        self,
        center: Sequence[float],
        omega: Array,
        sin_coef: Array,
        cos_coef: Array,
        duration: float,
    ) -> None:
        self.center_arr = np.asarray(center, dtype=float).ravel()
        self.n = self.center_arr.size
        self.omega = np.asarray(omega, dtype=float).reshape(self.n, -1)
        self.sin_coef = np.asarray(sin_coef, dtype=float).reshape(self.n, -1)
        self.cos_coef = np.asarray(cos_coef, dtype=float).reshape(self.n, -1)
        if not (self.omega.shape == self.sin_coef.shape == self.cos_coef.shape):
            raise ValueError("omega, sin_coef and cos_coef must have the same shape (n, K)")
        if not np.all(np.isfinite(self.omega)) or not np.all(np.isfinite(self.sin_coef)):
            raise ValueError("harmonic coefficients must be finite")
        self.duration = float(duration)
        # Plain Python lists: scalar indexing of lists is cheaper than of numpy arrays.
        self._rows = [
            list(
                zip(
                    self.omega[j].tolist(),
                    self.sin_coef[j].tolist(),
                    self.cos_coef[j].tolist(),
                    strict=True,
                )
            )
            for j in range(self.n)
        ]
        self._center = self.center_arr.tolist()

    def eval(self, t: float, q: Array, qd: Array, qdd: Array) -> None:
        for j in range(self.n):
            x = self._center[j]
            v = 0.0
            a = 0.0
            for w, s, c in self._rows[j]:
                sn = math.sin(w * t)
                cs = math.cos(w * t)
                x += s * sn + c * cs
                v += w * (s * cs - c * sn)
                a -= w * w * (s * sn + c * cs)
            q[j] = x
            qd[j] = v
            qdd[j] = a

    def sample(self, t: Array) -> tuple[Array, Array, Array]:
        t = np.asarray(t, dtype=float).ravel()[:, None, None]
        wt = self.omega[None] * t
        sn, cs = np.sin(wt), np.cos(wt)
        s, c, w = self.sin_coef[None], self.cos_coef[None], self.omega[None]
        q = self.center_arr[None] + (s * sn + c * cs).sum(axis=2)
        qd = (w * (s * cs - c * sn)).sum(axis=2)
        qdd = (-w * w * (s * sn + c * cs)).sum(axis=2)
        return q, qd, qdd


def sine(
    center: Sequence[float],
    amplitude: Sequence[float],
    frequency_hz: Sequence[float],
    phase: Sequence[float] | None = None,
    duration: float | None = None,
) -> HarmonicSum:
    """q_j = c_j + A_j sin(2π f_j t + φ_j)."""
    n = len(center)
    ph = np.zeros(n) if phase is None else np.asarray(phase, dtype=float)
    a = np.asarray(amplitude, dtype=float)
    f = np.asarray(frequency_hz, dtype=float)
    _check_len(n, amplitude=a, frequency_hz=f, phase=ph)
    if np.any(f <= 0):
        raise ValueError(f"sine frequency_hz must be > 0, got {f.tolist()}")
    dur = float(1.0 / f.min()) if duration is None else float(duration)
    return HarmonicSum(center, 2 * np.pi * f, a * np.cos(ph), a * np.sin(ph), dur)


def multisine(
    center: Sequence[float],
    frequencies_hz: Sequence[Sequence[float]],
    amplitudes: Sequence[Sequence[float]],
    phases: Sequence[Sequence[float]] | None = None,
    duration: float | None = None,
) -> HarmonicSum:
    """Per joint a sum of sines; default phases are Schroeder's (low crest factor)."""
    f = np.asarray(frequencies_hz, dtype=float)
    a = np.asarray(amplitudes, dtype=float)
    if f.ndim != 2 or f.shape != a.shape or f.shape[0] != len(center):
        raise ValueError("multisine: frequencies_hz and amplitudes must be (n_joints, K) lists")
    if np.any(f <= 0):
        raise ValueError("multisine frequencies_hz must be > 0")
    K = f.shape[1]
    if phases is None:
        k = np.arange(1, K + 1)
        ph = np.tile(-np.pi * k * (k - 1) / K, (f.shape[0], 1))
        ph += np.arange(f.shape[0])[:, None] * np.pi / 2  # decorrelate joints
    else:
        ph = np.asarray(phases, dtype=float).reshape(f.shape)
    dur = float(1.0 / f.min()) if duration is None else float(duration)
    return HarmonicSum(center, 2 * np.pi * f, a * np.cos(ph), a * np.sin(ph), dur)


def fourier_series(center: Sequence[float], base_hz: float, a: Array, b: Array) -> HarmonicSum:
    """Swevers' finite Fourier series:

        q = q0 + Σ_l a_l/(ω_f l) sin(ω_f l t) − b_l/(ω_f l) cos(ω_f l t).

    `a`, `b`: (n_joints, N) coefficients (rad/s). Periodic with period 1/base_hz.
    """
    if not base_hz > 0:
        raise ValueError(f"fourier base_hz must be > 0, got {base_hz}")
    a = np.atleast_2d(np.asarray(a, dtype=float))
    b = np.atleast_2d(np.asarray(b, dtype=float))
    if a.shape != b.shape or a.shape[0] != len(center):
        raise ValueError("fourier: a and b must both be (n_joints, N)")
    wf = 2 * np.pi * base_hz
    lw = wf * np.arange(1, a.shape[1] + 1)[None, :] * np.ones((a.shape[0], 1))
    return HarmonicSum(center, lw, a / lw, -b / lw, 1.0 / base_hz)


def mfs_basis(n_harmonics: int) -> tuple[Array, Array]:
    """Null-space bases (Na, Nb) of the MFS boundary conditions on one joint's (a, b).

    At t = 0 (and, by periodicity, at t = T): q̇ = Σ a_l = 0, q̈ = ω_f Σ l b_l = 0, and
    q = q0 needs Σ b_l / l = 0. So a = Na·za (N−1 free), b = Nb·zb (N−2 free).
    """
    import scipy.linalg

    if n_harmonics < 3:
        raise ValueError("a modified Fourier series needs at least 3 harmonics")
    ell = np.arange(1, n_harmonics + 1, dtype=float)
    na = scipy.linalg.null_space(np.ones((1, n_harmonics)))
    nb = scipy.linalg.null_space(np.vstack([1.0 / ell, ell]))
    return na, nb


def modified_fourier_series(
    center: Sequence[float], base_hz: float, a: Array, b: Array, tolerance: float = 1e-9
) -> HarmonicSum:
    """MFS: a Fourier series whose coefficients meet the boundary conditions (start and end at
    `center` at rest, zero acceleration).

    Coefficients within `tolerance` (relative to their size) of the conditions are projected
    onto them exactly (a file holds rounded decimals); farther off is an error.
    """
    a = np.atleast_2d(np.asarray(a, dtype=float))
    b = np.atleast_2d(np.asarray(b, dtype=float))
    if a.shape != b.shape:
        raise ValueError("MFS: a and b must have the same shape (n_joints, N)")
    na, nb = mfs_basis(a.shape[1])
    ap, bp = a @ na @ na.T, b @ nb @ nb.T  # orthogonal projections onto the null spaces
    size = 1e-12 + float(np.abs(a).max(initial=0.0) + np.abs(b).max(initial=0.0))
    off = float(max(np.abs(a - ap).max(initial=0.0), np.abs(b - bp).max(initial=0.0)))
    if off > tolerance * size:
        raise ValueError(
            "MFS coefficients violate the boundary conditions (Σa = 0, Σb/l = 0, Σl·b = 0) by "
            f"{off:.3g}; build them with mfs_coefficients() or optimise_mfs()"
        )
    return fourier_series(center, base_hz, ap, bp)


def mfs_coefficients(za: Array, zb: Array) -> tuple[Array, Array]:
    """Map free parameters (n, N−1) and (n, N−2) to MFS coefficients (a, b), each (n, N)."""
    za = np.atleast_2d(za)
    zb = np.atleast_2d(zb)
    na, nb = mfs_basis(za.shape[1] + 1)
    return za @ na.T, zb @ nb.T


def chirp(
    center: Sequence[float], amplitude: Sequence[float], f0_hz: float, f1_hz: float, duration: float
) -> Trajectory:
    """Linear chirp q = c + A sin(2π(f0 t + (f1−f0) t²/(2T)))."""
    return _Chirp(center, amplitude, f0_hz, f1_hz, duration)


class _Chirp(Trajectory):
    def __init__(
        self,
        center: Sequence[float],
        amplitude: Sequence[float],
        f0: float,
        f1: float,
        duration: float,
    ) -> None:
        _check_len(len(center), amplitude=np.asarray(amplitude))
        if not (f0 > 0 and f1 > 0 and duration > 0):
            raise ValueError("chirp needs f0_hz > 0, f1_hz > 0 and duration > 0")
        self.center = [float(c) for c in center]
        self.amp = [float(a) for a in amplitude]
        self.n = len(self.center)
        self.f0, self.k, self.duration = float(f0), float((f1 - f0) / duration), float(duration)

    def eval(self, t: float, q: Array, qd: Array, qdd: Array) -> None:
        phi = 2 * math.pi * (self.f0 * t + 0.5 * self.k * t * t)
        w = 2 * math.pi * (self.f0 + self.k * t)
        wd = 2 * math.pi * self.k
        sn, cs = math.sin(phi), math.cos(phi)
        for j in range(self.n):
            a = self.amp[j]
            q[j] = self.center[j] + a * sn
            qd[j] = a * w * cs
            qdd[j] = a * (wd * cs - w * w * sn)

    def sample(self, t: Array) -> tuple[Array, Array, Array]:
        """`eval` for many times at once (the limit check streams long chirps through this)."""
        t = np.asarray(t, dtype=float).ravel()[:, None]
        phi = 2 * np.pi * (self.f0 * t + 0.5 * self.k * t * t)
        w = 2 * np.pi * (self.f0 + self.k * t)
        sn, cs = np.sin(phi), np.cos(phi)
        a = np.asarray(self.amp)[None, :]
        q = np.asarray(self.center)[None, :] + a * sn
        return q, a * w * cs, a * (2 * np.pi * self.k * cs - w * w * sn)


def _check_len(n: int, **arrays: Array) -> None:
    for name, arr in arrays.items():
        if np.size(arr) != n:
            raise ValueError(f"{name} has {np.size(arr)} entries, expected one per joint ({n})")
