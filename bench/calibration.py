"""Transducer calibration on the realistic plant against the simulator's truth.

    .venv/bin/python bench/calibration.py [--seeds 1,2,3,4,5] [--profile P]

For each seed, the realistic profile (hw_profiles/sim-2dof-realistic.toml) given a hydraulic
station (daq.station.twin: power unit and supply transducer) runs in virtual time behind the
service's command handler, and the procedures run as `rigctl calibrate … --apply` would start
them: pressure_zero, pressure_span, position, valve_null. Each result is compared with the truth
of the simulated sensors (`sim_error`), at the loop time it was measured:

- pressure offsets: offset + drift·t, target within 2 kPa;
- pressure spans (against the twin's supply channel): 1 + gain_error, reported with the error
  over the span's own σ;
- potentiometer zero and span: offset within 0.05 mm, 1 + gain_error within 0.1 %;
- resolver mounting offset (reported);
- LVDT zero and span from the spool's stops (reported), and the valve's hydraulic null
  (reported by the procedure, not applied): the LVDT's reading where the metering edges are
  centred, o + (1 + g)·(−b(T)) with the valve's null bias b(T) = b₀ + (db/dT)(T − T_ref) at the
  oil temperature of the run, target within 0.5 mV, with the error over its σ; also the valve
  command at the balance, and the same reading against the true balance point itself (where
  the true edges pass equal flows into and out of both chambers at one pressure, the true
  leaks included: `SimBackend.true_valve_balance`), which is what a static hold can measure;
  the two differ by the edges' flow-gain mismatch, a·(ρ−1)/(ρ+1), which no static test separates
  (`--matched-edges` gives the simulated valves ρ = 1, where the two are the same point);
- pressure gains from the shunt resistors (pressure_shunt, last, not applied: the chain above
  is unchanged by it): 1 + gain_error, reported with the error over the procedure's σ, beside
  the simulated resistor's own error against its certificate (which the σ must cover).

- the oil temperature transmitter (oil_temperature, first, applied) against the simulator's
  reference thermometer (0.1 °C, `SimBackend.reference_thermometer_c`): the corrected reading's
  error at the true temperature, against the procedure's σ.

JSON on the last line (per seed, worst over seeds, targets, pass flags); progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daq.backends.sim import SimBackend  # noqa: E402
from daq.loop import Loop  # noqa: E402
from daq.profile.loader import load_profile  # noqa: E402
from daq.profile.schema import Profile  # noqa: E402
from daq.service.control_api import ControlApi, joint_gains, make_hold_runner  # noqa: E402
from daq.service.procedure_temperature import DEFAULT_REFERENCE_SIGMA_C  # noqa: E402
from daq.service.twin_calibration import run_procedure  # noqa: E402
from daq.station.twin import with_station  # noqa: E402

TARGETS = {
    "pressure_offset_pa": 2000.0,
    "pot_zero_m": 0.05e-3,
    "pot_span_rel": 1e-3,
    "valve_null_v": 0.5e-3,
    "valve_balance_v": 0.5e-3,
}


def _truth(profile: Profile, name: str, t: float) -> tuple[float, float]:
    ch = next(c for c in profile.inputs if c.name == name)
    e = ch.sim_error
    if e is None:
        return 0.0, 1.0
    return e.offset + e.drift_per_hour * t / 3600.0, 1.0 + e.gain_error


def matched_edges(profile: Profile) -> Profile:
    """The profile with its simulated valves' fourth flow gain set so that ρ² = Cf₁Cf₃/(Cf₀Cf₂)
    = 1: with matched edges the chambers balance at centred edges, whatever the load."""
    data = profile.model_dump(exclude_none=True)
    for j in data["backend"]["sim"]["plant"]["joints"]:
        cf = j["flow_gains"]
        j["flow_gains"] = [cf[0], cf[1], cf[2], cf[0] * cf[2] / cf[1]]
    return Profile.model_validate(data)


def one_seed(base: Profile, seed: int, cal_dir: Path) -> dict[str, Any]:
    profile = with_station(base, seed=seed)
    sim = SimBackend.from_profile(profile)
    sim.open()
    loop = Loop(
        profile, sim, hold=make_hold_runner(profile, joint_gains(profile)), virtual_time=True,
        ring_capacity=1 << 14,
    )  # fmt: skip
    loop.warm_up()
    api = ControlApi(loop, calibration_dir=cal_dir / f"seed{seed}")
    loop.start()
    out: dict[str, Any] = {"seed": seed}
    try:
        oil_ch = profile.oil_temperature
        if oil_ch is not None:
            ref = sim.reference_thermometer_c(DEFAULT_REFERENCE_SIGMA_C)
            temp = run_procedure(api, "oil_temperature", apply=True, reference_c=ref)
            c = temp["channels"][oil_ch.name]
            offset, gain = _truth(profile, oil_ch.name, loop.t)
            true_c = sim.true_oil_temperature()
            # The corrected reading at the true temperature, less the truth (°C).
            out["oil_temperature_error_c"] = {
                oil_ch.name: (gain * true_c + offset - c["offset"]) / c["gain"] - true_c
            }
            out["oil_temperature_sigma_c"] = {oil_ch.name: c["sigma_offset"]}
        zero = run_procedure(api, "pressure_zero", apply=True)
        t = loop.t
        out["pressure_offset_error_pa"] = {
            n: c["offset"] - _truth(profile, n, t)[0] for n, c in zero["channels"].items()
        }
        span = run_procedure(api, "pressure_span", apply=True)
        out["pressure_span_error_rel"], out["pressure_span_sigma_rel"] = {}, {}
        for n, c in span["channels"].items():
            _, gain = _truth(profile, n, loop.t)
            out["pressure_span_error_rel"][n] = c["gain"] / gain - 1.0
            out["pressure_span_sigma_rel"][n] = c["sigma_gain"] / gain
        pos = run_procedure(api, "position", apply=True)
        out["pot_zero_error_m"], out["pot_span_error_rel"], out["resolver_error_rad"] = {}, {}, {}
        for n, c in pos["channels"].items():
            offset, gain = _truth(profile, n, loop.t)
            ch = next(x for x in profile.inputs if x.name == n)
            if ch.role == "potentiometer":
                out["pot_zero_error_m"][n] = c["offset"] - offset
                out["pot_span_error_rel"][n] = c["gain"] / gain - 1.0
            else:
                out["resolver_error_rad"][n] = c["offset"] - offset
        null = run_procedure(api, "valve_null", apply=True)
        oil = sim.true_oil_temperature()
        eff = sim.true_effects
        out["oil_c"] = oil
        out["valve_null_error_v"], out["lvdt_span_error_rel"] = {}, {}
        out["valve_balance_error_v"], out["valve_null_problems"] = {}, {}
        out["valve_null_residual_v"], out["valve_null_command_v"] = {}, null.get("valve_null_v")
        out["valve_null_sigma_v"], out["lvdt_zero_error_v"], out["lvdt_zero_sigma_v"] = {}, {}, {}
        joints = [j.name for j in profile.joints]
        for n, h in null["hydraulic_null"].items():
            ch = next(x for x in profile.inputs if x.name == n)
            j = joints.index(str(ch.joint))
            offset, gain = _truth(profile, n, loop.t)
            je = eff.joints[j]
            bias = je.null_bias + je.null_shift_per_k * (oil - eff.reference_c)
            out["valve_null_error_v"][n] = h["reading"] - (offset - gain * bias)
            hold = offset + gain * sim.true_valve_balance(j)
            out["valve_balance_error_v"][n] = h["reading"] - hold
            out["valve_null_residual_v"][n] = h["residual"]
            out["valve_null_sigma_v"][n] = h["sigma"]
            out["valve_null_problems"][n] = h["problems"]
            c = null["channels"].get(n)  # the LVDT from the spool's stops, where reached
            if c is not None:
                out["lvdt_zero_error_v"][n] = c["offset"] - offset
                out["lvdt_zero_sigma_v"][n] = c["sigma_offset"]
                out["lvdt_span_error_rel"][n] = c["gain"] / gain - 1.0
        shunt = run_procedure(api, "pressure_shunt")
        out["pressure_shunt_error_rel"], out["pressure_shunt_sigma_rel"] = {}, {}
        out["shunt_certificate_error_rel"] = {}
        for n, c in shunt["channels"].items():
            _, gain = _truth(profile, n, loop.t)
            out["pressure_shunt_error_rel"][n] = c["gain"] / gain - 1.0
            out["pressure_shunt_sigma_rel"][n] = c["sigma_gain"] / gain
            eq = shunt["shunt_points"][n]["equivalent_pa"]
            out["shunt_certificate_error_rel"][n] = sim.true_shunt_equivalent(n) / eq - 1.0
        out["applied"] = {
            "pressure_zero": zero["applied"], "pressure_span": span["applied"],
            "position": pos["applied"],
            "valve_null": null["applied"],
        }  # fmt: skip
    finally:
        loop.stop()
        loop.join(30.0)
    return out


def _worst(seeds: list[dict[str, Any]], key: str) -> float:
    return max(abs(v) for s in seeds for v in s[key].values())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--profile", default=str(ROOT / "hw_profiles" / "sim-2dof-realistic.toml"))
    ap.add_argument(
        "--matched-edges", action="store_true",
        help="the simulator's valves with matched metering edges (Cf⁻⁻ = Cf⁺⁺·Cf⁻⁺/Cf⁺⁻, ρ = 1): "
        "the balance point is then the centred edges",
    )  # fmt: skip
    args = ap.parse_args(argv)
    base = load_profile(args.profile)
    if args.matched_edges:
        base = matched_edges(base)
    seeds = [int(s) for s in args.seeds.split(",")]
    results = []
    t0 = time.monotonic()
    with TemporaryDirectory() as tmp:
        for seed in seeds:
            print(f"seed {seed} …", file=sys.stderr, flush=True)
            results.append(one_seed(base, seed, Path(tmp)))
    worst = {
        "pressure_offset_pa": _worst(results, "pressure_offset_error_pa"),
        "pressure_span_rel": _worst(results, "pressure_span_error_rel"),
        "pressure_shunt_rel": _worst(results, "pressure_shunt_error_rel"),
        "pot_zero_m": _worst(results, "pot_zero_error_m"),
        "pot_span_rel": _worst(results, "pot_span_error_rel"),
        "resolver_offset_rad": _worst(results, "resolver_error_rad"),
        "lvdt_span_rel": _worst(results, "lvdt_span_error_rel"),
        "lvdt_zero_v": _worst(results, "lvdt_zero_error_v"),
        "valve_null_v": _worst(results, "valve_null_error_v"),
        "valve_balance_v": _worst(results, "valve_balance_error_v"),
    }
    passed = {k: worst[k] <= v for k, v in TARGETS.items()}
    # Each estimate against its own σ: |error| / σ, worst over seeds and channels (≤ 3: the
    # σ is a promise).
    zmax = {
        "pressure_span": max(
            abs(s["pressure_span_error_rel"][n]) / s["pressure_span_sigma_rel"][n]
            for s in results for n in s["pressure_span_error_rel"]
        ),
        "pressure_shunt": max(
            abs(s["pressure_shunt_error_rel"][n]) / s["pressure_shunt_sigma_rel"][n]
            for s in results for n in s["pressure_shunt_error_rel"]
        ),
        "valve_null": max(
            abs(s["valve_null_error_v"][n]) / s["valve_null_sigma_v"][n]
            for s in results for n in s["valve_null_error_v"]
        ),
        "lvdt_zero": max(
            (abs(s["lvdt_zero_error_v"][n]) / s["lvdt_zero_sigma_v"][n]
             for s in results for n in s["lvdt_zero_error_v"]),
            default=0.0,
        ),
        "oil_temperature": max(
            (abs(s["oil_temperature_error_c"][n]) / s["oil_temperature_sigma_c"][n]
             for s in results for n in s.get("oil_temperature_error_c", {})),
            default=0.0,
        ),
    }  # fmt: skip
    worst["oil_temperature_c"] = max(
        (abs(v) for s in results for v in s.get("oil_temperature_error_c", {}).values()),
        default=0.0,
    )
    passed["sigma_covers_3"] = all(z <= 3.0 for z in zmax.values())
    print(json.dumps({
        "bench": "calibration", "profile": args.profile, "matched_edges": args.matched_edges,
        "seeds": results, "worst": worst,
        "worst_error_over_sigma": zmax,
        "targets": TARGETS, "pass": passed, "wall_s": time.monotonic() - t0,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
