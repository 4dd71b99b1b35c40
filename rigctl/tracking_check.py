"""Tracking check: does the loaded plant model make the rig follow a trajectory better?

A 1 Hz, 5° sine on every joint about its home position runs twice on the running service —
once with the rig's PID alone (`pid`), once with the same PID plus the inverse-model
feed-forward of the service's loaded parameters (`pid_ff`, DESIGN §1.1–1.2) — each recorded.
The RMS of reference − measured joint angle over the sine, its first period left out (the
approach move ends at rest while the sine starts moving), is returned per joint in degrees with
the ratio PID / model. Both runs use the same gains, so the ratio is the model's doing.

Needs a service in IDLE or ARMED with parameters loaded (`rigctl params load`) and a recorder
writing to a directory this process can read (as `rigctl identify`'s session does).

A healthy rig must not fault on its own demonstration: where the rig's plant is far from the
reference (a softer oil, other flow gains) the PID-only sine's following error can cross the
interlock's limit (base + per-velocity·|reference velocity|) and end the check with a trip.
So before anything moves, the PID run is simulated in closed loop with the loaded model
(`predicted_margin`: the service's own runner, gains and limits through
`estimator.validation_closed_loop`), and the sine's amplitude is lowered until the predicted
peak error is at most `MARGIN` of its limit; the result says what ran and why.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from daq.loop.states import State
from daq.recording.reader import read_run

AMPLITUDE_DEG = 5.0
FREQUENCY_HZ = 1.0
DURATION_S = 5.0
#: The largest predicted peak following error, as a fraction of the interlock's limit, that
#: the check runs at. The reference rig's own PID-only 5° sine peaks at 0.86 of it (its p = 2
#: V/rad hold rings on the oil column), so the margin left for the model's error is thin: the
#: check lowers the amplitude where the model predicts worse, and refuses to run where no
#: amplitude is predicted inside it.
MARGIN = 0.9
#: The smallest amplitude the check lowers to, degrees; below it the check is not run.
MIN_AMPLITUDE_DEG = 0.5
#: The first period is left out of the RMS (see the module doc).
SKIP_S = 1.0 / FREQUENCY_HZ


class Session(Protocol):
    """What the check needs of a connection to the service (`rigctl.session.RigSession`)."""

    def command(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]: ...

    def run_experiment(self, experiment: dict[str, Any], timeout: float) -> dict[str, Any]: ...


@dataclass(frozen=True)
class TrackingResult:
    joints: list[str]
    pid_rms_deg: list[float]
    model_rms_deg: list[float]
    runs: list[str]
    amplitude_deg: float = AMPLITUDE_DEG
    #: Why the amplitude is not AMPLITUDE_DEG (the prediction), or "".
    why: str = ""
    #: What `settle_hold` found and did before each run ("" where the hold was at rest).
    settled: tuple[str, ...] = ()

    @property
    def improvement(self) -> list[float]:
        """PID RMS / model RMS per joint (> 1: the model helps)."""
        return [
            p / m if m > 0 else math.inf
            for p, m in zip(self.pid_rms_deg, self.model_rms_deg, strict=True)
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "joints": self.joints,
            "pid_rms_deg": self.pid_rms_deg,
            "model_rms_deg": self.model_rms_deg,
            "improvement": self.improvement,
            "runs": self.runs,
            "amplitude_deg": self.amplitude_deg,
            "why": self.why,
            "settled": list(self.settled),
            "trajectory": f"{FREQUENCY_HZ:g} Hz {self.amplitude_deg:.3g}° sine, {DURATION_S:g} s",
        }

    def lines(self) -> list[str]:
        out = [f"tracking ({FREQUENCY_HZ:g} Hz {self.amplitude_deg:.3g}° sine), RMS error:"]
        if self.why:
            out.append(f"  ({self.why})")
        if any(self.settled):
            out.append("  (each run started from a hold at rest: see the warnings)")
        for j, name in enumerate(self.joints):
            out.append(
                f"  {name}: PID {self.pid_rms_deg[j]:.3f}°, PID + model "
                f"{self.model_rms_deg[j]:.3f}°, {self.improvement[j]:.1f}× better"
            )
        return out


def sine_experiment(
    home_deg: list[float], controller: str, amplitude_deg: float = AMPLITUDE_DEG
) -> dict[str, Any]:
    n = len(home_deg)
    return {
        "name": f"tracking-check-{controller}",
        "description": "rigctl tracking check (rigctl/tracking_check.py)",
        "home_deg": list(home_deg),
        "segments": [
            {
                "name": "sine",
                "duration_s": DURATION_S,
                "trajectory": {
                    "kind": "sine",
                    "amplitude_deg": [amplitude_deg] * n,
                    "frequency_hz": [FREQUENCY_HZ] * n,
                },
                "controller": {"kind": controller},
            }
        ],
    }


def joint_columns(describe: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """Joint names, their reference columns and measured-angle (resolver) columns."""
    joints = [j["name"] for j in describe["joints"]]
    by_joint = {
        c["joint"]: f"eng.{c['name']}" for c in describe["channels"] if c["role"] == "resolver"
    }
    missing = [j for j in joints if j not in by_joint]
    if missing:
        raise ValueError(f"tracking check: joints {missing} have no resolver channel")
    return joints, [f"ref.{j}" for j in joints], [by_joint[j] for j in joints]


def rms_errors_deg(run_path: Path, ref_cols: list[str], q_cols: list[str]) -> list[float]:
    """RMS(ref − q) per joint over the sine: the last DURATION_S − SKIP_S of RUNNING rows."""
    run = read_run(run_path)
    running = run.column("state") == int(State.RUNNING)
    period = float(run.meta["period"])
    keep = round((DURATION_S - SKIP_S) / period)
    idx = np.flatnonzero(running)
    if len(idx) < keep:
        raise ValueError(f"{run_path.name}: {len(idx)} RUNNING rows, fewer than the sine's {keep}")
    idx = idx[-keep:]
    out = []
    for rc, qc in zip(ref_cols, q_cols, strict=True):
        e = run.column(rc)[idx] - run.column(qc)[idx]
        e = (e + math.pi) % (2 * math.pi) - math.pi  # a resolver angle wraps
        out.append(float(np.degrees(np.sqrt(np.mean(e * e)))))
    return out


def predicted_margin(profile: Any, params: Any, amplitude_deg: float) -> list[float]:
    """Per joint, the peak of |reference − angle| over the limit the following-error interlock
    applies (`daq.loop.interlocks`: base + per_velocity·|reference velocity|), for the PID-only
    sine at `amplitude_deg` simulated in closed loop with `params` (PlantParams: the loaded
    model) from rest at home."""
    from controller.plant import dynamics
    from estimator.validation_closed_loop import control_setup, simulate_closed_loop

    home = [j.home_deg for j in profile.joints]
    setup = control_setup(profile, sine_experiment(home, "pid", amplitude_deg))
    period = profile.period
    steps = round(setup.runner(period).total_duration / period) + round(0.5 / period)
    x0 = dynamics.equilibrium_state(params, np.radians(home))
    with np.errstate(all="ignore"):
        states, refs, _ = simulate_closed_loop(params, period, x0, setup, steps)
    err = np.abs(refs - states[:, : params.n])
    ref_vel = np.abs(np.diff(refs, axis=0, prepend=refs[:1])) / period
    base = np.radians([j.limits.following_error_deg for j in profile.joints])
    per_v = np.array([j.limits.following_error_per_velocity_s for j in profile.joints])
    ratio = err / (base + per_v * ref_vel)
    return [float(r) if np.isfinite(r) else math.inf for r in np.max(ratio, axis=0)]


def safe_amplitude(profile: Any, params: Any) -> tuple[float, str]:
    """The largest amplitude ≤ AMPLITUDE_DEG whose predicted margin is ≤ MARGIN on every joint
    (bisection on the prediction), and why it is not AMPLITUDE_DEG ("" when it is)."""
    first = max(predicted_margin(profile, params, AMPLITUDE_DEG))
    if first <= MARGIN:
        return AMPLITUDE_DEG, ""
    lo, hi = 0.0, AMPLITUDE_DEG
    for _ in range(6):
        mid = 0.5 * (lo + hi)
        if max(predicted_margin(profile, params, mid)) <= MARGIN:
            lo = mid
        else:
            hi = mid
    why = (
        f"the loaded model predicts the PID-only {AMPLITUDE_DEG:g}° sine at "
        f"{100 * first:.0f} % of the following-error limit; run at {lo:.2f}°, predicted "
        f"≤ {100 * MARGIN:.0f} %"
    )
    return lo, why


def run_tracking_check(
    session: Session, timeout: float = 600.0, amplitude_deg: float = AMPLITUDE_DEG, why: str = ""
) -> TrackingResult:
    """Run both sines and measure them (the service must have parameters loaded)."""
    from rigctl.hold_settle import settle_hold  # it reads the columns named here

    describe = session.command("describe")
    joints, ref_cols, q_cols = joint_columns(describe)
    home = [float(j["home_deg"]) for j in describe["joints"]]
    rms: dict[str, list[float]] = {}
    runs = []
    settled = []
    for controller in ("pid", "pid_ff"):
        # Each run starts from a hold at rest: from a ringing one the approach would trip,
        # and the ringing would count in the PID's error (rigctl/hold_settle.py).
        label = "the PID run" if controller == "pid" else "the model's run"
        settled.append(settle_hold(session, timeout, before=label))
        name = f"tracking-{controller}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
        path = Path(session.command("record_start", {"name": name})["path"])
        try:
            session.run_experiment(
                sine_experiment(home, controller, amplitude_deg), timeout=timeout
            )
        finally:
            session.command("record_stop")
        runs.append(str(path))
        rms[controller] = rms_errors_deg(path, ref_cols, q_cols)
    return TrackingResult(
        joints, rms["pid"], rms["pid_ff"], runs, amplitude_deg, why, tuple(settled)
    )


def load_and_check(
    session: Session, param_file: Path, profile: Any = None, timeout: float = 600.0
) -> dict[str, Any]:
    """`rigctl identify`'s last step: load the parameters it found into the service
    (`load_params`, as `rigctl params load` does) and run the tracking check with them, at the
    amplitude the loaded model predicts safe on `profile` (`safe_amplitude`; without a profile,
    AMPLITUDE_DEG)."""
    text = param_file.read_text(encoding="utf-8")
    loaded = session.command("load_params", {"text": text, "source": str(param_file)[-256:]})
    amplitude, why = AMPLITUDE_DEG, ""
    if profile is not None:
        from daq.param_set import parse_param_set

        params = parse_param_set(text, str(param_file), profile).params
        amplitude, why = safe_amplitude(profile, params)
        if amplitude < MIN_AMPLITUDE_DEG:
            raise ValueError(
                f"tracking check not run: {why}; below {MIN_AMPLITUDE_DEG:g}° the check "
                "measures the sensors, not the model"
            )
    out = run_tracking_check(session, timeout, amplitude, why).to_dict()
    out["params"] = loaded["params"]
    return out


def tracking_lines(tracking: dict[str, Any]) -> list[str]:
    """The check's dict (`TrackingResult.to_dict`) as printed lines."""
    return TrackingResult(
        tracking["joints"],
        tracking["pid_rms_deg"],
        tracking["model_rms_deg"],
        tracking["runs"],
        tracking.get("amplitude_deg", AMPLITUDE_DEG),
        tracking.get("why", ""),
        tuple(tracking.get("settled", ())),
    ).lines()
