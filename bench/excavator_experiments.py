"""Design the excavator's two identification experiments and write them as experiment files.

* experiments/excavator-linkwise.toml: link by link from the end effector (bucket, stick, boom,
  swing; the thesis's Figures 16–18 and 35), each joint an MFS within its window, 2 periods;
* experiments/excavator-multisine.toml: one MFS over all joints at once, optimised
  (controller.excitation.optimise_mfs with estimator.predict.sigma_cost) for the predicted σ
  of every base parameter of the complete model — the Fisher information of the chain's
  regressor along the plan, each joint weighted by its pressure transducers' noise.

Both stay inside `controller.chain_experiments.chain_limits` (the jack strokes' windows less
3°, half the valve's flow, 1.5 s⁻¹ × that in acceleration). Prints, for each, the summed log
of the predicted relative σ (the optimiser's cost) as JSON on the last line.

    python bench/excavator_experiments.py [--maxiter N] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.chain_experiments import (  # noqa: E402
    all_joints_mfs,
    chain_limits,
    experiment_dict,
    link_by_link,
    optimised_multisine,
)
from controller.plant.chain.profile import load_chain_profile  # noqa: E402
from estimator.base_params import identifiability  # noqa: E402
from estimator.chain_identify import pressure_sigma  # noqa: E402
from estimator.chain_regressor import ChainRegressor  # noqa: E402
from estimator.predict import chain_q_range, sigma_cost  # noqa: E402

PROFILE = ROOT / "hw_profiles" / "sim-excavator.toml"
ACCEL_PER_SPEED = 1.5


def _value(v: object) -> str:
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v))


def to_toml(d: dict[str, object], header: str) -> str:
    out = [header.rstrip(), ""]
    for k, v in d.items():
        if k != "segments":
            out.append(f"{k} = {_value(v)}")
    for seg in d["segments"]:  # type: ignore[attr-defined]
        out += ["", "[[segments]]"]
        out += [f"{k} = {_value(v)}" for k, v in seg.items()]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--maxiter", type=int, default=30)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument(
        "--no-optimise",
        action="store_true",
        help="write the unoptimised all-joints MFS (the optimiser's baseline) instead",
    )
    args = ap.parse_args()
    prof = load_chain_profile(PROFILE)
    chain = prof.chain
    lims = chain_limits(chain, prof.home, accel_per_speed=ACCEL_PER_SPEED)
    reg = ChainRegressor(chain)
    bp = identifiability(reg.matrix, reg.names, chain_q_range(chain, prof.home))
    theta = bp.values(reg.parameters())
    _, sp = pressure_sigma(prof.sensors["better"])
    tc, tr = reg.torque_per_pressure(prof.home[None, :])
    out_sigma = np.sqrt(tc[0] ** 2 + tr[0] ** 2) * sp

    def regressor(q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> np.ndarray:
        return bp.reduce(reg.matrix(q, qd, qdd))

    cost = sigma_cost(regressor, theta, range(bp.rank), out_sigma, floor=np.ones(bp.rank))
    names = [j.link.name for j in chain.joints]
    base_hz, repeats = 0.1, 2
    lbl = link_by_link(prof.home, lims, base_hz=base_hz, repeats=repeats)
    # Both costs on the same number of samples over the same 80 s (20 Hz): the information
    # grows with the samples, so only equal durations compare.
    t = np.linspace(0, lbl.duration, 1600, endpoint=False)
    cost_lbl = cost(t, *lbl.sample(t))
    t0 = time.perf_counter()
    base_traj, base_a, base_b = all_joints_mfs(prof.home, lims, base_hz=base_hz)
    ms_repeats = round(lbl.duration * base_hz)
    t = np.linspace(0, lbl.duration, 1600, endpoint=False)
    cost_base = cost(t, *base_traj.sample(t % base_traj.duration))
    if args.no_optimise:
        ms_a, ms_b, ok, cost_ms = base_a, base_b, False, cost_base
    else:
        ms = optimised_multisine(prof.home, lims, cost, base_hz=base_hz, maxiter=args.maxiter)
        ms_a, ms_b, ok = ms.a, ms.b, ms.success
        cost_ms = cost(t, *ms.trajectory.sample(t % ms.trajectory.duration))
    secs = time.perf_counter() - t0
    header = (
        "# {title}\n# Written by bench/excavator_experiments.py from hw_profiles/sim-excavator.toml"
        "\n# (limits: controller.chain_experiments.chain_limits, accel_per_speed = 1.5). The\n"
        "# service runs it (rigctl run, docs/excavator.md); estimator.chain_simdata runs it\n"
        "# offline and `rigctl predict` predicts its parameters' σ. Angles in degrees."
    )
    files = {}
    lbl_dict = experiment_dict(
        "excavator-linkwise",
        "Link by link from the end effector (thesis Figures 16-18, 35): "
        + ", ".join(names[j] for j, _, _ in lbl.coefficients),
        prof.home,
        [(f"{names[j]}-only", a, b) for j, a, b in lbl.coefficients],
        base_hz,
        repeats,
    )
    files["excavator-linkwise"] = to_toml(
        lbl_dict, header.format(title="The excavator link by link, from the end effector.")
    )
    ms_dict = experiment_dict(
        "excavator-multisine",
        "One MFS over all joints, "
        + (
            "random, scaled to the limits (not optimised)"
            if args.no_optimise
            else "optimised for the predicted σ of every base parameter"
        ),
        prof.home,
        [("all-joints", ms_a, ms_b)],
        base_hz,
        ms_repeats,
    )
    files["excavator-multisine"] = to_toml(
        ms_dict,
        header.format(title="The excavator: a multisine (MFS) over all joints at once."),
    )
    if not args.no_write:
        for name, text in files.items():
            (ROOT / "experiments" / f"{name}.toml").write_text(text)
    print(
        json.dumps(
            {
                "linkwise_cost": round(float(cost_lbl), 2),
                "all_joints_unoptimised_cost": round(float(cost_base), 2),
                "multisine_cost": round(float(cost_ms), 2),
                "multisine_optimiser_s": round(secs, 1),
                "multisine_optimised": not args.no_optimise,
                "multisine_success": ok,
                "base_parameters": bp.rank,
            }
        )
    )


if __name__ == "__main__":
    main()
