"""A one-chamber flow equation on synthetic data whose truth is known exactly, for the
refinement and repeat tests:
    −ṗ·V·(1/b) + u·Cf − p·CL = A·ṡ,
the pressure integrated from it; every input is periodic in 10 s."""

from __future__ import annotations

import numpy as np

from estimator.model_fit import fit_blocks
from estimator.models import LinearModel, Sample

FS = 1000.0
V, AREA = 1.0e-4, 1.0e-3
THETA = np.array([1.0e-9, 5.0e-7, 1.0e-13])  # 1/b, Cf, CL: pressure time constant 1 s


def regressor(x: Sample) -> tuple[np.ndarray, np.ndarray]:
    Phi = np.stack([-x.pd_cap[:, 0] * V, x.u[:, 0], -x.p_cap[:, 0]], axis=1)[:, None, :]
    return Phi, (AREA * x.sd[:, 0])[:, None]


MODEL = LinearModel(
    name="chamber",
    names=("1/b", "Cf", "CL"),
    n_outputs=1,
    regressor=regressor,
    param_scale=THETA.copy(),
    output_scale=np.array([1.0e-7]),
    cutoff_hz=40.0,
)


def chamber_run(seconds: float, p_noise: float, seed: int) -> np.ndarray:
    """raw (N, 5) = [q, s, p_cap, p_rod, u] at 1 kHz; pressure integrated at 20 kHz."""
    sub = 20
    t = np.arange(int(seconds * FS * sub)) / (FS * sub)
    u = 1.0 + 0.3 * np.sin(2 * np.pi * 0.7 * t) + 0.2 * np.sin(2 * np.pi * 4.3 * t + 1.0)
    u += 0.1 * np.sin(2 * np.pi * 11.0 * t + 2.0)
    w = 2 * np.pi * np.array([0.4, 1.9, 6.1])
    amp = np.array([5.0e-5, 1.0e-5, 2.0e-6])
    s = (amp[:, None] * np.sin(w[:, None] * t)).sum(axis=0)
    sd = (amp[:, None] * w[:, None] * np.cos(w[:, None] * t)).sum(axis=0)
    p = np.empty_like(t)
    p[0] = THETA[1] * u[0] / THETA[2]
    dt = 1.0 / (FS * sub)
    for k in range(len(t) - 1):  # semi-implicit Euler: stable and exact to O(dt)
        rhs = (THETA[1] * u[k] - AREA * sd[k]) / (V * THETA[0])
        p[k + 1] = (p[k] + dt * rhs) / (1.0 + dt * THETA[2] / (V * THETA[0]))
    rng = np.random.default_rng(seed)
    raw = np.column_stack([s, s, p, np.full_like(p, 1.0e6), u])[::sub]
    raw[:, 2] += rng.normal(0.0, p_noise, raw.shape[0])
    return raw


def fit(raw: np.ndarray, refine: bool):
    got = fit_blocks(
        MODEL,
        raw,
        [slice(0, raw.shape[0])],
        fs=FS,
        nj=1,
        cutoff_hz=40.0,
        nd=10,
        trim=100,
        refine=refine,
    )
    assert got is not None
    return got
