"""The excavator held at home by the service: a recorded run's hold error per joint.

    python -m daq.service --profile hw_profiles/sim-excavator.toml --virtual-time \
        --duration 10 --record --arm --no-network --run-dir runs
    python bench/excavator_hold.py runs/simexcavator-*.rigrun

Prints, per joint, the largest |measured angle − reference| over the ARMED rows (the
resolver's reading: its 14-bit step is 0.022°, its noise 0.02° 1σ), the largest distance of
the reading from its mean over all rows, and the rows, states and faults recorded; the same
figures as JSON on the last line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daq.loop.states import State
from daq.recording import read_run


def hold_errors(path: Path) -> dict[str, object]:
    """{'rows', 'complete', 'armed_rows', 'faults', 'joints': {name: max error in degrees}}."""
    run = read_run(path)
    seq = run.column("seq")
    state = run.column("state")
    armed = state == State.ARMED
    joints = [c.removeprefix("ref.") for c in run.columns if c.startswith("ref.")]
    errors = {}
    spread = {}
    for j in joints:
        q = run.column(f"eng.q_{j}")
        err = np.degrees(q - run.column(f"ref.{j}"))[armed]
        errors[j] = float(np.max(np.abs(err))) if err.size else float("nan")
        # Armed or not: how far the reading strays from its own mean (the arm's motion plus
        # the resolver's noise).
        spread[j] = float(np.max(np.abs(np.degrees(q - np.mean(q)))))
    return {
        "rows": len(seq),
        "contiguous": bool(np.array_equal(seq, np.arange(seq[0], seq[0] + len(seq)))),
        "complete": bool(run.complete),
        "armed_rows": int(armed.sum()),
        "faults": int(np.count_nonzero(run.column("fault"))),
        "joints": errors,
        "spread": spread,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a run file (.rigrun)")
    out = hold_errors(ap.parse_args().run)
    print(
        f"rows {out['rows']} (contiguous {out['contiguous']}, complete {out['complete']}), "
        f"ARMED {out['armed_rows']}, rows with a fault {out['faults']}"
    )
    spread = out["spread"]
    for j, e in out["joints"].items():  # type: ignore[attr-defined]
        print(
            f"  {j:>8}: max hold error {e:.4f}° (ARMED rows), "
            f"max |q − mean q| {spread[j]:.4f}° (all rows)"  # type: ignore[index]
        )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
