"""Controller benchmark (tracking): PID cost against simple-pid, runner cost, MFS
optimisation time and condition numbers, tracking on the simulator. Prints a JSON summary on
its last line.

    /work/venv/bin/python bench/tracking.py [--quick]

Timings are quoted as ratios to a reference measured in the same run (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.excitation import max_single_sine, optimise_mfs, trajectory_condition  # noqa: E402
from controller.experiment import Experiment  # noqa: E402
from controller.feedback import Feedback  # noqa: E402
from controller.pid import Pid, PidParams  # noqa: E402
from controller.runner import ExperimentRunner  # noqa: E402
from daq.profile import load_profile  # noqa: E402
from daq.profile.plant import plant_params  # noqa: E402
from daq.profile.schema import Profile  # noqa: E402
from daq.sim_closed_loop import SimLoop, gains_limits, rms_deg, sine_experiment  # noqa: E402

log = logging.getLogger("bench.tracking")


def profile(name: str) -> Profile:
    return load_profile(ROOT / "hw_profiles" / f"{name}.toml")


def _best_of(fn: object, repeats: int = 5) -> float:
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best


def pid_cost(n: int) -> dict[str, float]:
    """Per-update cost of our Pid and of simple_pid.PID on the same command/feedback stream."""
    from simple_pid import PID as SimplePid

    rng = np.random.default_rng(0)
    cmd = (0.1 * np.sin(np.arange(n) * 2e-3) + 0.7).tolist()
    fb = (np.asarray(cmd) + 1e-3 * rng.standard_normal(n)).tolist()
    ours = Pid(PidParams(p=1.5, i=0.5, d=0.01, ff1=0.25, max_output=6.0, d_filter_hz=50.0), 1e-3)
    ours.enable(cmd[0], fb[0])
    theirs = SimplePid(1.5, 0.5, 0.01, setpoint=cmd[0], sample_time=None, output_limits=(-6.0, 6.0))

    def run_ours() -> None:
        u = ours.update
        for c, f in zip(cmd, fb, strict=True):
            u(c, f)

    def run_theirs() -> None:
        for c, f in zip(cmd, fb, strict=True):
            theirs.setpoint = c
            theirs(f, dt=1e-3)

    def run_empty() -> None:  # the loop itself, to subtract
        for _c, _f in zip(cmd, fb, strict=True):
            pass

    t_empty = _best_of(run_empty)
    t_ours = _best_of(run_ours) - t_empty
    t_theirs = _best_of(run_theirs) - t_empty
    return {
        "ours_ns": 1e9 * t_ours / n,
        "simple_pid_ns": 1e9 * t_theirs / n,
        "ratio_ours_over_simple_pid": t_ours / t_theirs,
    }


def runner_cost(n: int, pid_ns: float) -> dict[str, float]:
    """One ExperimentRunner.step (2 joints, MFS + model feed-forward) in PID-update units."""
    p = profile("sim-2dof")
    gains, limits = gains_limits(p)
    with open(ROOT / "experiments" / "standard-2dof.toml", "rb") as f:
        d = tomllib.load(f)
    mfs = next(s for s in d["segments"] if s["name"] == "mfs")
    mfs["controller"] = {"kind": "pid_ff", "pressure_source": "measured"}
    d["segments"] = [mfs]
    r = ExperimentRunner(Experiment.from_dict(d), gains, limits, p.period, plant_params(p))
    fb = Feedback(2)
    fb.q[:] = np.radians([40.0, 30.0])
    fb.p_cap[:] = 3.4e6
    fb.p_rod[:] = 3.0e6
    r.enable(fb)
    ref, volts = np.zeros(2), np.zeros(2)

    def run() -> None:
        for _ in range(n):
            r.step(fb, ref, volts)

    t = _best_of(run, 3) / n
    return {"runner_step_us": 1e6 * t, "runner_step_over_pid_update": 1e9 * t / pid_ns}


def conditions(quick: bool) -> dict[str, object]:
    p = profile("sim-2dof")
    params = plant_params(p)
    _, limits = gains_limits(p)
    home = p.home_rad()
    kw = {"restarts": 1, "maxiter": 40, "n_samples": 120} if quick else {}
    sine = max_single_sine(home, 0.1, limits)
    out: dict[str, object] = {}
    t_eval = _best_of(lambda: trajectory_condition(sine, "mechanical", params, 200), 5)
    for model in ("mechanical", "fluid", "both"):
        res = optimise_mfs(home, 0.1, 5, limits, model=model, params=params, seed=3, **kw)
        row = {
            "seconds": res.seconds,
            "seconds_over_one_condition_eval": res.seconds / t_eval,
            "success": res.success,
        }
        for m in ("mechanical", "fluid"):
            c_mfs = trajectory_condition(res.trajectory, m, params)
            c_sine = trajectory_condition(sine, m, params)
            row[f"cond_{m}"] = c_mfs
            row[f"cond_{m}_single_sine"] = c_sine
            row[f"{m}_improvement"] = c_sine / c_mfs
        out[f"optimised_for_{model}"] = row
    with open(ROOT / "experiments" / "standard-2dof.toml", "rb") as f:
        exp = Experiment.from_dict(tomllib.load(f))
    std = next(s for s in exp.segments if s.name == "mfs").trajectory
    out["standard_2dof_mfs"] = {
        m: trajectory_condition(std, m, params) for m in ("mechanical", "fluid")
    }
    return out


def tracking(seconds: float) -> dict[str, object]:
    p = profile("sim-2dof")
    gains, limits = gains_limits(p)
    params = plant_params(p)
    out: dict[str, object] = {}
    for name, ctrl in (
        ("pid", {"kind": "pid"}),
        ("pid_ff_model", {"kind": "pid_ff"}),
        ("pid_ff_measured", {"kind": "pid_ff", "pressure_source": "measured"}),
        ("pid_ff1", {"kind": "pid", "pid": [{"ff1": 0.25}, {"ff1": 0.16}]}),
    ):
        d = sine_experiment(p, ctrl, seconds=seconds)
        d["pid"] = {"p": 1.5}
        r = ExperimentRunner(Experiment.from_dict(d), gains, limits, p.period, params)
        _, ref, q = SimLoop(p).run(r, seconds)
        out[f"rms_deg_{name}"] = rms_deg(ref, q, 1000)
    base = np.asarray(out["rms_deg_pid"])
    out["pid_over_ff_model"] = (base / np.asarray(out["rms_deg_pid_ff_model"])).tolist()
    out["pid_over_ff_measured"] = (base / np.asarray(out["rms_deg_pid_ff_measured"])).tolist()
    # Holding with the profile's gains, and with p = 8 (the hydraulic resonance: limit cycle).
    from controller.runner import HoldRunner

    for name, gg in (("hold_profile_gains", gains), ("hold_p8", [g.replace(p=8.0) for g in gains])):
        _, ref, q = SimLoop(p).run(HoldRunner(gg, limits, p.period), 3.0)
        x = q[1000:, 0] - q[1000:, 0].mean()
        f = np.fft.rfftfreq(x.size, p.period)[np.argmax(np.abs(np.fft.rfft(x)))]
        out[name] = {"p": gg[0].p, "rms_deg": rms_deg(ref, q, 1000), "peak_hz": float(f)}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller optimisation and counts")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    n = 20_000 if args.quick else 200_000
    res: dict[str, object] = {}
    res["pid"] = pid_cost(n)
    log.info("pid: %s", res["pid"])
    res["runner"] = runner_cost(n // 10, res["pid"]["ours_ns"])  # type: ignore[index]
    log.info("runner: %s", res["runner"])
    res["conditions"] = conditions(args.quick)
    log.info("conditions: %s", res["conditions"])
    res["tracking_1hz_5deg"] = tracking(4.0)
    log.info("tracking: %s", res["tracking_1hz_5deg"])
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
