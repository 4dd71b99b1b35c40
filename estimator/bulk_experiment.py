"""An experiment that separates 1/b from the dead volumes: pressure excitation at both ends of
each piston's stroke, appended to the standard experiment.

Why the standard experiment cannot: each chamber's equation (estimator.models_lin) carries the
compressibility as ṗ·[(L/2 ± s) A · (1/b) + V0/b]. The two columns, ṗ (L/2 ± s) A and ṗ, differ
only through the piston position s at the moments the pressure moves; the standard experiment
moves each joint a few degrees around home, so (L/2 ± s) hardly changes and the pair is nearly
collinear (1/b flagged on every realistic variant). Holding the arm at the ends of its range
while the valve is driven with a sine (Sakai's open-loop valve excitation, seed 000, which
makes ṗ large at rest) puts the same ṗ at very different swept volumes: the two columns part.

Where: the holds widen the spread of swept volumes, measured by the condition number of that
pair (`chamber_condition`, the worst chamber): with the valve sine at home alone (the standard
experiment's) the swept volume is a single value; the extremes of the range (less a margin for
the sine's own excursion) widen it most. Both joints go to opposite ends at once (joint 1 low
with joint 2 high, then the other way), so two holds cover both ends of both strokes, and the
gravity load differs between them (the chambers sit at different pressure levels).

How fast: the share of the valve's flow that compresses oil rather than moving the piston grows
as (f/f_h)², f_h the oil column's natural frequency (controller.hydraulic_linear; 12–32 Hz at
the realistic rig's holds, damping ratio 0.01–0.05). At the standard experiment's 1 Hz it is
under 1 %, and the pair stayed unresolved with the holds (1/b flagged, the weak direction's
singular value 26 → 49). The sine runs at `FREQUENCY_FRACTION` of the lowest f_h over the
holds, from the planning parameters (an earlier identification or the profile's guesses):
a quarter of the flow compresses oil, and the lightly damped column is driven at only 1.33× its
static response, which leaves room for f_h itself being off (it scales with √b). Its amplitude is
the largest of `AMPLITUDES_V` the limit check passes (controller.checks; the acceleration limit
binds). On the realistic rig that is 6 Hz at 35 mV, which resolves 1/b and all four V0/b
(docs/estimator.md).

The holds are marked `identify = "fluid"` (estimator.segment_rows): the mechanical model does
not use their rows. Generated and limit-checked like the other excitation (controller.checks):

    python -m estimator.bulk_experiment --profile hw_profiles/sim-2dof-realistic.toml \\
        --params batch-params.toml --out experiments/standard-bulk-2dof.toml
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
#: Without planning parameters (no f_h): the standard experiment's valve sine.
AMPLITUDE_V = 0.15
FREQUENCY_HZ = 1.0
CENTERING_V_PER_RAD = 1.0
HOLD_S = 8.0
#: The valve sine's frequency over the lowest oil-column frequency at the holds (module doc).
FREQUENCY_FRACTION = 0.5
#: Amplitudes tried, largest first, until the limit check passes (V).
AMPLITUDES_V = (0.15, 0.1, 0.07, 0.05, 0.035, 0.025, 0.018, 0.012)


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


def hold_segments_toml(
    holds: Sequence[Sequence[float]],
    amplitude_v: float = AMPLITUDE_V,
    frequency_hz: float = FREQUENCY_HZ,
    hold_s: float = HOLD_S,
) -> str:
    """The `[[segments]]` of the holds with their valve sines, as TOML text."""
    n = len(holds[0])
    vec = lambda v: "[" + ", ".join(f"{x:g}" for x in v) + "]"  # noqa: E731
    out = []
    for k, q in enumerate(holds, start=1):
        out.append(
            f"""
