"""`rigctl identify`: the identification experiment end to end, or batch LS of a recorded run.

    rigctl identify --profile hw_profiles/sim-2dof.toml --virtual-time [--json] [--out DIR]
                    [--gains gains.toml]
    rigctl identify RUN.rigrun [--profile P] [--json]

End to end: `rig-daq` and `rig-estimator` start as their own processes on free loopback ports;
the standard experiment runs (recorded); the estimator's online result is taken when it has
consumed the experiment's last sample; batch IDIM-WLS runs on the recording; a validation
experiment (a different trajectory) is recorded for the report; the table of identified
parameters with %σ is printed beside the simulator's true values, then the report's path.
`--gains FILE` (a `rigctl tune` gains file for this rig and its joints, else exit 2) is applied
with `set_gains` before the experiments, which then run over it instead of their own `pid`
table: the identification and validation run with the gains tuned on an earlier model.

Warnings (`warnings` in --json, `warning:` lines otherwise) say what the numbers cannot be
trusted for: data left out (faults, gaps in time), parameters the run did not excite (fixed at
the profile's value, `identifiable: false`), a model that does not explain the data.

Exit status: 0 done; 1 the service refused a step or the rig faulted *during* the
identification experiment (nothing identified); 2 bad input, or no identification possible
from the data (e.g. the arm did not move); 3 unreachable; 4 (`EXIT_FAULT_AFTER`) the
identification is complete and written (table, parameter file, report) but the rig faulted
*after* the identification experiment (during the validation run or on the way back to ARMED):
the fault is in the warnings and on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from daq.profile import ProfileError, load_profile
from rigctl.cmd_run import load_experiment
from rigctl.common import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, limit_estimator_threads
from rigctl.identify_power import power_down, power_up
from rigctl.identify_table import ParameterRow, fit_warnings, format_table, rows_from
from rigctl.session import ROOT, RigSession, SessionError

EXPERIMENTS = ROOT / "experiments"
#: Identification complete and written, but the rig faulted after the experiment (see doc).
EXIT_FAULT_AFTER = 4
#: daq.loop.states.State values in the `state` column (fixed by the sample-row contract).
_RUNNING, _ARMED = 2, 1


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "identify",
        help="identify the rig's parameters (end to end, or batch LS of a recorded run)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run", nargs="?", help="a recorded run (.rigrun): batch identification only")
    p.add_argument("--profile", help="hardware profile (required end to end)")
    p.add_argument("--virtual-time", action="store_true", help="simulator as fast as the CPU")
    p.add_argument("--experiment", help="experiment file (default experiments/standard-*.toml)")
    p.add_argument(
        "--validation",
        help="validation experiment (default experiments/"
        "validation-*.toml if present; 'none' to skip)",
    )
    p.add_argument(
        "--gains",
        help="gains file (`rigctl tune --out`): applied before the experiments, which then run "
        "over it instead of their own `pid` table",
    )
    p.add_argument("--out", help="output directory (default runs/identify-<UTC time>)")
    p.add_argument("--no-report", action="store_true", help="skip the HTML report")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="skip loading the identified parameters and the tracking check with them",
    )
    p.add_argument(
        "--no-refine",
        action="store_true",
        help="batch: least squares only, without the output-error (IV) refinement that "
        "removes the bias of noisy regressors (errors in variables)",
    )
    p.add_argument(
        "--link-by-link",
        action="store_true",
        help="batch: also Lin's link-by-link estimate (outermost link first), beside the "
        "stacked one (--json 'linkwise', a 'linkwise:' line otherwise)",
    )
    p.add_argument(
        "--no-sensor-sigma",
        action="store_true",
        help="batch: σ from the noise only (default: σ also includes the sensors' calibration "
        "uncertainty, from the run's calibration or the channels' declared accuracy)",
    )
    p.add_argument(
        "--reduced",
        action="store_true",
        help="a [chain] machine: the reduced model (without the jacks' cylinders and pistons) "
        "instead of the complete one",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The estimator is imported here, not at module level: every other rigctl command would
    # otherwise pay for loading it (≈0.6 s).
    from estimator.report.runs import ReportError

    limit_estimator_threads()
    try:
        if args.run is not None:
            result = _offline(
                Path(args.run),
                args.profile,
                refine=not args.no_refine,
                linkwise=args.link_by_link,
                sensor_sigma=not args.no_sensor_sigma,
                reduced=args.reduced,
            )
        else:
            if args.profile is None:
                print(
                    "rigctl identify: --profile is required (or give a recorded RUN)",
                    file=sys.stderr,
                )
                return EXIT_USAGE
            result = _end_to_end(args)
    except (ProfileError, FileNotFoundError, ValueError, ReportError) as exc:
        print(f"rigctl identify: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SessionError as exc:
        print(f"rigctl identify: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if args.json:
        print(json.dumps(result, default=str, sort_keys=True))
    elif "chain" in result:
        from rigctl.identify_chain import print_result

        print_result(result)
    else:
        print(result["table"])
        for note in result.get("notes", []):
            print(f"note: {note}")
        if result.get("data_summary"):
            print(f"data: {result['data_summary']}")
        for line in sensor_sigma_lines(result.get("sensor_sigma")):
            print(line)
        for model, lw in (result.get("linkwise") or {}).items():
            vals = ", ".join(
                f"{nm} {th:.5g} ±{sp:.2f}%"
                for nm, th, sp in zip(lw["names"], lw["theta"], lw["sigma_pct"], strict=True)
            )
            print(f"linkwise ({model}, outermost link first): {vals}")
        for w in result["warnings"]:
            print(f"warning: {w}")
        if result.get("report"):
            print(f"report: {result['report']}")
        if result.get("tracking"):
            from rigctl.tracking_check import tracking_lines

            print("\n".join(tracking_lines(result["tracking"])))
    if result.get("fault_after"):
        print(
            f"rigctl identify: the rig faulted after the experiment: {result['fault_after']}",
            file=sys.stderr,
        )
        return EXIT_FAULT_AFTER
    return EXIT_OK


# ---------------------------------------------------------------------------- offline


def _offline(
    run_path: Path,
    profile_path: str | None,
    *,
    refine: bool,
    linkwise: bool,
    sensor_sigma: bool = True,
    reduced: bool = False,
) -> dict[str, Any]:
    from estimator.report.analysis import batch_identify
    from estimator.report.runs import open_run, run_data

    opened = open_run(run_path, profile_path)
    if opened.profile.chain is not None:
        from rigctl.identify_chain import offline

        return offline(opened, reduced=reduced)
    data = run_data(opened)
    batch = batch_identify(data, refine=refine, linkwise=linkwise, sensor_sigma=sensor_sigma)
    rows = _table_rows(batch, data, None)
    extra = {
        "sensor_sigma": _sensor_sigma(batch),
        "run": str(run_path),
        "data": batch.data.as_dict(),
        "data_summary": batch.data.summary(1.0 / batch.fs),
        "notes": data.notes + batch.notes,
        "batch_methods": _methods(batch),
        "linkwise": _linkwise(batch),
    }
    return _result(rows, extra, online=False, warnings=list(batch.warnings))


# ---------------------------------------------------------------------------- end to end


def _experiment(path: str | None, default_stem: str, n_joints: int) -> dict[str, Any] | None:
    if path == "none":
        return None
    if path is None:
        candidate = EXPERIMENTS / f"{default_stem}-{n_joints}dof.toml"
        if not candidate.exists():
            if default_stem == "validation":
                return None
            raise FileNotFoundError(f"no default experiment {candidate}; pass --experiment")
        path = str(candidate)
    return load_experiment(Path(path))


def _gains_file(path: str, profile: Any) -> dict[str, dict[str, float]]:
    """The gains file's gains per joint, checked against the profile's rig and joints."""
    from controller.tuning import read_gains_file, read_gains_toml

    try:
        d = read_gains_toml(Path(path))
    except ValueError as exc:
        raise ValueError(f"--gains {exc}") from None
    try:
        return read_gains_file(d, profile.rig.id, [j.name for j in profile.joints])
    except ValueError as exc:
        raise ValueError(f"--gains {path}: {exc}") from None


def _end_to_end(args: argparse.Namespace) -> dict[str, Any]:
    from estimator.paramfile import read_param_file
    from estimator.report.analysis import batch_identify, online_replay
    from estimator.report.runs import load_run
    from estimator.structure import batch_structure, describe

    profile_path = Path(args.profile)
    profile = load_profile(profile_path)
    n = len(profile.joints)
    if profile.chain is not None:
        from rigctl.identify_chain import end_to_end

        given = [None if a in (None, "none") else a for a in (args.experiment, args.validation)]
        return end_to_end(args, *(None if a is None else load_experiment(Path(a)) for a in given))
    experiment = _experiment(args.experiment, "standard", n)
    assert experiment is not None
    validation = _experiment(args.validation, "validation", n)
    gains = _gains_file(args.gains, profile) if args.gains else None
    if gains is not None:
        # The file's gains replace the experiments' own (their `pid` table is over the
        # service's gains, so left in place it would undo the file's p and ff1).
        experiment = {k: v for k, v in experiment.items() if k != "pid"}
        if validation is not None:
            validation = {k: v for k, v in validation.items() if k != "pid"}
    out = Path(args.out or f"runs/identify-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")
    progress = sys.stderr if not args.json else None
    _say(progress, f"starting rig-daq and rig-estimator ({out})")
    warnings: list[str] = []
    fault_after: str | None = None
    tracking: dict[str, Any] | None = None
    power: list[str] = []

    def say(text: str) -> None:
        _say(progress, text)

    with RigSession(profile_path, out, virtual_time=args.virtual_time) as s:
        power += power_up(s, profile, say)
        for joint, g in (gains or {}).items():
            s.command("set_gains", {"joint": joint, "gains": g})
        if gains is not None:
            say(f"gains from {args.gains} applied to {', '.join(gains)}")
        ident_run = Path(s.command("record_start", {"name": "identification"})["path"])
        _say(
            progress,
            f"running '{experiment.get('name', 'experiment')}' (recording {ident_run.name})",
        )
        t0 = time.monotonic()
        try:
            status = s.run_experiment(experiment, timeout=3600.0)
        except SessionError as exc:
            # A fault seen while waiting may have tripped after the experiment's last cycle
            # (the arm settling, a pressure rising at rest): the recording says which.
            status = s.request("status")
            if not status.get("fault"):
                raise
            s.command("record_stop")
            during = _fault_during(ident_run)
            if during:
                raise SessionError(f"{exc} ({during})") from None
            fault_after = str(exc)
        else:
            s.command("record_stop")
        last_seq = int(status["seq"])
        _say(
            progress,
            f"experiment done: {status['t']:.1f} s rig time in "
            f"{time.monotonic() - t0:.1f} s; waiting for the estimator to catch up",
        )
        s.wait_estimate(
            lambda e: e.get("data_seq", -1) >= last_seq,
            timeout=600.0,
            what="the estimator to consume the experiment",
        )
        s.stop_estimator()  # writes the parameter file; the validation run stays unseen
        val_run = None
        # From here on the identification is done: a refusal or fault (the rig may trip at
        # any moment after the experiment) costs the validation, never the result.
        if validation is not None and fault_after is None:
            try:
                val_run = Path(s.command("record_start", {"name": "validation"})["path"])
                _say(progress, f"validation run '{validation.get('name', '')}'")
                s.run_experiment(validation, timeout=3600.0)
            except SessionError as exc:
                fault_after = f"during the validation run: {exc}"
                val_run = None
            try:
                s.request("record_stop")
            except SessionError as exc:
                fault_after = fault_after or f"stopping the validation recording: {exc}"
        if fault_after is None and not args.no_verify:
            try:
                tracking = _verify(s, progress)
                warnings += [w for w in tracking.get("settled", []) if w]
            except SessionError as exc:
                fault_after = f"during the tracking check: {exc}"
            except ValueError as exc:  # the prediction says the check cannot run safely
                warnings.append(str(exc))
        try:
            s.command("disarm")
        except SessionError as exc:
            # Best effort after a fault: a latched fault already nulled the valves.
            fault_after = fault_after or f"on disarm: {exc}"
        power += power_down(s, profile, say)
    if fault_after is not None:
        _say(progress, f"the rig faulted after the experiment: {fault_after}")
        warnings.append(
            f"the rig faulted after the identification experiment ({fault_after}); the "
            "identification is complete" + ("" if val_run else ", without a validation run")
        )
    online = read_param_file(s.param_file)
    _say(
        progress, "batch identification of the recording (IDIM-WLS and its output-error refinement)"
    )
    data = load_run(ident_run, profile_path)
    batch = batch_identify(
        data,
        refine=not args.no_refine,
        repeat_period_s=_repeat_period(experiment),
        linkwise=args.link_by_link,
        sensor_sigma=not args.no_sensor_sigma,
    )
    # The batch's parameter file, with the structure it chose (estimator.structure); the
    # online estimate beside it is the online estimator's on that structure: the live one ran
    # before the batch existed, so the identification run is replayed through it (the same
    # rows the live estimator received, the same OnlineIdentifier).
    structure = batch_structure(batch.fits, f"the batch of {ident_run.name}")
    batch_file = out / "batch-params.toml"
    _write_batch_file(batch_file, profile, batch, structure)
    replay = None
    if not structure.empty() and args.no_report:
        _say(progress, f"online estimator on the batch's structure ({describe(structure)})")
        replay, _ = online_replay(data, data.duration, structure=structure)
    warnings += batch.warnings
    extra: dict[str, Any] = {
        "identification_run": str(ident_run),
        "validation_run": str(val_run) if val_run else None,
        "batch_param_file": str(batch_file),
        "online_param_file": str(s.param_file),
        "online_live_structure": describe(None, profile.estimator),
        "online_samples": online.get("samples"),
        "data": batch.data.as_dict(),
        "data_summary": batch.data.summary(1.0 / batch.fs),
        "fault_after": fault_after,
        "notes": data.notes + batch.notes,
        "batch_methods": _methods(batch),
        "periodic": _periodic(batch),
        "linkwise": _linkwise(batch),
        "sensor_sigma": _sensor_sigma(batch),
        "power": power,
        "gains_file": args.gains,
    }
    if tracking is not None:
        extra["tracking"] = tracking
    if not args.no_report:
        from estimator.report import build_report

        _say(progress, "writing the report")
        rep = build_report(
            ident_run,
            val_run,
            out / "report",
            profile=profile_path,
            progress=progress is not None,
            batch=batch,
            online_structure=None if structure.empty() else structure,
        )
        if not structure.empty():
            replay = rep.online
        extra["report"] = str(rep.html)
        extra["fit"] = rep.fit_table
        warnings += fit_warnings(rep.fit_table)
        if val_run is not None and not any(
            str(r.get("kind", "")).startswith("FIT") for r in rep.fit_table
        ):
            # Silence here would read as "validated": say why there is no FIT.
            why = [n for n in rep.notes if "parameters:" in n or "validation" in n]
            warnings.append(
                "the identified models were not validated by simulation (no FIT): "
                + ("; ".join(why) if why else "see the report's notes")
            )
    if replay is not None:
        theta_on, sigma_on = _estimate_vectors(replay, batch.names)
        extra["online_source"] = "replay of the identification run on the batch's structure"
        extra["online_structure"] = replay.structure
        extra["notes"] = [*extra["notes"], f"online: the online estimator on {replay.structure}"]
    else:
        theta_on, sigma_on = _online_vectors(online, batch.names)
        extra["online_source"] = "live"
        extra["online_structure"] = extra["online_live_structure"]
    rows = _table_rows(batch, data, (theta_on, sigma_on))
    return _result(rows, extra, online=True, warnings=warnings)


def _write_batch_file(path: Path, profile: Any, batch: Any, structure: Any) -> None:
    """The batch's parameter file (estimator.paramfile): its estimate per model and the
    structure it chose, the file the online estimator takes its structure from. A real-rig
    family's estimate is also written as a `[plant]` table (`lin_plant`, as the online
    estimator writes its own), so the service and the controllers can load this file too —
    the one that carries the valve's null and lap (`pid_ff`'s `valve_null`, `valve_lap`)."""
    from daq.profile.plant import plant_params
    from estimator.models_lin import SMOOTH_SIGN_M_S, lin_plant
    from estimator.paramfile import write_param_file

    models = {
        f.name: {
            "names": list(f.names),
            "theta": np.asarray(f.theta).tolist(),
            "sigma_pct": np.asarray(f.sigma_pct).tolist(),
            "cov_diag": np.diag(f.cov).tolist(),
            "residual_var": float(f.residual_var),
        }
        for f in batch.fits
    }
    names = [nm for f in batch.fits for nm in f.names]
    theta = np.concatenate([np.asarray(f.theta, dtype=float) for f in batch.fits])
    band = structure.coulomb_band_m_s
    plant = lin_plant(
        plant_params(profile), names, theta, SMOOTH_SIGN_M_S if band is None else band
    )
    write_param_file(
        path, profile.rig.id, int(batch.data.used), models, None if plant is None else plant[0],
        source="rigctl identify (batch)", structure=structure.table(),
    )  # fmt: skip


def _estimate_vectors(est: Any, names: list[str]) -> tuple[list[float], list[float]]:
    by_name = {
        nm: (float(t), float(sg))
        for nm, t, sg in zip(est.names, est.theta, est.sigma_pct, strict=True)
    }
    missing = [nm for nm in names if nm not in by_name]
    if missing:
        raise SessionError(f"the online replay lacks {missing}")
    return [by_name[nm][0] for nm in names], [by_name[nm][1] for nm in names]


def _repeat_period(experiment: dict[str, Any]) -> float | None:
    """Duration of the experiment's first repeated segment (s), or None."""
    for seg in experiment.get("segments", []):
        if int(seg.get("repeats", 1)) >= 3:
            return float(seg["duration_s"])
    return None


