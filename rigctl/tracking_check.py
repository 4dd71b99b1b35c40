"""Tracking check: does the loaded plant model make the rig follow a trajectory better?

A 1 Hz, 5° sine on every joint about its home position runs twice on the running service —
once with the rig's PID alone (`pid`), once with the same PID plus the inverse-model
feed-forward of the service's loaded parameters (`pid_ff`, DESIGN §1.1–1.2) — each recorded.
The RMS of reference − measured joint angle over the sine, its first period left out (the
approach move ends at rest while the sine starts moving), is returned per joint in degrees with
the ratio PID / model. Both runs use the same gains, so the ratio is the model's doing.

Needs a service in IDLE or ARMED with parameters loaded (`rigctl params load`) and a recorder
writing to a directory this process can read (as `rigctl identify`'s session does).
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
            "trajectory": f"{FREQUENCY_HZ:g} Hz {AMPLITUDE_DEG:g}° sine, {DURATION_S:g} s",
        }

    def lines(self) -> list[str]:
        out = [f"tracking ({FREQUENCY_HZ:g} Hz {AMPLITUDE_DEG:g}° sine), RMS error:"]
        for j, name in enumerate(self.joints):
            out.append(
                f"  {name}: PID {self.pid_rms_deg[j]:.3f}°, PID + model "
                f"{self.model_rms_deg[j]:.3f}°, {self.improvement[j]:.1f}× better"
            )
        return out


def sine_experiment(home_deg: list[float], controller: str) -> dict[str, Any]:
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
                    "amplitude_deg": [AMPLITUDE_DEG] * n,
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


def run_tracking_check(session: Session, timeout: float = 600.0) -> TrackingResult:
    """Run both sines and measure them (the service must have parameters loaded)."""
    describe = session.command("describe")
    joints, ref_cols, q_cols = joint_columns(describe)
    home = [float(j["home_deg"]) for j in describe["joints"]]
    rms: dict[str, list[float]] = {}
    runs = []
    for controller in ("pid", "pid_ff"):
        name = f"tracking-{controller}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
        path = Path(session.command("record_start", {"name": name})["path"])
        try:
            session.run_experiment(sine_experiment(home, controller), timeout=timeout)
        finally:
            session.command("record_stop")
        runs.append(str(path))
        rms[controller] = rms_errors_deg(path, ref_cols, q_cols)
    return TrackingResult(joints, rms["pid"], rms["pid_ff"], runs)


def load_and_check(session: Session, param_file: Path, timeout: float = 600.0) -> dict[str, Any]:
    """`rigctl identify`'s last step: load the parameters it found into the service
    (`load_params`, as `rigctl params load` does) and run the tracking check with them."""
    text = param_file.read_text(encoding="utf-8")
    loaded = session.command("load_params", {"text": text, "source": str(param_file)[-256:]})
    out = run_tracking_check(session, timeout).to_dict()
    out["params"] = loaded["params"]
    return out


def tracking_lines(tracking: dict[str, Any]) -> list[str]:
    """The check's dict (`TrackingResult.to_dict`) as printed lines."""
    return TrackingResult(
        tracking["joints"], tracking["pid_rms_deg"], tracking["model_rms_deg"], tracking["runs"]
    ).lines()
