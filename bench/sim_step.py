"""Simulator speed: one 1 ms step including sensors and converters, and virtual-time throughput
of the simulator alone and of the whole service (`rig-daq --virtual-time`).

Prints its figures as JSON on the last line. Timings are also quoted as ratios: against the
1 ms loop period, and against scipy's solve_ivp (DOP853) integrating the same equations (with
the profile's effects beyond the model) for the same 1 ms, measured in the same run. The
service's rate is rig seconds per wall second between a short and a long run, so its start-up
cancels out.

    python bench/sim_step.py [--steps N] [--profile P] [--service-s S]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.integrate import solve_ivp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.plant import dynamics
from daq.backends.sim import SimBackend
from daq.backends.sim.backend import SUBSTEPS
from daq.profile import load_profile

TARGET_STEP_US = 20.0  # issue #12: median step with every effect on
TARGET_SERVICE_SPEED = 20.0  # issue #12: rig seconds per wall second, virtual time


def _service_wall(profile: str, seconds: float) -> float:
    """Wall time of `rig-daq --virtual-time --duration seconds` (no network, no recording)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "daq.service", "--profile", profile, "--virtual-time"]
        cmd += ["--duration", str(seconds), "--no-network", "--run-dir", tmp]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=Path(__file__).parents[1])
        return time.perf_counter() - t0


def service_speed(profile: str, seconds: float) -> float:
    """Rig seconds per wall second of the service in virtual time (start-up cancelled)."""
    short = 0.1 * seconds
    return (seconds - short) / (_service_wall(profile, seconds) - _service_wall(profile, short))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument(
        "--profile", default=str(Path(__file__).parents[1] / "hw_profiles/sim-2dof.toml")
    )
    ap.add_argument("--service-s", type=float, default=60.0, help="rig seconds of the long run")
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
    effects = backend.true_effects.pack(params)
    x = np.append(dynamics.equilibrium_state(params, home), backend.true_effects.initial_c)

    def f(_t: float, y: np.ndarray) -> np.ndarray:
        dx = np.empty(len(y))
        dynamics.derivative_fx(y, volts, params.pack(), effects, dx)
        return dx

    # Same run, integration only: the plant with its effects against the nominal plant.
    work = np.zeros((5, len(x)))
    xe = x.copy()
    plant_us = {}
    for label, fx in (("effects", effects), ("nominal", dynamics.NOMINAL_EFFECTS)):
        best = np.inf
        for _ in range(5):
            t0 = clock()
            for _ in range(2000):
                dynamics.integrate_fx(xe, volts, params.pack(), fx, period, SUBSTEPS, work)
            best = min(best, (clock() - t0) / 2000 / 1e3)
        plant_us[label] = best

    n_ref = 300
    t0 = clock()
    for _ in range(n_ref):
        x = solve_ivp(
            f,
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
        "target_median_us": TARGET_STEP_US,
        "meets_target": median_us <= TARGET_STEP_US,
        "step_over_period_ratio": round(median_us * 1e-6 / period, 4),
        "solve_ivp_step_us": round(ref_us, 1),
        "speedup_vs_solve_ivp": round(ref_us / median_us, 1),
        "virtual_time_sim_s_per_wall_s": round(args.steps * period / wall, 1),
        "integrate_us_with_effects": round(plant_us["effects"], 2),
        "integrate_us_nominal": round(plant_us["nominal"], 2),
        "effects_cost_ratio": round(plant_us["effects"] / plant_us["nominal"], 2),
    }
    service = service_speed(args.profile, args.service_s)
    figures.update(
        service_virtual_s_per_wall_s=round(service, 1),
        service_target=TARGET_SERVICE_SPEED,
        service_meets_target=service >= TARGET_SERVICE_SPEED,
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