[[segments]]
name = "stroke-end-{k}"
duration_s = {hold_s:g}
trajectory = {{ kind = "hold", position_deg = {vec(q)} }}
identify = "fluid"
controller = {{ kind = "valve_sine", amplitude_v = {vec([amplitude_v] * n)}, frequency_hz = \
{vec([frequency_hz] * n)}, centering_v_per_rad = {vec([CENTERING_V_PER_RAD] * n)} }}
"""
        )
    return "".join(out)


def sine_frequency(planned: Any, holds_deg: Sequence[Sequence[float]]) -> float:
    """`FREQUENCY_FRACTION` of the lowest oil-column natural frequency over the holds and
    joints (Hz, rounded down to 0.5 Hz, at least 0.5 Hz)."""
    from controller.hydraulic_linear import hydraulic_mode

    f_h = min(
        hydraulic_mode(planned, j, np.radians(np.asarray(q, dtype=float)))[0]
        for q in holds_deg
        for j in range(len(q))
    )
    return max(0.5, float(np.floor(2.0 * FREQUENCY_FRACTION * f_h) / 2.0))


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
    ap.add_argument(
        "--amplitude-v", type=float, default=None,
        help="valve sine (V); default the largest of AMPLITUDES_V the limit check passes",
    )  # fmt: skip
    ap.add_argument(
        "--frequency-hz", type=float, default=None,
        help="valve sine (Hz); default FREQUENCY_FRACTION of the lowest oil-column frequency",
    )  # fmt: skip
    ap.add_argument("--hold-s", type=float, default=HOLD_S, help="each hold's length (s)")
    args = ap.parse_args(argv)
    profile = load_profile(args.profile)
    # The hold positions and the chambers' condition need only the known geometry; predicting
    # the valve sines' excursion needs flow gains and loads, and the oil column's frequency the
    # bulk modulus and inertia, which come from what the engineer knows (never the simulator's
    # truth): without them the check uses the conservative centring bound (controller.checks),
    # as the service does with no parameters loaded, and the sine is the standard one.
    params = known_params(profile)
    try:
        planned = planning_params(profile, args.params)
    except ValueError as exc:
        if args.params is not None:
            print(f"bulk_experiment: {exc}", file=sys.stderr)
            return 2
        planned = None
        print(
            f"bulk_experiment: the standard 1 Hz sine, checked by the centring bound alone: {exc}",
            file=sys.stderr,
        )
    lo = [j.limits.soft_min_deg for j in profile.joints]
    hi = [j.limits.soft_max_deg for j in profile.joints]
    holds = stroke_holds(lo, hi)
    freq = args.frequency_hz
    if freq is None:
        freq = FREQUENCY_HZ if planned is None else sine_frequency(planned, holds)
    ladder = (args.amplitude_v,) if args.amplitude_v is not None else AMPLITUDES_V
    if planned is None and args.amplitude_v is None:
        ladder = (AMPLITUDE_V,)
    base_text = args.base.read_text()
    base = load_experiment(args.base)
    for amplitude in ladder:
        text = (
            base_text.replace(f'name = "{base["name"]}"', f'name = "{base["name"]}-bulk"', 1)
            + "\n# Generated by estimator/bulk_experiment.py: the valve sine at both ends of every"
            + "\n# joint's range, so 1/b and the dead volumes separate (module doc).\n"
            + hold_segments_toml(holds, amplitude, freq, args.hold_s)
        )
        exp = Experiment.from_dict(tomllib.loads(text))
        problems = check_experiment(exp, joint_limits(profile), planned)
        if not problems:
            break
    args.out.write_text(text)
    before = chamber_condition(params, experiment_positions(Experiment.from_dict(base)))
    after = chamber_condition(params, experiment_positions(exp))
    length = sum(s.total for s in exp.segments)
    print(
        f"{args.out}: holds {holds} deg, valve sine {amplitude:g} V at {freq:g} Hz; worst "
        f"chamber condition of [swept·1/b, V0/b]: {args.base.name} {before:.3g} → with the "
        f"holds {after:.3g}; {length:.0f} s of segments (approach moves not counted)"
    )
    for v in problems:
        print(f"limit: {describe(v)}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
