"""Closed loop on the simulator (virtual time): the control laws really track.

Gains: a P position loop on the simulated rig is stable only for p ≲ 2 V/rad (valve velocity
gain G ≈ 4 rad/s/V at joint 1, ~8 Hz hydraulic resonance with ζ ≈ 0.06: p·G ≲ 2ζω_h ≈ 6.5 s⁻¹;
p = 8 limit-cycles). These tests use p = 1.5, the value the example experiments set; see
docs/controller.md.
"""

from __future__ import annotations

import math
import tomllib

import numpy as np
import pytest

from controller.experiment import Experiment
from controller.laws import VelocityLimitedPD
from controller.plant.params import PlantParams
from controller.runner import ExperimentRunner, HoldRunner
from tests.controller.simloop import (
    ROOT,
    SegmentSpy,
    SimLoop,
    profile,
    rms_deg,
    sine_experiment,
)

P_STABLE = 1.5


def track(ctrl: dict, params: PlantParams, rig: tuple, seconds: float = 4.0) -> list[float]:
    p = profile("sim-2dof")
    d = sine_experiment(p, ctrl, seconds=seconds)
    d["pid"] = {"p": P_STABLE}
    r = ExperimentRunner(Experiment.from_dict(d), *rig, p.period, params)
    _, ref, q = SimLoop(p).run(r, seconds)
    return rms_deg(ref, q, skip=1000)


def test_model_feedforward_tracks_at_least_3x_better_than_pid(
    params2: PlantParams, rig2: tuple
) -> None:
    pid = track({"kind": "pid"}, params2, rig2)
    ff = track({"kind": "pid_ff"}, params2, rig2)
    ffm = track({"kind": "pid_ff", "pressure_source": "measured"}, params2, rig2)
    for j in range(2):
        assert 3 * ff[j] <= pid[j], (ff, pid)
        assert 3 * ffm[j] <= pid[j], (ffm, pid)
    assert max(ff) < 0.3 and max(ffm) < 0.3


def test_feedforward_with_wrong_parameters_is_worse(params2: PlantParams, rig2: tuple) -> None:
    wrong = params2.with_identified(theta_fluid=params2.theta_fluid() * 1.5)
    good = track({"kind": "pid_ff"}, params2, rig2, 3.0)
    bad = track({"kind": "pid_ff"}, wrong, rig2, 3.0)
    assert max(bad) > 2 * max(good)


def test_hold_is_steady_with_stable_gains(rig2: tuple) -> None:
    p = profile("sim-2dof")
    gains = [g.replace(p=P_STABLE) for g in rig2[0]]
    _, ref, q = SimLoop(p).run(HoldRunner(gains, rig2[1], p.period), 2.0)
    assert max(rms_deg(ref, q, skip=500)) < 0.1


def test_gravity_compensated_pd_reaches_a_step_target(params2: PlantParams, rig2: tuple) -> None:
    p = profile("sim-2dof")
    d = {
        "name": "g",
        "home_deg": [40.0, 30.0],
        "pid": {"p": P_STABLE},
        "segments": [
            {
                "name": "s",
                "duration_s": 2.5,
                "trajectory": {"kind": "hold", "position_deg": [45.0, 35.0]},
                "controller": {
                    "kind": "gravity_pd",
                    "kp": [500.0] * 2,
                    "kd": [50.0] * 2,
                    "kf": [2e-4] * 2,
                },
            }
        ],
    }
    r = ExperimentRunner(Experiment.from_dict(d), *rig2, p.period, params2)
    _, _, q = SimLoop(p).run(r, 3.0)
    np.testing.assert_allclose(np.degrees(q[-300:]).mean(axis=0), [45.0, 35.0], atol=0.3)