def _periodic(batch: Any) -> dict[str, Any]:
    """JSON `periodic`: the ML fit on the averaged repeats of each model (estimator.repeats),
    for comparison with the printed batch estimate — not itself checked for bias."""
    return {
        p.name: {
            "names": p.names,
            "theta": p.theta.tolist(),
            "sigma_pct": p.sigma_pct.tolist(),
            "repeats": p.repeats.count,
            "start_s": p.repeats.start / batch.fs,
            "period_s": p.repeats.period / batch.fs,
        }
        for p in batch.periodic
    }


def _linkwise(batch: Any) -> dict[str, Any]:
    """JSON `linkwise`: Lin's link-by-link estimate per model (estimator.linkwise), if asked."""
    return {
        f.name: {
            "names": f.linkwise.names,
            "theta": f.linkwise.theta.tolist(),
            "sigma_pct": f.linkwise.sigma_pct.tolist(),
            "stage": f.linkwise.stage.tolist(),
        }
        for f in batch.fits
        if f.linkwise is not None
    }


def _methods(batch: Any) -> dict[str, str]:
    """Which estimate each model's batch values are (JSON `batch_methods`)."""
    return {f.name: f.method for f in batch.fits}


def _fault_during(run_path: Path) -> str | None:
    """Why the identification experiment did not finish, or None if it did: its RUNNING block
    ended in ARMED (the experiment's end) before the fault."""
    from daq.recording import read_run

    run = read_run(run_path)
    state = run.column("state")
    running = np.flatnonzero(state == _RUNNING)
    if running.size == 0:
        return "the experiment never ran"
    last = int(running[-1])
    if last + 1 < len(state) and state[last + 1] == _ARMED:
        return None
    return "the fault cut the experiment short"


