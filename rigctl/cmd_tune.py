"""`rigctl tune`: gains from the identified model, for a stated bandwidth and gain margin.

    rigctl tune --profile P --params FILE [--bandwidth-hz 3] [--margin 2] [--out gains.toml]
                [--chirp]

Per joint, about the profile's home pose: the oil column's natural frequency and damping from
the parameters, and the position P (+I), ΔP feedback and velocity feed-forward that
`controller.tuning` finds; the predicted closed-loop response q/q_ref; the gains file
(`rigctl gains load FILE` applies it). `--chirp` measures the response with a chirp run and
prints it next to the prediction: on a simulated profile the run is in-process on the
profile's simulated rig in virtual time (the same data path as the service's loop).
A gain set the model predicts unstable is never written.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from rigctl.common import UsageError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("tune", help="compute gains from the identified model")
    p.add_argument("--profile", required=True, type=Path)
    p.add_argument("--params", required=True, type=Path, help="identified parameter file")
    p.add_argument("--bandwidth-hz", type=float, default=3.0, help="position loop −3 dB target")
    p.add_argument("--margin", type=float, default=2.0, help="gain margin, factor (2 = 6 dB)")
    p.add_argument("--out", type=Path, default=None, help="gains file to write")
    p.add_argument("--chirp", action="store_true", help="measure the response with a chirp")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def measure_chirp(profile: Any, params: Any, gains: list[dict[str, float]], f1: float) -> Any:
    """(freqs, H per joint) of q/q_ref from a 2° chirp 0.2 Hz → f1 on the simulated rig; f1
    is lowered to what the joints' acceleration limits allow at that amplitude."""
    from scipy import signal

    from controller.experiment import Experiment
    from controller.runner import ExperimentRunner
    from daq.sim_closed_loop import SimLoop, gains_limits

    base, limits = gains_limits(profile)
    home = [j.home_deg for j in profile.joints]
    n, dur, amp = len(home), 30.0, 2.0
    amax = min(lim.max_acceleration for lim in limits)
    f1 = min(f1, 0.8 * math.sqrt(amax / math.radians(amp)) / (2 * math.pi))
    exp = {
        "name": "tune-chirp",
        "home_deg": home,
        "pid": gains,
        "segments": [
            {"name": "settle", "duration_s": 1.0, "trajectory": {"kind": "hold"},
             "controller": {"kind": "pid"}},
            {"name": "chirp", "duration_s": dur, "controller": {"kind": "pid"},
             "trajectory": {"kind": "chirp", "amplitude_deg": [amp] * n, "f0_hz": 0.2,
                            "f1_hz": f1}},
        ],
    }  # fmt: skip
    r = ExperimentRunner(Experiment.from_dict(exp), base, limits, profile.period, params)
    loop = SimLoop(profile)
    total = r.total_duration + 0.1
    _, ref, q = loop.run(r, total)
    k0 = round((total - dur - 0.1) / profile.period)
    fs = 1.0 / profile.period
    out = []
    for j in range(n):
        x, y = ref[k0 : k0 + round(dur * fs), j], q[k0 : k0 + round(dur * fs), j]
        f, pxy = signal.csd(x, y, fs, nperseg=4096)
        _, pxx = signal.welch(x, fs, nperseg=4096)
        out.append(pxy / pxx)
    return f, out, f1


def run(args: argparse.Namespace) -> int:
    from controller import tuning
    from daq.param_set import read_param_set
    from daq.profile import load_profile

    try:
        profile = load_profile(args.profile)
        params = read_param_set(args.params, profile).params
        home = np.radians([j.home_deg for j in profile.joints])
        tuned = tuning.tune(params, home, profile.period, args.bandwidth_hz, args.margin)
    except (OSError, ValueError) as exc:
        raise UsageError(f"tune: {exc}") from None
    names = [j.name for j in profile.joints]
    for name in names:
        why = profile.dp_refusal(name)
        if why:
            raise UsageError(f"tune: joint {name}: {why}")
    d = tuning.gains_file(
        profile.rig.id,
        names,
        tuned,
        {"params": str(args.params), "bandwidth_hz": args.bandwidth_hz, "margin": args.margin},
    )
    gains = [{k: v for k, v in row.items() if k != "name"} for row in d["joints"]]
    problems = tuning.check_gains(params, home, profile.period, gains)
    if problems:  # cannot happen by construction; never write such a set
        raise UsageError("tune: " + "; ".join(problems))
    report: dict[str, Any] = {"rig": profile.rig.id, "joints": []}
    measured = None
    if args.chirp:
        if profile.backend.kind != "sim":
            raise UsageError("tune --chirp measures on a simulated profile only (backend 'sim')")
        measured = measure_chirp(profile, params, gains, min(4.0 * args.bandwidth_hz, 40.0))
    for j, (name, t) in enumerate(zip(names, tuned, strict=True)):
        row: dict[str, Any] = {
            "joint": name,
            "hydraulic_natural_hz": t.natural_hz,
            "hydraulic_damping": t.damping,
            "gains": gains[j],
            "predicted_bandwidth_hz": t.bandwidth_hz,
            "gain_margin": t.gain_margin,
            "min_closed_loop_damping": t.min_damping,
            "predicted_step_overshoot_pct": t.step_overshoot_pct,
        }
        fsel = np.array([0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 12.0])
        fsel = fsel[fsel <= min(4.0 * args.bandwidth_hz, 40.0)]
        pred = np.interp(fsel, t.freqs_hz, t.response.real) + 1j * np.interp(
            fsel, t.freqs_hz, t.response.imag
        )
        resp = []
        for k, f in enumerate(fsel):
            e: dict[str, float] = {
                "hz": float(f),
                "pred_db": 20 * math.log10(abs(pred[k])),
                "pred_deg": math.degrees(np.angle(pred[k])),
            }
            if measured is not None and f <= measured[2]:
                hm = measured[1][j][np.argmin(np.abs(measured[0] - f))]
                e["meas_db"] = 20 * math.log10(abs(hm))
                e["meas_deg"] = math.degrees(np.angle(hm))
            resp.append(e)
        row["response"] = resp
        report["joints"].append(row)
    if args.out is not None:
        args.out.write_text(tuning.dumps_gains(d), encoding="utf-8")
        report["gains_file"] = str(args.out)
    if args.json:
        print(json.dumps(report))
        return 0
    w = sys.stdout.write
    for row in report["joints"]:
        g = row["gains"]
        w(
            f"{row['joint']}: oil column {row['hydraulic_natural_hz']:.2f} Hz, "
            f"ζ {row['hydraulic_damping']:.3f}; gains p={g['p']:.3g} V/rad i={g['i']:.3g} "
            f"ff1={g['ff1']:.3g} dp={g['dp']:.3g} V/kN (high-pass {g['dp_hp_hz']:g} Hz); "
            f"bandwidth {row['predicted_bandwidth_hz']:.2f} Hz, gain margin "
            f"{row['gain_margin']:.2f}, slowest ζ {row['min_closed_loop_damping']:.2f}, "
            f"step overshoot {row['predicted_step_overshoot_pct']:.1f} %\n"
        )
        w(
            "   Hz   predicted dB/deg"
            + ("   measured dB/deg" if measured is not None else "")
            + "\n"
        )
        for e in row["response"]:
            m = f"   {e['meas_db']:7.2f} {e['meas_deg']:7.1f}" if "meas_db" in e else ""
            w(f"  {e['hz']:5.1f} {e['pred_db']:7.2f} {e['pred_deg']:7.1f}{m}\n")
    if args.out is not None:
        w(f"gains file: {args.out}\n")
    return 0
