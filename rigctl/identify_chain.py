"""`rigctl identify` on a chain machine (a `[chain]` profile such as
hw_profiles/sim-excavator.toml, docs/excavator.md): the base parameters of its complete model
(the jacks' cylinders and pistons included; `--reduced` without them) by the batch on the
identification run's recording (`estimator.chain_batch`), beside the profile's nominal values
and, on the simulator, its truth; every parameter the run does not measure flagged in words.

End to end, rig-daq runs the experiment recorded (`--experiment`, required: the shipped ones
are experiments/excavator-multisine.toml and excavator-linkwise.toml) and, with
`--validation E`, a second one; the complete and the reduced model, each identified on the
first run, then predict the validation run's actuator torques beside the profile's nominal
model (the thesis's Figure 37). rig-estimator runs beside it (estimator.chain_online: the
batch's equations accumulated window by window); its estimate of the identification run is the
table's online column."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from rigctl.identify_power import power_down, power_up
from rigctl.identify_table import format_table, rows_from
from rigctl.session import RigSession, SessionError

#: The shipped chain experiments, named in the error when none is given.
CHAIN_EXPERIMENTS = ("experiments/excavator-multisine.toml", "experiments/excavator-linkwise.toml")


def _rows(b: Any, online: Any) -> list[Any]:
    return rows_from(b.names, online, b.theta, b.sigma_pct, b.truth, identifiable=b.measured)


def chain_table(b: Any, online: tuple[np.ndarray, np.ndarray] | None = None) -> str:
    """The parameter table (rigctl/identify_table.py's form) and the definitions of the
    measured base parameters that are combinations of physical ones."""
    lines = [format_table(_rows(b, online), online=online is not None)]
    combos = [
        f"  {n} = {d}"
        for n, d, ok in zip(b.names, b.definitions, b.measured, strict=True)
        if ok and d != n
    ]
    if combos:
        lines += ["", "measured base parameters that combine physical ones:", *combos]
    return "\n".join(lines)


def _result(
    b: Any, extra: dict[str, Any], online: tuple[np.ndarray, np.ndarray] | None = None
) -> dict[str, Any]:
    from estimator.chain_batch import as_dict

    return {
        "parameters": [r.to_dict() for r in _rows(b, online)],
        "table": chain_table(b, online),
        "warnings": list(b.warnings) + extra.pop("warnings", []),
        "notes": list(b.notes),
        "chain": as_dict(b),
        **extra,
    }


def offline(opened: Any, *, reduced: bool) -> dict[str, Any]:
    """The batch on an already opened run of a chain machine."""
    from estimator.chain_batch import chain_recording, identify_chain

    b = identify_chain(chain_recording(opened), minor=not reduced)
    return _result(b, {"run": str(opened.path)})


def end_to_end(
    args: argparse.Namespace, experiment: dict[str, Any] | None, validation: dict[str, Any] | None
) -> dict[str, Any]:
    """The identification experiment (and a validation one) through rig-daq, then the batch."""
    from estimator.chain_batch import identify_chain, load_chain_run, torque_rms

    if experiment is None:
        raise FileNotFoundError(
            "a [chain] profile has no default experiment; pass --experiment (shipped: "
            + ", ".join(CHAIN_EXPERIMENTS)
            + ")"
        )
    profile_path = Path(args.profile)
    out = Path(args.out or f"runs/identify-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")
    progress = sys.stderr if not args.json else None

    def say(text: str) -> None:
        if progress is not None:
            print(f"rigctl identify: {text}", file=progress, flush=True)

    say(f"starting rig-daq and rig-estimator ({out})")
    from daq.profile import load_profile
    from estimator.chain_online import MODEL
    from estimator.paramfile import read_param_file

    profile = load_profile(profile_path)
    val_run: Path | None = None
    fault_after: str | None = None
    with RigSession(profile_path, out, virtual_time=args.virtual_time) as s:
        power = power_up(s, profile, say)
        ident_run = Path(s.command("record_start", {"name": "identification"})["path"])
        say(f"running '{experiment.get('name', 'experiment')}' (recording {ident_run.name})")
        try:
            status = s.run_experiment(experiment, timeout=3600.0)
        finally:
            s.request("record_stop")
        last_seq = int(status["seq"])
        say("waiting for the online estimator to catch up")
        s.wait_estimate(
            lambda e: e.get("data_seq", -1) >= last_seq,
            timeout=600.0,
            what="the estimator to consume the experiment",
        )
        s.stop_estimator()  # writes its parameter file; the validation run stays unseen
        if validation is not None:
            try:
                val_run = Path(s.command("record_start", {"name": "validation"})["path"])
                say(f"validation run '{validation.get('name', '')}'")
                s.run_experiment(validation, timeout=3600.0)
            except SessionError as exc:
                fault_after, val_run = f"during the validation run: {exc}", None
            s.request("record_stop")
        try:
            s.command("disarm")
        except SessionError as exc:
            fault_after = fault_after or f"on disarm: {exc}"
        power += power_down(s, profile, say)
    say("batch identification of the recording (the chain's base parameters)")
    rec = load_chain_run(ident_run, profile_path)
    b = identify_chain(rec, minor=not args.reduced)
    extra: dict[str, Any] = {
        "identification_run": str(ident_run),
        "validation_run": None if val_run is None else str(val_run),
        "fault_after": fault_after,
        "power": power,
        "warnings": [] if fault_after is None else [f"the rig faulted {fault_after}"],
    }
    if val_run is not None:
        # The thesis's Figure 37: both models, each identified on the same run, predict the
        # validation run's torques, beside the profile's nominal model.
        say("the complete and reduced models' actuator torques on the validation run")
        other = identify_chain(rec, minor=args.reduced)
        val = load_chain_run(val_run, profile_path)
        complete, reduced = (other, b) if args.reduced else (b, other)
        rc, rr = torque_rms(val, complete), torque_rms(val, reduced)
        rms = {
            "complete": rc["identified"],
            "complete_held": rc["held"],
            "reduced": rr["identified"],
            "reduced_held": rr["held"],
            "nominal": rc["nominal"],
            "measured": rc["measured"],
        }
        extra["validation"] = rms
        b.notes.append(validation_line(rms))
    m = read_param_file(s.param_file)["models"][MODEL]
    if list(m["names"]) != b.names:
        raise ValueError(f"{s.param_file}: the online estimate's parameters are not the batch's")
    extra["online_param_file"] = str(s.param_file)
    extra["online_samples"] = read_param_file(s.param_file).get("samples")
    online = (np.asarray(m["theta"], dtype=float), np.asarray(m["sigma_pct"], dtype=float))
    return _result(b, extra, online)


def validation_line(rms: dict[str, dict[str, float]]) -> str:
    """One line: per joint, the torque RMS error of the complete and the reduced model (each
    fitted freely, and with its unresolved bodies at the profile's values) and the nominal."""
    keys = ("complete", "complete_held", "reduced", "reduced_held", "nominal")
    parts = [f"{j} " + " / ".join(f"{rms[k][j]:.4g}" for k in keys) for j in rms["nominal"]]
    return (
        "validation: actuator torque RMS error, complete / complete held / reduced / reduced "
        "held / nominal model (held: the bodies' base parameters the run does not resolve at "
        "the profile's values, the rest refitted; N·m; the torque's own RMS in the JSON): "
        + ", ".join(parts)
    )


def print_result(result: dict[str, Any]) -> None:
    print(result["table"])
    for note in result.get("notes", []):
        print(f"note: {note}")
    for w in result["warnings"]:
        print(f"warning: {w}")