def test_velocity_limited_pd_moves_at_constant_velocity(rig2: tuple) -> None:
    """Lin eq. 34–36: a large step is travelled at V_max, then settles without overshoot."""
    p = profile("sim-2dof")
    target = np.radians([52.0, 42.0])
    law = VelocityLimitedPD(
        [100.0] * 2,
        [20.0] * 2,
        [math.radians(20.0)] * 2,
        [0.0] * 2,
        rig2[1],
        p.period,
        20.0,
        [0.25] * 2,
    )
    zero = np.zeros(2)

    class Step:
        def enable(self, fb: object) -> None:
            law.enable(fb, target)  # type: ignore[arg-type]

        def step(self, fb: object, ref: np.ndarray, volts: np.ndarray) -> bool:
            ref[:] = target
            law.update(0.0, fb, target, zero, zero, volts)  # type: ignore[arg-type]
            return True

        def disable(self) -> None:
            law.disable()

    t, _, q = SimLoop(p).run(Step(), 2.0)
    qd = np.degrees(np.gradient(q[:, 0], t))
    cruise = np.convolve(qd, np.ones(50) / 50, mode="same")[100:350]  # 0.1–0.35 s: mid-move
    assert cruise.mean() == pytest.approx(20.0, rel=0.25)
    assert np.degrees(q[:, 0]).max() < 52.0 + 0.5  # no overshoot worth the name
    assert np.degrees(q[-200:, 0]).mean() == pytest.approx(52.0, abs=0.3)


@pytest.mark.parametrize("n", [2, 1])
def test_standard_experiment_runs_on_the_simulator(n: int, request: pytest.FixtureRequest) -> None:
    params = request.getfixturevalue(f"params{n}")
    rig = request.getfixturevalue(f"rig{n}")
    p = profile(f"sim-{n}dof")
    with open(ROOT / "experiments" / f"standard-{n}dof.toml", "rb") as f:
        exp = Experiment.from_dict(tomllib.load(f))
    r = ExperimentRunner(exp, *rig, p.period, params)
    spy = SegmentSpy(r)
    _, ref, q = SimLoop(p).run(spy, r.total_duration + 1.0)  # + recovery after the valve sine
    assert r.finished
    assert r.elapsed == pytest.approx(r.total_duration, abs=0.01)  # recovery included
    seg = np.array(spy.names)
    mfs = seg == "mfs"
    assert mfs.sum() == 60_000
    assert max(rms_deg(ref[mfs], q[mfs], 0)) < 0.5
    qdeg = np.degrees(q)
    for j, joint in enumerate(p.joints):
        assert joint.limits.soft_min_deg < qdeg[:, j].min()
        assert qdeg[:, j].max() < joint.limits.soft_max_deg
    # Following error stays under the profile's base limit everywhere (ref = q when open loop).
    assert np.degrees(np.abs(ref - q)).max() < p.joints[0].limits.following_error_deg


def test_model_feedforward_replaces_the_pids_own_ff1_and_ff2(
    params2: PlantParams, rig2: tuple
) -> None:
    """Gains tuned for `pid` carry ff1 (`rigctl tune` writes 1/velocity gain); under `pid_ff`
    the inverse model is that feed-forward, so the PID's must not add it a second time. The
    same feedback and reference into `FeedforwardPid` with and without ff1/ff2 must give the
    same commands; into `PidLaw` (nothing replaces ff1 there) different ones."""
    from controller.feedback import Feedback
    from controller.feedforward import PlantModel
    from controller.laws import FeedforwardPid, PidLaw

    gains, limits = rig2
    p = profile("sim-2dof")
    tuned = [g.replace(p=P_STABLE, ff1=0.25, ff2=0.01) for g in gains]
    plain = [g.replace(p=P_STABLE) for g in gains]
    model = PlantModel(params2)
    t = np.arange(300) * p.period
    q_ref = np.radians([40.0, 30.0])[None, :] + 0.08 * np.sin(2 * math.pi * t)[:, None]
    qd_ref = np.gradient(q_ref, p.period, axis=0)
    qdd_ref = np.gradient(qd_ref, p.period, axis=0)

    def commands(law) -> np.ndarray:
        fb = Feedback(2)
        fb.q[:] = q_ref[0] - 0.01
        fb.p_cap[:], fb.p_rod[:] = 4e6, 3e6
        law.enable(fb, q_ref[0])
        out = np.zeros((len(t), 2))
        for k in range(len(t)):
            fb.t = t[k]
            fb.q[:] = q_ref[k] - 0.01 * np.cos(3 * t[k])
            law.update(t[k], fb, q_ref[k], qd_ref[k], qdd_ref[k], out[k])
        return out

    ff = commands(FeedforwardPid(tuned, limits, p.period, model))
    np.testing.assert_array_equal(ff, commands(FeedforwardPid(plain, limits, p.period, model)))
    pid_tuned = commands(PidLaw(tuned, limits, p.period))
    assert np.max(np.abs(pid_tuned - commands(PidLaw(plain, limits, p.period)))) > 0.01
