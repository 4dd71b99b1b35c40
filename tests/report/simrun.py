"""A recorded run of the simulated rig without the service: SimRig stepped directly, rows in the
sample layout written into a `SampleRing` and recorded by the real `Recorder`."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from daq.backends.sim import SimRig
from daq.profile import load_profile
from daq.recording import Recorder
from daq.ring import SampleRing
from daq.sample_layout import SampleLayout

RUNNING = 2.0  # daq.loop.states.State.RUNNING


def record_sim_run(
    profile_path: Path,
    directory: Path,
    name: str,
    seconds: float,
    *,
    freqs: tuple[float, float] = (0.7, 1.1),
    amp_deg: tuple[float, float] = (5.0, 4.0),
    gain: float = 2.0,
    dither_v: float = 0.3,
    fault_at: float | None = None,
) -> Path:
    """Closed-loop sine tracking (P law `gain` V/rad on the resolver angles) plus a small valve
    dither for the fluid model; returns the `.rigrun` path. `fault_at` (s) marks a fault in the
    rows' `fault`/`state` columns and as recorder events from then on (report tests)."""
    text = profile_path.read_text(encoding="utf-8")
    profile = load_profile(profile_path)
    rig = SimRig(profile)
    layout = SampleLayout.from_profile(profile)
    n = round(seconds / rig.period)
    ring = SampleRing(1 << max(12, (n - 1).bit_length()), layout.width)  # never lapped
    rec = Recorder(
        ring,
        layout,
        directory,
        {"rig": profile.rig.id, "period": rig.period},
        profile_text=text,
    )
    rec.start(name)
    names = layout.names
    nj = len(profile.joints)
    q_in = [rig.index(profile.joint_channel(j.name, "resolver").name) for j in profile.joints]
    eng0 = names.index(f"eng.{profile.inputs[0].name}")
    raw0 = names.index(f"raw.{profile.inputs[0].name}")
    cmd0 = names.index(f"cmd.{profile.outputs[0].name}")
    ref0 = names.index(f"ref.{profile.joints[0].name}")
    width_in = len(profile.inputs)
    home = np.array(profile.home_rad())
    f = np.array(freqs[:nj])
    a = np.radians(amp_deg[:nj])
    v = np.zeros(len(profile.outputs))
    eng = rig.eng.copy()
    rec.event("state", old="ARMED", new="RUNNING")
    faulted = False
    for k in range(n):
        t = k * rig.period
        ref = home + a * np.sin(2 * np.pi * f * t) * (1.0 - np.exp(-2.0 * t))
        if fault_at is not None and t >= fault_at and not faulted:
            faulted = True
            rec.event("fault", cause="pressure", channel="p_cap_1", value=7.6e6, limit=7.5e6)
            rec.event("state", old="RUNNING", new="FAULT")
        tic = time.perf_counter()
        if faulted:
            v[:] = 0.0
        else:
            v[:nj] = gain * (ref - eng[q_in]) + dither_v * np.sin(2 * np.pi * 3.7 * t + f * 7)
        row = ring.claim()
        row[0] = k
        row[1] = t
        row[2] = 3.0 if faulted else RUNNING
        row[3] = 4.0 if faulted else 0.0
        row[4] = 0.0
        row[5] = 0.0  # no loop here: nothing waited on a deadline
        row[raw0 : raw0 + width_in] = rig.raw
        row[eng0 : eng0 + width_in] = eng
        row[cmd0 : cmd0 + len(v)] = v
        row[ref0 : ref0 + nj] = ref
        eng = rig.step(v).copy()
        row[6] = time.perf_counter() - tic  # what computing this cycle really took
        ring.publish()
    stats = rec.stop()
    if stats.error or stats.rows_written != n:
        raise RuntimeError(f"recording failed: {stats}")
    assert stats.path is not None
    return stats.path
