"""Simulator speed: one 1 ms step including sensors and converters, and virtual-time throughput.

Prints its figures as JSON on the last line. Timings are also quoted as ratios: against the
1 ms loop period, and against scipy's solve_ivp (DOP853) integrating the same equations for the
same 1 ms, measured in the same run.

    python bench/sim_step.py [--steps N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy.integrate import solve_ivp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.plant import dynamics
from daq.backends.sim import SimBackend
from daq.profile import load_profile


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument(
        "--profile", default=str(Path(__file__).parents[1] / "hw_profiles/sim-2dof.toml")
    )
    args = ap.parse_args()
    profile = load_profile(args.profile)
    backend = SimBackend.from_profile(profile)
    backend.open()
    raw = np.zeros(backend.n_inputs)
    volts = np.zeros(backend.n_outputs)
    period = profile.period
    home = np.array(profile.home_rad())
    for k in range(2000):  # warm-up: numba compilation, caches
        backend.read(k * period, raw)
        backend.write(k * period, volts)
        backend.advance(period)

    # One cycle as the loop does it: read sensors, write the D/A, advance the plant.
    per_step = np.empty(args.steps)
    clock = time.perf_counter_ns
    t_start = clock()
    for k in range(args.steps):
        t0 = clock()
        t = (2000 + k) * period
        backend.read(t, raw)
        volts[0] = 0.3 * np.sin(2 * np.pi * t)
        volts[1] = -0.3 * np.sin(2 * np.pi * 1.3 * t)
        backend.write(t, volts)
        backend.advance(period)
        per_step[k] = clock() - t0
    wall = (clock() - t_start) * 1e-9
    median_us = float(np.median(per_step) / 1e3)

    # Reference: solve_ivp on the same equations for the same 1 ms steps.
    params = backend.true_params
    x = dynamics.equilibrium_state(params, home)
    n_ref = 300
    t0 = clock()
    for _ in range(n_ref):
        x = solve_ivp(
            lambda _t, y: dynamics.state_derivative(params, y, volts),
            (0.0, period),
            x,
            method="DOP853",
            rtol=1e-6,
            atol=1e-9,
        ).y[:, -1]
    ref_us = (clock() - t0) / n_ref / 1e3

    figures = {
        "benchmark": "sim_step",
        "steps": args.steps,
        "step_median_us": round(median_us, 2),
        "step_p99_us": round(float(np.percentile(per_step, 99) / 1e3), 2),
        "step_max_us": round(float(per_step.max() / 1e3), 2),
        "target_median_us": 60.0,
        "meets_target": median_us <= 60.0,
        "step_over_period_ratio": round(median_us * 1e-6 / period, 4),
        "solve_ivp_step_us": round(ref_us, 1),
        "speedup_vs_solve_ivp": round(ref_us / median_us, 1),
        "virtual_time_sim_s_per_wall_s": round(args.steps * period / wall, 1),
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
