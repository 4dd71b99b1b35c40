"""`rigctl calibrate pressure-zero | pressure-span | pressure-shunt | position | valve-null |
oil-temperature [--apply]` (or with underscores, as the service names them): start a procedure
in the service, follow its steps, print what it found against each sensor's declared
accuracy."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from daq.commands.client import CommandClient, ProtocolError, ServiceUnreachable
from rigctl.common import EXIT_OK, EXIT_REFUSED, client_error_exit, client_keys

PROCEDURES = {
    "pressure-zero": ("pressure_zero", "power off, drain the chambers, average each pressure"),
    "pressure-span": (
        "pressure_span",
        "after the zero: each chamber deadheaded at the supply (low and high stage), its gain "
        "against the supply channel or a gauge reading (--reference-pa)",
    ),
    "pressure-shunt": (
        "pressure_shunt",
        "after the zero, power off: each transducer's gain from its shunt resistor's step "
        "against the equivalent its certificate states (channels with a shunt in the profile)",
    ),
    "position": (
        "position",
        "potentiometer on the cylinder's stops, resolver through the kinematics, sweep residual",
    ),
    "valve-null": (
        "valve_null",
        "LVDT span at the spool stops, null by integral holds at several poses (low pressure)",
    ),
    "oil-temperature": (
        "oil_temperature",
        "the temperature transmitter's offset against a reference thermometer's reading "
        "(--reference-c); nothing moves",
    ),
}
POLL_S = 0.2


def register(sub: Any, common: Any) -> None:
    for cli_name, (_name, what) in PROCEDURES.items():
        p = sub.add_parser(cli_name, help=what, description=what, aliases=[_name])
        p.add_argument(
            "--apply", action="store_true",
            help="apply the result if every residual is within the declared accuracy",
        )  # fmt: skip
        p.add_argument("--valve-volts", type=float, default=None, help="procedure's valve command")
        p.add_argument("--wait", type=float, default=1800.0, help="give up after this many s")
        if cli_name in ("pressure-shunt", "oil-temperature"):
            p.add_argument("--window", type=float, default=None, help="each window, s (default 2)")
        if cli_name == "pressure-shunt":
            p.add_argument(
                "--settle", type=float, default=None, help="settling after a switch, s (0.5)"
            )
        if cli_name == "pressure-span":
            p.add_argument(
                "--reference-pa", type=float, default=None,
                help="the supply at the high stage read on a gauge (Pa); default: the supply "
                "channel",
            )  # fmt: skip
            p.add_argument(
                "--reference-sigma-pa", type=float, default=None,
                help="the gauge's 1σ (Pa; default 0.5 %% of the reading, a class 1.0 gauge)",
            )  # fmt: skip
        if cli_name == "oil-temperature":
            p.add_argument(
                "--reference-c", type=float, required=True,
                help="the oil temperature read now on a reference thermometer at the "
                "transmitter (°C)",
            )  # fmt: skip
            p.add_argument(
                "--reference-sigma-c", type=float, default=None,
                help="the reference thermometer's 1σ (°C; default 0.1, a class AA probe)",
            )  # fmt: skip
        common(p, _run)
        p.set_defaults(procedure=cli_name)


def _run(args: argparse.Namespace) -> int:
    name = PROCEDURES[args.procedure][0]
    cmd: dict[str, Any] = {"procedure": name, "apply": bool(args.apply)}
    if args.valve_volts is not None:
        cmd["valve_volts"] = args.valve_volts
    for key in ("reference_pa", "reference_sigma_pa", "reference_c", "reference_sigma_c"):
        if getattr(args, key, None) is not None:
            cmd[key] = getattr(args, key)
    for key, attr in (("window_s", "window"), ("settle_s", "settle")):
        if getattr(args, attr, None) is not None:
            cmd[key] = getattr(args, attr)
    try:
        with CommandClient(args.endpoint, timeout=args.timeout, keys=client_keys(args)) as c:
            started = c.request("calibrate", cmd)
            if not started["ok"]:
                print(
                    f"rigctl: calibrate {name} refused ({started.get('error')}): "
                    f"{started.get('message')}",
                    file=sys.stderr,
                )
                return EXIT_REFUSED
            step = None
            deadline = time.monotonic() + args.wait
            while True:
                report = c.request("calibrate_status", {})
                if report.get("step") != step and not args.json:
                    step = report.get("step")
                    print(f"… {step}", file=sys.stderr, flush=True)
                if not report.get("running"):
                    break
                if time.monotonic() > deadline:
                    print(f"rigctl: {name} still running after {args.wait:g} s", file=sys.stderr)
                    return EXIT_REFUSED
                time.sleep(POLL_S)
    except (ServiceUnreachable, ProtocolError) as e:
        return client_error_exit(e)
    if args.json:
        print(json.dumps(report, default=str))
    if report.get("error"):
        print(f"rigctl: {report['error']}", file=sys.stderr)
        return EXIT_REFUSED
    result = report.get("result") or {}
    if not args.json:
        show(result)
    return EXIT_OK if result.get("ok") else EXIT_REFUSED


def show(result: dict[str, Any]) -> None:
    print(f"{result.get('procedure')}: oil {result.get('oil_c') or float('nan'):.1f} °C")
    print(f"  {'channel':<10} {'offset':>12} {'σ':>9} {'gain':>9} {'σ':>8} {'residual':>10} "
          f"{'accuracy':>10}  verdict")  # fmt: skip
    for name, c in result.get("channels", {}).items():
        acc = c.get("accuracy_offset")
        resid = c["residual"] if c["residual"] is not None else float("nan")
        verdict = "ok" if c["ok"] else "; ".join(c["problems"])
        print(
            f"  {name:<10} {c['offset']:>12.6g} {c['sigma_offset']:>9.3g} {c['gain']:>9.6f} "
            f"{c['sigma_gain']:>8.2g} {resid:>10.3g} "
            f"{acc if acc is not None else float('nan'):>10.3g}  {verdict}"
        )
    if result.get("valve_null_v"):
        nulls = ", ".join(f"{j} {v * 1e3:+.2f} mV" for j, v in result["valve_null_v"].items())
        print(f"  valve command at the balance: {nulls}")
    for name, h in (result.get("hydraulic_null") or {}).items():
        words = "; ".join(h["problems"]) if h["problems"] else "ok"
        print(
            f"  hydraulic null on {name}: {h['spool'] * 1e3:+.2f} mV of spool (reading "
            f"{h['reading'] * 1e3:+.2f} mV, σ {h['sigma'] * 1e3:.2f} mV), reported, not "
            f"applied: {words}"
        )
    for name, q in (result.get("shunt_points") or {}).items():
        print(
            f"  shunt on {name}: step {q['step']:.6g} (σ {q['sigma_step']:.3g}) for the "
            f"certificate's {q['equivalent_pa']:.6g} (σ {100 * q['sigma_equivalent_rel']:.2g} %); "
            f"unshunted {q['unshunted_before']:.6g} before, {q['unshunted_after']:.6g} after"
        )
    if t := result.get("temperature_point"):
        print(
            f"  {t['channel']} read {t['reading_c']:.3f} °C (σ {t['sigma_reading_c']:.2g}) "
            f"against the reference {t['reference_c']:.3f} °C (σ {t['sigma_reference_c']:.2g})"
        )
    if result.get("applied"):
        print(f"applied: {result['calibration']['source']}")
    elif result.get("refused"):
        print(f"not applied: {result['refused']}")
    else:
        print("not applied (run with --apply to apply)")
