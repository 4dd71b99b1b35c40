"""A recorded virtual-time run of an experiment on the simulated rig, on either cycle path
(tests/loop/test_compiled_cycle.py, bench/loop_timing.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from controller.experiment import Experiment
from controller.runner import ExperimentRunner
from daq.backends.sim import SimBackend
from daq.loop import Loop
from daq.loop.mailbox import Request
from daq.loop.states import State
from daq.profile.loader import load_profile
from daq.profile.schema import Profile
from daq.service.control_api import joint_gains, joint_limits, make_hold_runner

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "hw_profiles" / "sim-2dof.toml"
STANDARD = ROOT / "experiments" / "standard-2dof.toml"


def _post(loop: Loop, kind: str, payload: Any = None) -> Request:
    req = Request(kind, payload)
    loop.mailbox._slot.append(req)
    return req


def sim_loop(
    profile: Profile, *, compiled: bool | None = None, ring_capacity: int = 1 << 12
) -> Loop:
    """The simulated rig behind a virtual-time loop with the service's hold, warmed up and not
    started (`compiled`: the cycle path, None = `HYDRIG_LOOP_PATH`)."""
    sim = SimBackend.from_profile(profile)
    sim.open()
    hold = make_hold_runner(profile, joint_gains(profile))
    loop = Loop(profile, sim, hold=hold, virtual_time=True, ring_capacity=ring_capacity,
                compiled=compiled)  # fmt: skip
    loop.warm_up()
    return loop


def recorded_run(
    compiled: bool,
    experiment: dict[str, Any] | Path = STANDARD,
    profile_path: Path = PROFILE,
    params: Any = None,
    seconds: float | None = None,
    chunk: int = 2000,
    rate_hz: float | None = None,
) -> np.ndarray:
    """Every row of: 0.2 s idle, arm, 0.3 s hold, run the experiment to its end (or `seconds`),
    0.2 s more. The rows of both paths must be equal (same seed, same plant)."""
    rows, _ = recorded_loop(
        compiled, experiment, load_profile(profile_path), params, seconds, chunk, rate_hz
    )
    return rows


def recorded_loop(
    compiled: bool,
    experiment: dict[str, Any] | Path,
    profile: Profile,
    params: Any = None,
    seconds: float | None = None,
    chunk: int = 2000,
    rate_hz: float | None = None,
    power: int | None = None,
    runner_profile: Profile | None = None,
    correction: dict[str, tuple[float, float]] | None = None,
) -> tuple[np.ndarray, Loop]:
    """`recorded_run` on a profile given as an object, and the loop after it (its fault, its
    clamp count). `power`: the station's level switched on first, its ramp-up waited out.
    `runner_profile`: the experiment's gains and limits from another profile (a controller
    set for a wider valve than the loop's interlocks allow). `correction`: a transducer
    calibration's {input channel: (offset, 1/gain)}, in force from the start."""
    if rate_hz is not None:
        profile = profile.model_copy(
            update={"rig": profile.rig.model_copy(update={"loop_rate_hz": rate_hz})}
        )
    exp_dict = tomllib.loads(experiment.read_text()) if isinstance(experiment, Path) else experiment
    loop = sim_loop(profile, compiled=compiled, ring_capacity=1 << 13)
    if correction is not None:
        names = [c.name for c in loop.scaler.channels]
        offset, inv_gain = np.zeros(len(names)), np.ones(len(names))
        for name, (off, inv) in correction.items():
            offset[names.index(name)], inv_gain[names.index(name)] = off, inv
        loop.scaler.set_correction(offset, inv_gain)
    exp = Experiment.from_dict(exp_dict)
    rp = runner_profile or profile
    runner = ExperimentRunner(
        exp, joint_gains(rp), joint_limits(rp), profile.period, params, check=False
    )
    out: list[np.ndarray] = []

    def run(n: int) -> None:
        while n > 0:
            k = min(n, chunk)
            start = loop.seq
            loop.run(k * loop.period)
            out.append(loop.ring.data[np.arange(start, loop.seq) & loop.ring.mask].copy())
            n -= k

    per_s = round(1.0 / loop.period)
    if power is not None and profile.hydraulics is not None:
        on = _post(loop, "power", power)
        run(round((profile.hydraulics.ramp_up_s + 0.5) * per_s))
        assert on.ok, on.reason
    run(per_s // 5)
    arm = _post(loop, "arm")
    run(per_s * 3 // 10)
    assert arm.ok, arm.reason
    go = _post(loop, "run", runner)
    total = exp.duration + 10.0 if seconds is None else seconds
    end = loop.seq + round(total * per_s)
    while loop.seq < end:
        run(chunk)
        if seconds is None and loop.state != State.RUNNING:
            break
    assert go.ok, go.reason
    run(per_s // 5)
    loop.backend.close()
    return np.concatenate(out), loop
