"""Controller benchmark (tracking): PID cost against simple-pid, runner cost, MFS
optimisation time and condition numbers, tracking on the simulator. Prints a JSON summary on
its last line.

    .venv/bin/python bench/tracking.py [--quick] [--params FILE] [--profile PROFILE]

Amplitude–phase compensation (`amplitude_phase_1hz_5deg`): the same sine, 20 s, with the
profile's PID, with it and FF1 (the shipped compensated example's gains) and with `rigctl tune`'s
gains (ΔP off), each plain, compensated, and with three distortion harmonics; the error from
the desired sine over the last 3 s.

The excavator (`excavator_multisine`): PID and the model feed-forward on its four joints,
`bench/excavator_tracking.py`'s figures.

Tracking (1 Hz 5° sine): the model-based controllers run with *identified* parameters — the
product's real figure (`tracking_1hz_5deg.identified`): `--params FILE` (a parameter file from
a prior `rigctl identify`), else the bench first runs `rigctl identify --virtual-time` on the
profile and takes the parameter file it wrote. The same controllers with the simulator's true
parameters are reported apart, as a reference only (`tracking_1hz_5deg.truth_reference`):
no rig has them. Condition numbers and the runner's cost use the true plant (design figures,
not a controller's).

Timings are quoted as ratios to a reference measured in the same run (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import excavator_tracking  # noqa: E402
from controller.excitation import max_single_sine, optimise_mfs, trajectory_condition  # noqa: E402
from controller.experiment import Experiment  # noqa: E402
from controller.feedback import Feedback  # noqa: E402
from controller.pid import Pid, PidParams  # noqa: E402
from controller.runner import ExperimentRunner, HoldRunner  # noqa: E402
from daq.param_set import read_param_set  # noqa: E402
from daq.profile import load_profile  # noqa: E402
from daq.profile.plant import plant_params  # noqa: E402
from daq.profile.schema import Profile  # noqa: E402
from daq.sim_closed_loop import (  # noqa: E402
    SimLoop,
    StepRunner,
    gains_limits,
    rms_deg,
    sine_experiment,
)

log = logging.getLogger("bench.tracking")


def profile(name: str) -> Profile:
    return load_profile(ROOT / "hw_profiles" / f"{name}.toml")


def _best_of(fn: object, repeats: int = 5) -> float:
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best


def pid_cost(n: int) -> dict[str, float]:
    """Per-update cost of our Pid and of simple_pid.PID on the same command/feedback stream."""
    from simple_pid import PID as SimplePid

    rng = np.random.default_rng(0)
    cmd = (0.1 * np.sin(np.arange(n) * 2e-3) + 0.7).tolist()
    fb = (np.asarray(cmd) + 1e-3 * rng.standard_normal(n)).tolist()
    ours = Pid(PidParams(p=1.5, i=0.5, d=0.01, ff1=0.25, max_output=6.0, d_filter_hz=50.0), 1e-3)
    ours.enable(cmd[0], fb[0])
    theirs = SimplePid(1.5, 0.5, 0.01, setpoint=cmd[0], sample_time=None, output_limits=(-6.0, 6.0))

    def run_ours() -> None:
        u = ours.update
        for c, f in zip(cmd, fb, strict=True):
            u(c, f)

    def run_theirs() -> None:
        for c, f in zip(cmd, fb, strict=True):
            theirs.setpoint = c
            theirs(f, dt=1e-3)

    def run_empty() -> None:  # the loop itself, to subtract
        for _c, _f in zip(cmd, fb, strict=True):
            pass

    t_empty = _best_of(run_empty)
    t_ours = _best_of(run_ours) - t_empty
    t_theirs = _best_of(run_theirs) - t_empty
    return {
        "ours_ns": 1e9 * t_ours / n,
        "simple_pid_ns": 1e9 * t_theirs / n,
        "ratio_ours_over_simple_pid": t_ours / t_theirs,
    }


def runner_cost(n: int, pid_ns: float) -> dict[str, float]:
    """One ExperimentRunner.step (2 joints, MFS + model feed-forward) in PID-update units."""
    p = profile("sim-2dof")
    gains, limits = gains_limits(p)
    with open(ROOT / "experiments" / "standard-2dof.toml", "rb") as f:
        d = tomllib.load(f)
    mfs = next(s for s in d["segments"] if s["name"] == "mfs")
    mfs["controller"] = {"kind": "pid_ff", "pressure_source": "measured"}
    d["segments"] = [mfs]
    r = ExperimentRunner(Experiment.from_dict(d), gains, limits, p.period, plant_params(p))
    fb = Feedback(2)
    fb.q[:] = np.radians([40.0, 30.0])
    fb.p_cap[:] = 3.4e6
    fb.p_rod[:] = 3.0e6
    r.enable(fb)
    ref, volts = np.zeros(2), np.zeros(2)

    def run() -> None:
        for _ in range(n):
            r.step(fb, ref, volts)

    t = _best_of(run, 3) / n
    return {"runner_step_us": 1e6 * t, "runner_step_over_pid_update": 1e9 * t / pid_ns}


def conditions(quick: bool) -> dict[str, object]:
    p = profile("sim-2dof")
    params = plant_params(p)
    _, limits = gains_limits(p)
    home = p.home_rad()
    kw = {"restarts": 1, "maxiter": 40, "n_samples": 120} if quick else {}
    sine = max_single_sine(home, 0.1, limits)
    out: dict[str, object] = {}
    t_eval = _best_of(lambda: trajectory_condition(sine, "mechanical", params, 200), 5)
    for model in ("mechanical", "fluid", "both"):
        res = optimise_mfs(home, 0.1, 5, limits, model=model, params=params, seed=3, **kw)
        row = {
            "seconds": res.seconds,
            "seconds_over_one_condition_eval": res.seconds / t_eval,
            "success": res.success,
        }
        for m in ("mechanical", "fluid"):
            c_mfs = trajectory_condition(res.trajectory, m, params)
            c_sine = trajectory_condition(sine, m, params)
            row[f"cond_{m}"] = c_mfs
            row[f"cond_{m}_single_sine"] = c_sine
            row[f"{m}_improvement"] = c_sine / c_mfs
        out[f"optimised_for_{model}"] = row
    with open(ROOT / "experiments" / "standard-2dof.toml", "rb") as f:
        exp = Experiment.from_dict(tomllib.load(f))
    std = next(s for s in exp.segments if s.name == "mfs").trajectory
    out["standard_2dof_mfs"] = {
        m: trajectory_condition(std, m, params) for m in ("mechanical", "fluid")
    }
    return out


def identified_params(profile_path: Path, params_file: Path | None) -> tuple[object, str]:
    """(parameters, their file): `params_file` as the service would load it (checked against
    the profile, missing keys from its known geometry, never the truth), else the file a
    fresh `rigctl identify --virtual-time` run writes."""
    p = load_profile(profile_path)
    if params_file is None:
        out = Path(tempfile.mkdtemp(prefix="bench-tracking-"))
        cmd = [sys.executable, "-m", "rigctl.main", "identify", "--profile"]
        cmd += [str(profile_path), "--virtual-time", "--no-report", "--no-verify"]
        cmd += ["--out", str(out), "--json"]
        log.info("identifying first: %s", " ".join(cmd))
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"rigctl identify failed ({done.returncode}): {done.stderr[-2000:]}")
        params_file = Path(json.loads(done.stdout)["online_param_file"])
    return read_param_set(params_file, p).params, str(params_file)


def _tracking_rms(p: Profile, params: object, seconds: float) -> dict[str, object]:
    """RMS tracking error per controller with `params`, and PID's over each feed-forward's."""
    gains, limits = gains_limits(p)
    out: dict[str, object] = {}
    for name, ctrl in (
        ("pid_ff_model", {"kind": "pid_ff"}),
        ("pid_ff_measured", {"kind": "pid_ff", "pressure_source": "measured"}),
    ):
        d = sine_experiment(p, ctrl, seconds=seconds)
        d["pid"] = {"p": 1.5}
        r = ExperimentRunner(Experiment.from_dict(d), gains, limits, p.period, params)
        _, ref, q = SimLoop(p).run(r, seconds)
        out[f"rms_deg_{name}"] = rms_deg(ref, q, 1000)
    return out


def tracking(seconds: float, profile_path: Path, params_file: Path | None) -> dict[str, object]:
    p = load_profile(profile_path)
    gains, limits = gains_limits(p)
    out: dict[str, object] = {}
    for name, ctrl in (
        ("pid", {"kind": "pid"}),
        ("pid_ff1", {"kind": "pid", "pid": [{"ff1": 0.25}, {"ff1": 0.16}][: len(p.joints)]}),
    ):  # no plant model: the same whatever the parameters
        d = sine_experiment(p, ctrl, seconds=seconds)
        d["pid"] = {"p": 1.5}
        r = ExperimentRunner(Experiment.from_dict(d), gains, limits, p.period, None)
        _, ref, q = SimLoop(p).run(r, seconds)
        out[f"rms_deg_{name}"] = rms_deg(ref, q, 1000)
    base = np.asarray(out["rms_deg_pid"])
    ident, source = identified_params(profile_path, params_file)
    for label, params in (("identified", ident), ("truth_reference", plant_params(p))):
        row = _tracking_rms(p, params, seconds)
        for ff in ("model", "measured"):
            row[f"pid_over_ff_{ff}"] = (base / np.asarray(row[f"rms_deg_pid_ff_{ff}"])).tolist()
        out[label] = row
    out["identified"]["params_file"] = source  # type: ignore[index]
    out["truth_reference"]["note"] = (  # type: ignore[index]
        "the simulator's true parameters: a reference only, no rig has them"
    )
    # Holding with the profile's gains, and with p = 8 (the hydraulic resonance: limit cycle).
    for name, gg in (("hold_profile_gains", gains), ("hold_p8", [g.replace(p=8.0) for g in gains])):
        _, ref, q = SimLoop(p).run(HoldRunner(gg, limits, p.period), 3.0)
        x = q[1000:, 0] - q[1000:, 0].mean()
        f = np.fft.rfftfreq(x.size, p.period)[np.argmax(np.abs(np.fft.rfft(x)))]
        out[name] = {"p": gg[0].p, "rms_deg": rms_deg(ref, q, 1000), "peak_hz": float(f)}
    return out


def _variants(profile_path: Path) -> dict[str, Profile]:
    """The profile and realistic variants 20–30 % off: softer oil, other flow gains, heavier
    arm (the simulator's truth only; the software is told nothing)."""
    from daq.profile.loader import parse_profile

    with open(profile_path, "rb") as f:
        base = tomllib.load(f)
    out = {"nominal": parse_profile(base)}
    for name, edit in (
        ("bulk_x0.75", lambda t: t.update(bulk_modulus_pa=t["bulk_modulus_pa"] * 0.75)),
        ("flow_x0.75", lambda t: [j.update(flow_gains=[0.75 * c for c in j["flow_gains"]])
                                  for j in t["joints"]]),
        ("inertia_x1.3", lambda t: [j.update(inertia=1.3 * j["inertia"]) for j in t["joints"]]),
    ):  # fmt: skip
        d = json.loads(json.dumps(base))
        edit(d["backend"]["sim"]["plant"])
        out[name] = parse_profile(d)
    return out


#: The 2° step comes after this long a hold, s.
STEP_AT_S = 4.0
#: Overshoot is read on the angle averaged over this many cycles (20 ms), from the mean of the
#: last BASELINE_CYCLES before the step: the raw maximum of a resolver reading (14-bit, 0.022°
#: steps = 1.1 % of 2°, 0.02° 1σ noise) over 3 s is biased up by 2–3 % by the noise alone,
#: and a 20 ms mean takes 0.6 % off a 3 Hz response. The raw figure is kept beside it.
PEAK_MEAN_CYCLES = 20
BASELINE_CYCLES = 100


def moving_mean(x: np.ndarray, n: int) -> np.ndarray:
    """Column-wise mean over each window of `n` rows (len(x) − n + 1 rows)."""
    c = np.cumsum(np.vstack([np.zeros((1, x.shape[1])), x]), axis=0)
    return np.asarray((c[n:] - c[:-n]) / n)


def tuned_tracking(profile_path: Path, params: object, seconds: float) -> dict[str, object]:
    """`rigctl tune`'s gains (3 Hz, margin 2) with the identified parameters: the 1 Hz 5°
    sine with each compensation switched on in turn (ratios over the profile's PID), and a 2°
    step on the profile and on realistic variants (overshoot, peak following error)."""
    from controller import tuning

    p = load_profile(profile_path)
    gains, limits = gains_limits(p)
    home = np.radians([j.home_deg for j in p.joints])
    tuned = tuning.tune(params, home, p.period, 3.0, 2.0)
    tg = [
        {"p": t.gains.p, "i": t.gains.i, "ff1": t.gains.ff1, "dp": t.gains.dp,
         "dp_hp_hz": t.gains.dp_hp_hz}
        for t in tuned
    ]  # fmt: skip
    out: dict[str, object] = {"gains": tg}
    out["hydraulic_mode"] = [
        {"natural_hz": t.natural_hz, "damping": t.damping, "gain_margin": t.gain_margin}
        for t in tuned
    ]

    def sine(ctrl: Any, pid: object, prm: object) -> np.ndarray:
        d = sine_experiment(p, ctrl, seconds=seconds)
        d["pid"] = pid
        r = ExperimentRunner(Experiment.from_dict(d), gains, limits, p.period, prm)
        _, ref, q = SimLoop(p).run(r, seconds)
        return np.asarray(rms_deg(ref, q, 1000))

    base = sine({"kind": "pid"}, [{} for _ in p.joints], None)
    out["rms_deg_profile_pid"] = base.tolist()
    ff = [dict(g, ff1=0.0) for g in tg]  # the model's feed-forward replaces ff1
    cases = {
        "tuned_pid_ff1": ({"kind": "pid"}, tg),
        "tuned_pid_ff1_no_dp": ({"kind": "pid"}, [dict(g, dp=0.0) for g in tg]),
        "tuned_model_ff": ({"kind": "pid_ff"}, ff),
        "tuned_model_ff_no_dp": ({"kind": "pid_ff"}, [dict(g, dp=0.0) for g in ff]),
        "tuned_model_ff_coulomb": ({"kind": "pid_ff", "coulomb_ff": 1.0}, ff),
        "tuned_model_ff_coulomb_no_dp": (
            {"kind": "pid_ff", "coulomb_ff": 1.0},
            [dict(g, dp=0.0) for g in ff],
        ),
    }
    # The valve's null and lap from the file's [structure] (the batch's choice), each alone
    # and together, over the best of the above (ΔP off); a file without one has no such rows.
    no_dp = [dict(g, dp=0.0) for g in ff]
    if getattr(params, "valve_structure", None) is not None:
        for name, ctrl in {
            "tuned_model_ff_no_dp_valve_null": {"valve_null": True},
            "tuned_model_ff_no_dp_valve_lap": {"valve_lap": True},
            "tuned_model_ff_no_dp_valve_null_lap": {"valve_null": True, "valve_lap": True},
            "tuned_model_ff_coulomb_no_dp_valve_null_lap": {
                "coulomb_ff": 1.0, "valve_null": True, "valve_lap": True,
            },
            # Per joint, as the rows above suggest on the realistic profile: the lap's inverse
            # only on joint 2 (on joint 1, whose seals stick, it cost more than it gave).
            "tuned_model_ff_no_dp_valve_null_lap_j2": {
                "valve_null": True, "valve_lap": [False, True][: len(p.joints)],
            },
        }.items():  # fmt: skip
            cases[name] = ({"kind": "pid_ff", **ctrl}, no_dp)
        out["valve_structure_v"] = np.asarray(params.valve_structure).tolist()  # type: ignore[attr-defined]
    else:
        out["valve_structure_v"] = None
    for name, (ctrl, pid) in cases.items():
        rms = sine(ctrl, pid, params)
        out[name] = {"rms_deg": rms.tolist(), "improvement": (base / rms).tolist()}
    # The step runs without the velocity feed-forward: the reference's derivative is an
    # impulse there, and the question is the feedback gains' own overshoot. It comes after
    # STEP_AT_S of holding, once the start's transient (the integral taking up the gravity
    # load, seconds with a low integral gain) is over; the same hold without the step is run
    # too, and the step's own response is also given against it (what the hold alone does —
    # a drift or a stick–slip cycle — taken out).
    tuned_gains = [g.replace(**dict(t, ff1=0.0)) for g, t in zip(gains, tg, strict=True)]
    steps: dict[str, object] = {}
    k = round(STEP_AT_S / p.period)
    span = STEP_AT_S + 3.0
    for name, prof in _variants(profile_path).items():
        step = math.radians(2.0)
        _, _, q_hold = SimLoop(prof).run(StepRunner(tuned_gains, limits, p.period, 0.0, 0.0), span)
        _, ref, q = SimLoop(prof).run(
            StepRunner(tuned_gains, limits, p.period, step, STEP_AT_S), span
        )
        raw = (q[k:] - q[k - 1]) / step
        base = q[k - BASELINE_CYCLES : k].mean(axis=0)
        rise = (moving_mean(q[k:], PEAK_MEAN_CYCLES) - base) / step
        own = moving_mean(q[k:] - q_hold[k:], PEAK_MEAN_CYCLES) / step
        steps[name] = {
            "overshoot_pct": (100 * (rise.max(axis=0) - 1.0)).tolist(),
            "overshoot_raw_pct": (100 * (raw.max(axis=0) - 1.0)).tolist(),
            "overshoot_over_hold_pct": (100 * (own.max(axis=0) - 1.0)).tolist(),
            "hold_drift_deg": np.degrees(q_hold[-1] - q_hold[k]).tolist(),
            "final_error_deg": np.degrees(ref[-1] - q[-1]).tolist(),
            "max_following_error_deg": np.degrees(np.abs(ref[k:] - q[k:]).max(axis=0)).tolist(),
        }
    out["predicted_step_overshoot_pct"] = [t.step_overshoot_pct for t in tuned]
    out["step_2deg"] = steps
    return out


def valve_compensation_converged(
    profile_path: Path, params: object, tuned: Sequence[dict[str, float]], seconds: float = 20.0
) -> dict[str, object] | None:
    """The valve's null and lap after convergence: the 1 Hz 5° sine under `pid_ff` with
    `tuned` (ΔP off), RMS over the last 3 s of `seconds`, each over the profile's PID measured
    the same way (the `tuned` rows are seconds 1–4, where the integral is still taking up the
    null offset). None when the parameters have no valve structure."""
    if getattr(params, "valve_structure", None) is None:
        return None
    p = load_profile(profile_path)
    gains, limits = gains_limits(p)
    k = round(3.0 / p.period)
    cases: dict[str, tuple[dict[str, Any], object, object]] = {
        "profile_pid": ({"kind": "pid"}, [{} for _ in p.joints], None),
        "tuned_model_ff_no_dp": ({"kind": "pid_ff"}, tuned, params),
        "valve_null": ({"kind": "pid_ff", "valve_null": True}, tuned, params),
        "valve_lap": ({"kind": "pid_ff", "valve_lap": True}, tuned, params),
        "valve_null_lap_j2": (
            {"kind": "pid_ff", "valve_null": True, "valve_lap": [False, True][: len(p.joints)]},
            tuned,
            params,
        ),
    }
    out: dict[str, object] = {"seconds": seconds, "tail_s": 3.0}
    base: np.ndarray | None = None
    for name, (ctrl, pid, prm) in cases.items():
        d = sine_experiment(p, ctrl, seconds=seconds)
        d["pid"] = pid
        r = ExperimentRunner(Experiment.from_dict(d), gains, limits, p.period, prm)
        _, ref, q = SimLoop(p).run(r, seconds)
        rms = np.degrees(np.sqrt(np.mean((ref[-k:] - q[-k:]) ** 2, axis=0)))
        base = rms if base is None else base
        out[name] = {"rms_deg": rms.tolist(), "improvement": (base / rms).tolist()}
    return out


def amplitude_phase_tracking(
    profile_path: Path, tuned: Sequence[dict[str, float]], seconds: float = 20.0
) -> dict[str, object]:
    """The 1 Hz 5° sine with amplitude–phase compensation (controller.amplitude_phase), its
    error measured from the *desired* sine (the runner's reference is the adapted command)
    over the last 3 s of `seconds`, after convergence; each case's improvement over the
    profile's PID measured the same way. `tuned`: `rigctl tune`'s gains, ΔP off."""
    from daq.sim_closed_loop import track_desired

    p = load_profile(profile_path)
    gains, limits = gains_limits(p)
    no_pid = [{} for _ in p.joints]
    ff1 = [{"ff1": 0.25}, {"ff1": 0.16}][: len(p.joints)]
    cases: dict[str, tuple[object, dict[str, Any] | None]] = {
        "profile_pid": (no_pid, None),
        "profile_pid_apc": (no_pid, {"kind": "amplitude_phase"}),
        "profile_pid_apc_harmonics3": (no_pid, {"kind": "amplitude_phase", "harmonics": 3}),
        # experiments/sine-compensated-2dof.toml's gains: the profile's p with FF1.
        "profile_pid_ff1": (ff1, None),
        "profile_pid_ff1_apc_harmonics3": (ff1, {"kind": "amplitude_phase", "harmonics": 3}),
        "tuned_pid_ff1_no_dp": (tuned, None),
        "tuned_pid_ff1_no_dp_apc": (tuned, {"kind": "amplitude_phase"}),
        "tuned_pid_ff1_no_dp_apc_harmonics3": (
            tuned,
            {"kind": "amplitude_phase", "harmonics": 3},
        ),
    }
    out: dict[str, object] = {"seconds": seconds, "tail_s": 3.0}
    base: np.ndarray | None = None
    for name, (pid, comp) in cases.items():
        d = sine_experiment(p, {"kind": "pid"}, seconds=seconds)
        d["pid"] = pid
        if comp is not None:
            d["segments"][0]["compensation"] = comp
        exp = Experiment.from_dict(d)
        r = ExperimentRunner(exp, gains, limits, p.period, None)
        _, want, q = track_desired(p, r, exp.segments[0].trajectory, "sine", seconds + 2.0)
        k = round(3.0 / p.period)
        rms = np.degrees(np.sqrt(np.mean((want[-k:] - q[-k:]) ** 2, axis=0)))
        base = rms if base is None else base
        row: dict[str, object] = {"rms_deg": rms.tolist(), "improvement": (base / rms).tolist()}
        if comp is not None:
            row["compensation"] = r.compensation()[0]
        out[name] = row
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller optimisation and counts")
    ap.add_argument(
        "--params",
        type=Path,
        default=None,
        help="parameter file from a prior `rigctl identify` (default: identify first)",
    )
    ap.add_argument(
        "--profile",
        type=Path,
        default=ROOT / "hw_profiles" / "sim-2dof.toml",
        help="simulated profile for the tracking figures (default hw_profiles/sim-2dof.toml)",
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    n = 20_000 if args.quick else 200_000
    res: dict[str, object] = {}
    res["pid"] = pid_cost(n)
    log.info("pid: %s", res["pid"])
    res["runner"] = runner_cost(n // 10, res["pid"]["ours_ns"])  # type: ignore[index]
    log.info("runner: %s", res["runner"])
    res["conditions"] = conditions(args.quick)
    log.info("conditions: %s", res["conditions"])
    res["tracking_1hz_5deg"] = tracking(4.0, args.profile, args.params)
    log.info("tracking: %s", res["tracking_1hz_5deg"])
    track: dict[str, Any] = res["tracking_1hz_5deg"]  # type: ignore[assignment]
    ident, _ = identified_params(args.profile, Path(track["identified"]["params_file"]))
    res["tuned"] = tuned_tracking(args.profile, ident, 4.0)
    log.info("tuned: %s", res["tuned"])
    tuned_gains: Any = res["tuned"]["gains"]  # type: ignore[index]
    res["amplitude_phase_1hz_5deg"] = amplitude_phase_tracking(
        args.profile, [dict(g, dp=0.0) for g in tuned_gains]
    )
    log.info("amplitude-phase: %s", res["amplitude_phase_1hz_5deg"])
    res["valve_compensation_converged"] = valve_compensation_converged(
        args.profile, ident, [dict(g, ff1=0.0, dp=0.0) for g in tuned_gains]
    )
    log.info("valve compensation, converged: %s", res["valve_compensation_converged"])
    res["excavator_multisine"] = excavator_tracking.measure()
    log.info("excavator: %s", res["excavator_multisine"])
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
