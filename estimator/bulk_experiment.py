"""An experiment that separates 1/b from the dead volumes: pressure excitation at both ends of
each piston's stroke, appended to the standard experiment.

Why the standard experiment cannot: each chamber's equation (estimator.models_lin) carries the
compressibility as ṗ·[(L/2 ± s) A · (1/b) + V0/b]. The two columns, ṗ (L/2 ± s) A and ṗ, differ
only through the piston position s at the moments the pressure moves; the standard experiment
moves each joint a few degrees around home, so (L/2 ± s) hardly changes and the pair is nearly
collinear (1/b flagged on every realistic variant). Holding the arm at the ends of its range
while the valve is driven with a sine (Sakai's open-loop valve excitation, seed 000, which
makes ṗ large at rest) puts the same ṗ at very different swept volumes: the two columns part.

The design is chosen by the condition number of that pair (`chamber_condition`, the worst
chamber): with the valve sine at home alone (the standard experiment's) the swept volume is a
single value; each added hold position widens its spread, and the extremes of the range (less
a margin for the sine's own excursion) widen it most. Both joints go to opposite ends at once
(joint 1 low with joint 2 high, then the other way), so two holds cover both ends of both
strokes, and the gravity load differs between them (the chambers sit at different pressure
levels). Generated and limit-checked like the other excitation (controller.checks):

    python -m estimator.bulk_experiment --profile hw_profiles/sim-2dof.toml \\
        --out experiments/standard-bulk-2dof.toml
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from controller.plant.dynamics import cylinder
from controller.plant.params import PlantParams

ROOT = Path(__file__).resolve().parents[1]
#: Margin inside the soft limits for the valve sine's excursion about the hold (degrees).
MARGIN_DEG = 9.0
#: The valve sine of each hold: the standard experiment's amplitude and frequency.
AMPLITUDE_V = 0.15
FREQUENCY_HZ = 1.0
CENTERING_V_PER_RAD = 1.0
HOLD_S = 6.0


def stroke_holds(lo_deg: Sequence[float], hi_deg: Sequence[float]) -> list[list[float]]:
    """Two hold positions (degrees) at opposite ends of every joint's range less `MARGIN_DEG`:
    joint 1 low with joint 2 high (and so on alternately), then the other way round."""
    lo = [float(x) + MARGIN_DEG for x in lo_deg]
    hi = [float(x) - MARGIN_DEG for x in hi_deg]
    first = [lo[j] if j % 2 == 0 else hi[j] for j in range(len(lo))]
    second = [hi[j] if j % 2 == 0 else lo[j] for j in range(len(lo))]
    return [first, second]


def chamber_condition(params: PlantParams, q: np.ndarray) -> float:
    """Worst chamber's condition number of the pair [ṗ (L/2 ± s) A, ṗ] (both scaled to the
    nominal dead volume) over joint positions `q` (K, n; rad), each with the same ṗ energy:
    how well 1/b and V0/b separate. ∞ when every position has the same swept volume."""
    s, _ = cylinder(params, np.atleast_2d(q))
    worst = 0.0
    for j in range(params.n):
        half = 0.5 * params.stroke[j]
        for swept in ((half + s[:, j]) * params.area_cap[j], (half - s[:, j]) * params.area_rod[j]):
            X = np.column_stack([swept / params.dead_volume[j], np.ones_like(swept)])
            # √ of the Gram matrix's eigenvalue ratio: one position gives a rank-1 pair (∞).
            ev = np.linalg.eigvalsh(X.T @ X)
            worst = max(worst, float(np.sqrt(ev[-1] / ev[0])) if ev[0] > 1e-12 * ev[-1] else np.inf)
    return worst


def experiment_positions(exp: Any, rate_hz: float = 20.0) -> np.ndarray:
    """Joint positions (K, n; rad) of an experiment's segments sampled in time (a hold's at
    its own position): the weights `chamber_condition` gives each part of the design."""
    out = []
    for seg in exp.segments:
        t = np.arange(0.0, seg.total, 1.0 / rate_hz)
        q, _, _ = seg.trajectory.sample(t)
        out.append(np.asarray(q))
    return np.vstack(out)


def hold_segments_toml(holds: Sequence[Sequence[float]]) -> str:
    """The `[[segments]]` of the holds with their valve sines, as TOML text."""
    n = len(holds[0])
    vec = lambda v: "[" + ", ".join(f"{x:g}" for x in v) + "]"  # noqa: E731
    out = []
    for k, q in enumerate(holds, start=1):
        out.append(
            f"""
[[segments]]
name = "stroke-end-{k}"
duration_s = {HOLD_S:g}
trajectory = {{ kind = "hold", position_deg = {vec(q)} }}
controller = {{ kind = "valve_sine", amplitude_v = {vec([AMPLITUDE_V] * n)}, frequency_hz = \
{vec([FREQUENCY_HZ] * n)}, centering_v_per_rad = {vec([CENTERING_V_PER_RAD] * n)} }}
"""
        )
    return "".join(out)


def load_experiment(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        return tomllib.load(f)


def main(argv: Sequence[str] | None = None) -> int:
    from controller.checks import check_experiment, describe
    from controller.experiment import Experiment
    from daq.param_set import planning_params
    from daq.profile import load_profile
    from daq.profile.plant import known_params
    from daq.service.control_api import joint_limits

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", type=Path, default=ROOT / "hw_profiles" / "sim-2dof.toml")
    ap.add_argument("--base", type=Path, default=ROOT / "experiments" / "standard-2dof.toml")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--params",
        type=Path,
        default=None,
        help="check the valve sines against this parameter file (an earlier identification); "
        "without it, against the profile's initial guesses, else by the centring bound alone",
    )
    args = ap.parse_args(argv)
    profile = load_profile(args.profile)
    # The hold positions and the chambers' condition need only the known geometry; predicting
    # the valve sines' excursion needs flow gains and loads, which come from what the engineer
    # knows (never the simulator's truth): without them the check uses the conservative
    # centring bound (controller.checks), as the service does with no parameters loaded.
    params = known_params(profile)
    try:
        planned = planning_params(profile, args.params)
    except ValueError as exc:
        if args.params is not None:
            print(f"bulk_experiment: {exc}", file=sys.stderr)
            return 2
        planned = None
        print(f"bulk_experiment: checked by the centring bound alone: {exc}", file=sys.stderr)
    lo = [j.limits.soft_min_deg for j in profile.joints]
    hi = [j.limits.soft_max_deg for j in profile.joints]
    holds = stroke_holds(lo, hi)
    base_text = args.base.read_text()
    base = load_experiment(args.base)
    text = (
        base_text.replace(f'name = "{base["name"]}"', f'name = "{base["name"]}-bulk"', 1)
        + "\n# Generated by estimator/bulk_experiment.py: the valve sine at both ends of every"
        + "\n# joint's range, so 1/b and the dead volumes separate (module doc).\n"
        + hold_segments_toml(holds)
    )
    args.out.write_text(text)
    exp = Experiment.from_dict(load_experiment(args.out))
    problems = check_experiment(exp, joint_limits(profile), planned)
    before = chamber_condition(params, experiment_positions(Experiment.from_dict(base)))
    after = chamber_condition(params, experiment_positions(exp))
    length = sum(s.total for s in exp.segments)
    print(
        f"{args.out}: holds {holds} deg; worst chamber condition of [swept·1/b, V0/b]: "
        f"{args.base.name} {before:.3g} → with the holds {after:.3g}; {length:.0f} s of "
        "segments (approach moves not counted)"
    )
    for v in problems:
        print(f"limit: {describe(v)}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