def _verify(s: RigSession, progress: Any) -> dict[str, Any]:
    """Load the parameters just identified into the service and measure the tracking with and
    without them (rigctl/tracking_check.py)."""
    from rigctl.tracking_check import load_and_check

    _say(progress, f"loading {s.param_file.name} and checking the tracking with the model")
    return load_and_check(s, s.param_file, load_profile(s.profile))


def _online_vectors(online: dict[str, Any], names: list[str]) -> tuple[list[float], list[float]]:
    by_name: dict[str, tuple[float, float]] = {}
    for model in online.get("models", {}).values():
        for nm, th, sg in zip(model["names"], model["theta"], model["sigma_pct"], strict=True):
            by_name[nm] = (float(th), float(sg))
    missing = [nm for nm in names if nm not in by_name]
    if missing:
        raise SessionError(f"the estimator's parameter file lacks {missing}")
    return [by_name[nm][0] for nm in names], [by_name[nm][1] for nm in names]


def _result(
    rows: list[ParameterRow], extra: dict[str, Any], *, online: bool, warnings: list[str]
) -> dict[str, Any]:
    return {
        "parameters": [r.to_dict() for r in rows],
        "table": format_table(rows, online=online),
        "warnings": warnings,
        **extra,
    }


def _sensor_sigma(batch: Any) -> dict[str, Any] | None:
    """Batch %σ from the noise alone and including the sensors' calibration uncertainty (the
    table's %σ and its ±3σ verdicts use the latter); None when no channel declared any."""
    noise = batch.sigma_pct_noise
    if noise is None:
        return None
    return {
        n: {"sigma_pct_noise": float(a), "sigma_pct": float(b)}
        for n, a, b in zip(batch.names, noise, batch.sigma_pct, strict=True)
    }


