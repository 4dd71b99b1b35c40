"""The seed protocols as the seeds write them: Lin's sweeps as steps carried by the
velocity-limited PD (no approach move masking the step), checked on the runner alone and,
slow tier, on the simulated rig."""

from __future__ import annotations

import math
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

from controller.experiment import Experiment, ExperimentError
from controller.feedback import Feedback
from controller.laws import VelocityLimitedPD
from controller.runner import ExperimentRunner
from daq.profile import load_profile
from daq.service.control_api import joint_gains, joint_limits
from tests.conftest import PROFILES, ROOT

PERIOD = 1e-3


def _rig() -> tuple[list, list]:
    profile = load_profile(PROFILES / "sim-2dof.toml")
    return joint_gains(profile), joint_limits(profile)


def _vlpd_step(vmax: float, target: list[float]) -> dict:
    return {
        "name": "step",
        "home_deg": [40.0, 30.0],
        "segments": [
            {
                "name": "step",
                "duration_s": 5.0,
                "trajectory": {"kind": "hold", "position_deg": target},
                "controller": {
                    "kind": "vlpd",
                    "kp": [100.0, 100.0],
                    "kd": [20.0, 20.0],
                    "vmax_deg_s": [vmax, vmax],
                    "j_gain": [0.0, 0.0],
                    "velocity_ff": [0.25, 0.16],
                },
            }
        ],
    }


def test_vlpd_sees_its_step_and_reports_the_eq36_reference() -> None:
    gains, limits = _rig()
    runner = ExperimentRunner(
        Experiment.from_dict(_vlpd_step(10.0, [54.0, 30.0])), gains, limits, PERIOD
    )
    fb = Feedback(2)
    fb.q[:] = np.radians([40.0, 30.0])
    fb.p_cap[:] = fb.p_rod[:] = 1e6
    runner.enable(fb)
    ref, volts = np.zeros(2), np.zeros(2)
    refs = []
    for _ in range(1000):  # the joint does not move: the law keeps asking for V_max
        runner.step(fb, ref, volts)
        refs.append(ref.copy())
        assert not runner.segment_name.startswith("approach")
    refs_deg = np.degrees(np.array(refs))
    # The reported reference leaves the measured position at V_max (10°/s), not at the target.
    assert refs_deg[0, 0] == pytest.approx(40.0 + 10.0 * PERIOD, abs=1e-9)
    # A stalled joint: the reference runs away at V_max less its leak towards the measured
    # position, V_max·τ·(1 − e^(−t/τ)) after t — past the following-error limit (3.5° here).
    tau = VelocityLimitedPD.REF_LEAK_S
    assert refs_deg[-1, 0] - 40.0 == pytest.approx(
        10.0 * tau * (1 - math.exp(-1.0 / tau)), rel=0.01
    )
    assert refs_deg[-1, 0] - 40.0 > 3.5
    assert refs_deg[:, 1] == pytest.approx(30.0)
    # Eq. 34–36, hydraulic form, J = 0: the valve gets velocity_ff · V_max on joint 1.
    assert volts[0] == pytest.approx(0.25 * math.radians(10.0), rel=1e-9)


def test_vlpd_above_the_joint_velocity_limit_refused() -> None:
    gains, limits = _rig()
    with pytest.raises(ExperimentError, match="exceeds the joint's velocity limit"):
        ExperimentRunner(
            Experiment.from_dict(_vlpd_step(90.0, [54.0, 30.0])), gains, limits, PERIOD
        )


def test_lin_file_uses_the_velocity_limited_pd_on_steps() -> None:
    with open(ROOT / "experiments" / "lin-sweeps-2dof.toml", "rb") as f:
        exp = Experiment.from_dict(tomllib.load(f))
    sweeps = exp.segments[1:]
    assert {s.controller["kind"] for s in sweeps} == {"vlpd"}
    gains, limits = _rig()
    runner = ExperimentRunner(exp, gains, limits, PERIOD)
    # Planned duration = the segments' own: no approach move anywhere.
    assert runner.total_duration == pytest.approx(exp.duration)


@pytest.mark.slow
def test_lin_sweeps_run_at_vmax_on_the_simulator(tmp_path: Path) -> None:
    from daq.backends.factory import make_backend
    from daq.loop.states import State
    from daq.recording import read_run
    from daq.service import Service

    profile = load_profile(PROFILES / "sim-2dof.toml")
    service = Service(
        profile, make_backend(profile), virtual_time=True, network=False, run_dir=tmp_path
    )
    service.start()
    api = service.api
    try:
        with open(ROOT / "experiments" / "lin-sweeps-2dof.toml", "rb") as f:
            exp = tomllib.load(f)
        path = api.handle("record_start", {"name": "lin"}, None)["path"]
        api.handle("arm", {}, None)
        api.handle("run", {"experiment": exp}, None)
        deadline = time.monotonic() + 900
        while service.loop.state == State.RUNNING and time.monotonic() < deadline:
            service.loop.finished.wait(0.2)
        assert service.loop.state == State.ARMED, service.loop.fault
        api.handle("record_stop", {}, None)
    finally:
        service.shutdown()
    run = read_run(path)
    t = run.column("t")
    for j, (col, slow_fast) in enumerate((("eng.q_1", (10, 30)), ("eng.q_2", (10, 30)))):
        q = np.degrees(run.column(col))
        # Speed over 50 ms windows (averages the resolver noise out).
        k = 50
        v = (q[k:] - q[:-k]) / (t[k:] - t[:-k])
        for vmax in slow_fast:
            cruise = np.abs(np.abs(v) - vmax) < 0.3 * vmax
            assert cruise.sum() * PERIOD > 2.0, (j, vmax)
            # J = 0: the speed is as good as velocity_ff (a constant 1/valve gain, while the
            # valve's flow goes with √Δp): measured 9–18 % off at worst (docs/controller.md).
            assert np.median(np.abs(v[cruise])) == pytest.approx(vmax, rel=0.2), (j, vmax)
