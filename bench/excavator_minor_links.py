"""The thesis's Figure 33 (seed 002, §4.4.1): joint torques and jack forces of the excavator
along the simulated trajectories of Figures 30-32, computed with the complete model (jacks'
cylinders and pistons as bodies) and the reduced one (major links only). Ignoring the minor
links underestimates the actuator loads, the thesis finds, the proximal links most.

For each joint: RMS and peak of the complete model's actuator load (N·m for the swing motor,
N for the jacks, summed over the boom's pair), the reduced model's error relative to the
complete RMS, and the share of samples where the reduced model's load is smaller in
magnitude. Run on the thesis's three links (bucket detached, as its §4.4) and on the full
four-joint machine. Also: one 1 ms plant step (RK4, 4 substeps) of the excavator against the
2-DOF reference plant in the same run (ratio, since the machine may be loaded).

    python bench/excavator_minor_links.py [--seconds S]

Prints its figures as JSON on the last line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.plant import dynamics
from controller.plant.chain.model import Chain, Motor
from controller.plant.chain.plant import ChainPlant, equilibrium_state
from controller.plant.chain.profile import load_chain_profile
from daq.profile import load_profile
from daq.profile.plant import sim_plant

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "hw_profiles" / "sim-excavator.toml"
#: Figures 30-32: the swing turns ≈ ±20°, the boom ≈ ±15°, the stick ≈ ±30° (peak stick rate
#: ≈ 1.5 rad/s), all at once; the bucket (when present) ±30°. Amplitude (deg), frequency (Hz).
MOTION = [(20.0, 0.2), (15.0, 0.4), (30.0, 0.5), (30.0, 0.6)]


def trajectory(home: np.ndarray, seconds: float, dt: float = 0.01):  # type: ignore[no-untyped-def]
    t = np.arange(0.0, seconds, dt)
    n = len(home)
    q = np.empty((len(t), n))
    qd = np.empty_like(q)
    qdd = np.empty_like(q)
    for i in range(n):
        a, f = np.radians(MOTION[i][0]), MOTION[i][1]
        w = 2.0 * np.pi * f
        q[:, i] = home[i] + a * np.sin(w * t)
        qd[:, i] = a * w * np.cos(w * t)
        qdd[:, i] = -a * w * w * np.sin(w * t)
    return t, q, qd, qdd


def actuator_loads(
    chain: Chain, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Joint torques (N·m) and actuator loads: the motor's torque at the joint (N·m) or the
    joint's total jack force (N), for each joint and sample."""
    plant = ChainPlant(chain)
    out = np.empty_like(q)
    torques = np.empty_like(q)
    for k in range(len(q)):
        tau = plant.inverse_dynamics(q[k], qd[k], qdd[k])
        torques[k] = tau
        lengths = plant.jack_lengths(q[k])
        jk = 0
        for i, joint in enumerate(chain.joints):
            if isinstance(joint.drive, Motor) or joint.drive is None:
                out[k, i] = tau[i]
            else:
                # A joint's jacks share one pressure pair: τ = F_total ℓ′ (identical jacks).
                out[k, i] = tau[i] / lengths[jk, 1]
                jk += len(joint.drive)
    return torques, out


def compare(chain: Chain, home: np.ndarray, seconds: float) -> dict[str, dict[str, float]]:
    _, q, qd, qdd = trajectory(home, seconds)
    tau_full, full = actuator_loads(chain, q, qd, qdd)
    tau_reduced, reduced = actuator_loads(chain.without_minor_links(), q, qd, qdd)
    out = {}
    for i, name in enumerate(chain.names):
        rms = float(np.sqrt(np.mean(full[:, i] ** 2)))
        err = full[:, i] - reduced[:, i]
        out[name] = {
            "complete_rms": rms,
            "complete_peak": float(np.max(np.abs(full[:, i]))),
            "reduced_rms": float(np.sqrt(np.mean(reduced[:, i] ** 2))),
            "error_rms_rel": float(np.sqrt(np.mean(err**2)) / rms),
            "error_peak_rel": float(np.max(np.abs(err)) / rms),
            "underestimated_share": float(np.mean(np.abs(reduced[:, i]) < np.abs(full[:, i]))),
            # The same error as a joint torque, comparable across joints.
            "joint_torque_error_rms_nm": float(
                np.sqrt(np.mean((tau_full[:, i] - tau_reduced[:, i]) ** 2))
            ),
        }
    return out


def step_timing(repeats: int = 2000) -> dict[str, float]:
    """Median wall time of one 1 ms step (RK4, 4 substeps) of the excavator and of the 2-DOF
    reference plant, nominal model, measured in the same run."""
    profile = load_chain_profile(PROFILE)
    plant = ChainPlant(profile.chain)
    x = equilibrium_state(plant, profile.home, 5.0e6)
    from controller.plant.chain.hydraulics import integrate_chain

    work = np.empty((5, len(x)))
    v = np.zeros(plant.n)
    args = (plant.C, plant.L, plant.J, plant.F, plant.E)

    def chain_step() -> None:
        integrate_chain(x, v, *args, 1e-3, 4, work, plant.ws, True)

    params, _ = sim_plant(load_profile(ROOT / "hw_profiles" / "sim-2dof.toml"))
    x2 = dynamics.equilibrium_state(params, np.array([0.7, 0.5]))
    work2 = np.empty((5, len(x2)))
    packed = params.pack()
    v2 = np.zeros(2)

    def planar_step() -> None:
        dynamics.integrate(x2, v2, packed, 1e-3, 4, work2)

    out = {}
    for name, fn in (("excavator", chain_step), ("sim_2dof", planar_step)):
        fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[f"{name}_step_us"] = float(np.median(times) * 1e6)
    out["excavator_over_2dof"] = out["excavator_step_us"] / out["sim_2dof_step_us"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--seconds", type=float, default=5.0, help="trajectory length (Figures 30-32: 5 s)"
    )
    args = ap.parse_args()
    profile = load_chain_profile(PROFILE)
    thesis = dataclasses.replace(profile.chain, joints=profile.chain.joints[:3])
    result = {
        "thesis_three_links": compare(thesis, profile.home[:3], args.seconds),
        "with_bucket": compare(profile.chain, profile.home, args.seconds),
        "timing": step_timing(),
    }
    for case in ("thesis_three_links", "with_bucket"):
        rel = {k: round(v["error_rms_rel"], 3) for k, v in result[case].items()}
        under = {k: round(v["underestimated_share"], 2) for k, v in result[case].items()}
        nm = {k: round(v["joint_torque_error_rms_nm"]) for k, v in result[case].items()}
        print(
            f"{case}: reduced-model error / complete RMS {rel}; as joint torque (N·m) {nm}; "
            f"share underestimated {under}"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