def sensor_sigma_lines(sigma: dict[str, Any] | None) -> list[str]:
    if not sigma:
        return []
    parts = [
        f"{n} {v['sigma_pct_noise']:.3g} → {v['sigma_pct']:.3g} %"
        for n, v in sigma.items()
        if v["sigma_pct_noise"] == v["sigma_pct_noise"]
    ]
    return ["batch %σ from noise → including the sensors' calibration: " + ", ".join(parts)]


def _say(stream: Any, text: str) -> None:
    if stream is not None:
        print(f"rigctl identify: {text}", file=stream, flush=True)


def _table_rows(batch: Any, data: Any, online: Any) -> list[ParameterRow]:
    """The parameter table's rows: the batch estimate (and least squares beside a refined
    value), the online one if given, and the simulator's truth where there is one."""
    truth = None
    if data.is_simulated:
        # The reference models carry their truth; every other family's (the real-rig one)
        # is derived from the simulator's plant (estimator.sim_truth).
        truth = batch.truth
        if truth is None:
            from estimator.sim_truth import family_truth  # rigctl's other commands skip it

            known = family_truth(data.profile, data.columns, data.calibration)
            truth = np.array([known.get(n, math.nan) for n in batch.names]) if known else None
    return rows_from(
        batch.names,
        online,
        batch.theta,
        batch.sigma_pct,
        truth,
        identifiable=batch.identifiable,
        methods=batch.methods,
        batch_ls=(batch.theta_wls, batch.sigma_pct_wls),
    )
