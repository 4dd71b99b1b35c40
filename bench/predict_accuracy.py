"""`rigctl predict` against reality on a 1-/2-DOF service profile: the σ predicted before the
rig moves against the scatter of the batch's estimates over repeated runs.

    .venv/bin/python bench/predict_accuracy.py [--seeds 20] [--profile P] [--experiment E]
        [--draws 30]

For each seed k the profile with `[backend.sim] seed = k` (another draw of every channel's
noise) runs the experiment as the service runs it (`rig-daq --virtual-time --run E`, recorded),
and the batch fits the profile's models to the recording by WLS (`estimator.batch.identify_run`
without the IV refinement: `rigctl predict` predicts the WLS estimate's σ). The plan is made as
a user makes it: with the first seed's estimate written as a parameter file (an earlier
identification), never the simulator's truth. Per parameter: the predicted σ, the scatter of
the estimates over the seeds (sample standard deviation) and their ratio; the target is a
ratio within 1/1.5–1.5 for every parameter. With k seeds the scatter itself carries a relative
sampling error of about 1/√(2(k − 1)) (16 % at 20) and the prediction 1/√(2·draws).

JSON on the last line; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from identification_accuracy import seeded_profile  # noqa: E402

from controller.experiment import Experiment  # noqa: E402
from estimator.batch import identify_run  # noqa: E402
from estimator.paramfile import write_param_file  # noqa: E402
from estimator.predict import predict_service_rig  # noqa: E402
from estimator.report.runs import RunData, load_run  # noqa: E402
from rigctl.cmd_run import load_experiment  # noqa: E402


def record(profile: Path, experiment: Path, where: Path) -> Path:
    """The experiment run by the service in virtual time; the recording's path."""
    where.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "daq.service.cli", "--profile", str(profile), "--virtual-time",
        "--no-network", "--record", "--run", str(experiment), "--run-dir", str(where), "--no-mlock",
        "--rt-priority", "0",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"rig-daq --run failed ({out.returncode}): {out.stderr[-2000:]}")
    runs = sorted(where.glob("*.rigrun"))
    if len(runs) != 1:
        raise SystemExit(f"expected one recording in {where}, found {len(runs)}")
    return runs[0]


def wls_fits(rd: RunData) -> dict[str, tuple[list[str], np.ndarray, object]]:
    res = identify_run(rd.columns, rd.params, profile=rd.profile, refine=False)
    return {f.name: (list(f.names), np.asarray(f.theta, dtype=float), f) for f in res.fits}


def write_plan(
    path: Path, rd: RunData, fits: dict[str, tuple[list[str], np.ndarray, object]]
) -> None:
    """The first seed's estimate as a parameter file, its [plant] table included."""
    models = {
        name: {
            "names": names, "theta": theta.tolist(),
            "sigma_pct": np.asarray(f.sigma_pct).tolist(),  # type: ignore[attr-defined]
            "cov_diag": np.diag(f.cov).tolist(),  # type: ignore[attr-defined]
            "residual_var": float(f.residual_var),  # type: ignore[attr-defined]
        }
        for name, (names, theta, f) in fits.items()
    }  # fmt: skip
    plant = rd.params.with_identified(fits["mechanical"][1], fits["fluid"][1])
    write_param_file(path, rd.profile.rig.id, 0, models, plant, source="bench/predict_accuracy.py")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--profile", type=Path, default=ROOT / "hw_profiles" / "sim-2dof.toml")
    ap.add_argument("--experiment", type=Path, default=ROOT / "experiments" / "standard-2dof.toml")
    ap.add_argument("--draws", type=int, default=30)
    args = ap.parse_args()
    t0 = time.monotonic()
    est: dict[str, list[np.ndarray]] = {}
    names: dict[str, list[str]] = {}
    with TemporaryDirectory() as tmp:
        where = Path(tmp)
        plan = where / "plan.toml"
        for k in range(1, args.seeds + 1):
            print(f"seed {k} …", file=sys.stderr, flush=True)
            prof = seeded_profile(args.profile, k, where)
            rd = load_run(record(prof, args.experiment, where / f"seed{k}"))
            fits = wls_fits(rd)
            if k == 1:
                write_plan(plan, rd, fits)
            for name, (nm, theta, _) in fits.items():
                est.setdefault(name, []).append(theta)
                names[name] = nm
        exp = Experiment.from_dict(load_experiment(args.experiment))
        pred = predict_service_rig(args.profile, exp, draws=args.draws, params_path=plan)
    out_models = []
    ratios = []
    for m in pred.models:
        if m.model not in est:
            continue
        if list(m.names) != names[m.model]:
            raise SystemExit(f"model {m.model}: prediction and batch name different parameters")
        scatter = np.std(np.array(est[m.model]), axis=0, ddof=1)
        r = m.sigma / scatter
        ratios += r.tolist()
        out_models.append({
            "model": m.model,
            "parameters": [
                {"name": n, "mean": float(np.mean(np.array(est[m.model])[:, i])),
                 "sigma_predicted": float(m.sigma[i]), "scatter": float(scatter[i]),
                 "predicted_over_scatter": float(r[i])}
                for i, n in enumerate(m.names)
            ],
        })  # fmt: skip
        for i, n in enumerate(m.names):
            print(
                f"{m.model:<11} {n:<8} σ_pred {m.sigma[i]:10.4g}  scatter {scatter[i]:10.4g}  "
                f"ratio {r[i]:5.2f}",
                file=sys.stderr,
            )
    ra = np.array(ratios)
    print(json.dumps({
        "bench": "predict_accuracy", "profile": str(args.profile),
        "experiment": str(args.experiment), "seeds": args.seeds, "draws": args.draws,
        "models": out_models,
        "predicted_over_scatter_median": float(np.median(ra)),
        "predicted_over_scatter_range": [float(ra.min()), float(ra.max())],
        "within_1.5x": int(np.count_nonzero((ra <= 1.5) & (ra >= 1 / 1.5))),
        "parameters": int(ra.size),
        "pass": bool(np.all((ra <= 1.5) & (ra >= 1 / 1.5))),
        "wall_s": time.monotonic() - t0,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
