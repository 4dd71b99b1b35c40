"""Tracking on the excavator (hw_profiles/sim-excavator.toml): one period (10 s) of the shipped
multisine over all four joints (experiments/excavator-multisine.toml), on the simulator
through the loop's data path (`daq.sim_closed_loop.SimLoop`), with

* `pid`: the profile's PID (p = 6 V/rad with its velocity feed-forward ff1),
* `pid_p_only`: the same PID without ff1,
* `pid_ff_model` / `pid_ff_measured`: the model feed-forward (`controller.feedforward_chain`,
  Newton–Euler and the valve inverse; steady-state or measured pressures) on the profile's
  chain — which on the simulator is the true plant: a reference, as `bench/tracking.py`'s
  `truth_reference` on the 2-DOF rig, no real machine's model is exact;
* `pid_ff_model_10pct_off`: the same law on a model 10 % wrong where a machine's data sheet is
  least sure (every link and jack body 10 % heavier, every valve's flow gains 10 % lower).

RMS and largest error per joint (degrees) after the first 3 s, and PID's RMS over each
feed-forward's. `runner_step`: one `ExperimentRunner.step` with the model feed-forward (the
loop runs it on its Python path) on the excavator against the 2-DOF rig's, best of 5 × 1000
steps each, in the same run. JSON on the last line.

    python bench/excavator_tracking.py
"""

from __future__ import annotations

import json
import math
import sys
import time
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.experiment import Experiment  # noqa: E402
from controller.feedback import Feedback  # noqa: E402
from controller.plant.chain.model import Body, Chain, Motor  # noqa: E402
from controller.runner import ExperimentRunner  # noqa: E402
from daq.profile import load_profile  # noqa: E402
from daq.profile.plant import plant_params  # noqa: E402
from daq.sim_closed_loop import SimLoop, gains_limits, rms_deg, sine_experiment  # noqa: E402

PROFILE = ROOT / "hw_profiles" / "sim-excavator.toml"
EXPERIMENT = ROOT / "experiments" / "excavator-multisine.toml"
SKIP = 3000  # the settle hold and the multisine's first second


def experiment(controller: dict[str, Any]) -> Experiment:
    d = tomllib.loads(EXPERIMENT.read_text())
    settle, sine = d["segments"][:2]
    d["segments"] = [settle, dict(sine, repeats=1, controller=controller)]
    return Experiment.from_dict(d)


def off_by(chain: Chain, mass: float, flow: float) -> Chain:
    """`chain` with every body's mass and inertia × `mass` and every valve's flow gains × `flow`."""

    def body(b: Body) -> Body:
        return replace(
            b,
            mass=b.mass * mass,
            inertia_axial=b.inertia_axial * mass,
            inertia_transverse=b.inertia_transverse * mass,
        )

    joints = []
    for j in chain.joints:
        link = replace(
            j.link, mass=j.link.mass * mass, inertia=tuple(x * mass for x in j.link.inertia)
        )
        drive = j.drive
        if drive is not None and not isinstance(drive, Motor):
            drive = tuple(
                replace(k, cylinder=body(k.cylinder), piston=body(k.piston)) for k in drive
            )
        valve = j.valve
        if valve is not None:
            valve = replace(valve, flow_gains=tuple(c * flow for c in valve.flow_gains))
        joints.append(replace(j, link=link, drive=drive, valve=valve))
    return replace(chain, joints=tuple(joints))


def measure() -> dict[str, Any]:
    """The figures (module doc), as `bench/tracking.py` also reports them."""
    p = load_profile(PROFILE)
    chain, _, _ = p.chain_model()
    gains, limits = gains_limits(p)
    seconds = 12.0  # 2 s settle + one 10 s period
    cases = (
        ("pid", {"kind": "pid"}, None, gains),
        ("pid_p_only", {"kind": "pid"}, None, [g.replace(ff1=0.0) for g in gains]),
        ("pid_ff_model", {"kind": "pid_ff"}, chain, gains),
        ("pid_ff_measured", {"kind": "pid_ff", "pressure_source": "measured"}, chain, gains),
        ("pid_ff_model_10pct_off", {"kind": "pid_ff"}, off_by(chain, 1.1, 0.9), gains),
    )
    out: dict[str, Any] = {"joints": [j.name for j in p.joints]}
    for name, ctrl, params, gg in cases:
        runner = ExperimentRunner(experiment(ctrl), gg, limits, p.period, params)
        _, ref, q = SimLoop(p).run(runner, seconds)
        err = np.degrees(np.abs(ref[SKIP:] - q[SKIP:]))
        out[name] = {"rms_deg": rms_deg(ref, q, SKIP), "max_deg": err.max(axis=0).tolist()}
        print(name, out[name], file=sys.stderr)
    base = np.asarray(out["pid"]["rms_deg"])
    for name in ("pid_ff_model", "pid_ff_measured", "pid_ff_model_10pct_off"):
        out[name]["pid_over_ff"] = (base / np.asarray(out[name]["rms_deg"])).tolist()
    out["note"] = (
        "pid_ff_model/measured use the profile's chain, which is the simulator's plant: a "
        "reference only; pid_ff_model_10pct_off: bodies +10 %, flow gains -10 %"
    )
    return out


def _step_us(runner: ExperimentRunner, home: np.ndarray) -> float:
    """Best mean time of one runner step (µs) once its second segment runs."""
    fb = Feedback(home.size)
    fb.q[:], fb.p_cap[:], fb.p_rod[:] = home, 8e6, 8e6
    ref, volts = np.zeros(home.size), np.zeros(home.size)
    runner.enable(fb)
    for _ in range(2500):  # past the settle hold (or the approach) into the segment measured
        runner.step(fb, ref, volts)
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(1000):
            runner.step(fb, ref, volts)
        best = min(best, (time.perf_counter() - t0) / 1000)
    return 1e6 * best


def runner_step() -> dict[str, float]:
    """The model feed-forward's runner step on the excavator and on the 2-DOF rig (µs)."""
    p = load_profile(PROFILE)
    chain, home, _ = p.chain_model()
    gains, limits = gains_limits(p)
    exc = ExperimentRunner(experiment({"kind": "pid_ff"}), gains, limits, p.period, chain)
    p2 = load_profile(ROOT / "hw_profiles" / "sim-2dof.toml")
    g2, l2 = gains_limits(p2)
    d = sine_experiment(p2, {"kind": "pid_ff"}, seconds=20.0)
    two = ExperimentRunner(Experiment.from_dict(d), g2, l2, p2.period, plant_params(p2))
    e_us = _step_us(exc, np.asarray(home, dtype=float))
    t_us = _step_us(two, np.asarray(p2.home_rad()))
    return {"excavator_us": e_us, "two_dof_us": t_us, "excavator_over_two_dof": e_us / t_us}


def main() -> int:
    out = measure()
    out["runner_step"] = runner_step()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
