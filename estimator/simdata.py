"""Telemetry-like rows from the simulated rig stepped directly (no service, no loop), for tests,
benchmarks (`bench/rls_throughput.py`, `bench/identification_drift.py`) and quick experiments."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from daq.backends.sim.rig import SimRig
from daq.profile.loader import load_profile
from daq.profile.schema import Profile
from daq.sample_layout import SampleLayout
from estimator.datause import STATE_RUNNING as RUNNING


def excite(
    profile_path: str | Path,
    seconds: float,
    seed: int | None = None,
    amp_deg: float = 8.0,
    gain: float = 8.0,
    dither: float = 0.2,
    still: tuple[int, ...] = (),
    on_step: Callable[[int, SimRig], None] | None = None,
) -> tuple[Profile, SampleLayout, np.ndarray, SimRig]:
    """PD tracking of a multisine about home plus a valve dither; joints in `still` (0-based)
    are held at home (no multisine, no dither). `on_step(k, rig)` is called after row k's step
    (benchmarks read the simulator's truth there, e.g. the oil temperature).

    Returns (profile, layout, rows, rig)."""
    profile = load_profile(profile_path)
    if seed is not None:
        if profile.backend.sim is None:
            raise ValueError(f"{profile_path}: a seed needs the simulated backend ([backend.sim])")
        sim = profile.backend.sim.model_copy(update={"seed": seed})
        profile = profile.model_copy(
            update={"backend": profile.backend.model_copy(update={"sim": sim})}
        )
    rig = SimRig(profile)
    layout = SampleLayout.from_profile(profile)
    names = layout.names
    N = round(seconds / profile.period)
    rows = np.zeros((N, layout.width))
    inputs = [c.name for c in profile.inputs]
    eng0 = names.index(f"eng.{inputs[0]}")
    # The valve commands as the service records them (the fused spool needs them).
    cmd = [names.index(f"cmd.{c.name}") for c in profile.outputs]
    nj = len(profile.joints)
    qi = [rig.index(_resolver(profile, j.name)) for j in profile.joints]
    home = np.array(profile.home_rad())
    freqs = np.array([[0.31, 0.73, 1.7], [0.43, 1.1, 2.3]])[:nj]
    phases = np.array([[0.0, 1.0, 2.0], [0.5, 1.5, 2.5]])[:nj]
    amps = np.radians(amp_deg) * np.array([1.0, 0.5, 0.25])
    moving = np.ones(nj)
    moving[list(still)] = 0.0
    v = np.zeros(len(profile.outputs))
    eng = rig.read()
    for k in range(N + 1):
        t = k * profile.period
        wave = (amps * np.sin(2 * np.pi * freqs * t + phases)).sum(axis=1) * (1 - np.exp(-t))
        ref = home + moving * wave
        q = eng[qi]
        v[:nj] = np.clip(gain * (ref - q) + moving * dither * np.sin(2 * np.pi * 3.7 * t), -6, 6)
        if k > 0:  # the command computed from row k − 1's reading, recorded with it (as the loop)
            rows[k - 1, cmd] = v
        if k == N:
            break
        eng = rig.step(v)
        rows[k, 0] = k
        rows[k, 1] = (k + 1) * profile.period
        rows[k, 2] = RUNNING
        rows[k, eng0 : eng0 + len(inputs)] = eng
        if on_step is not None:
            on_step(k, rig)
    return profile, layout, rows, rig


def _resolver(profile: Profile, joint: str) -> str:
    ch = profile.joint_channel(joint, "resolver")
    if ch is None:
        raise ValueError(f"joint {joint} has no resolver channel: the excitation tracks its angle")
    return ch.name
