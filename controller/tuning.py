"""Gains from the identified model (`rigctl tune`): position P (+I), ΔP feedback, velocity
feed-forward per joint, for a stated bandwidth and gain margin, on the linearised loop of
`controller.hydraulic_linear` about the experiment's home pose.

Per joint: over a grid of ΔP gains (0 and 0.01–10 V/kN, high-pass at `DP_HP_HZ`) and position
gains, the candidates whose loop is stable with every loop gain multiplied by `margin` and
whose slowest-damped pole has ζ ≥ `MIN_DAMPING` are kept. Of those whose −3 dB bandwidth is
within a factor `BANDWIDTH_BAND` of the target, the one with the smallest ΔP gain wins (then
the closest bandwidth); with none in that band, the closest bandwidth (then the best damped).
Why the smallest ΔP gain: load-pressure feedback also feeds back every force the model does
not hold — the seals' stiction above all — and softens the servo against them (Merritt §5:
pressure feedback lowers the loop's static stiffness). On the realistic plant (simulated) the
larger of two ΔP gains reaching the same bandwidth raised a 2° step's overshoot from 10 % to
18 % / 37 % (stick–slip: the pressure built against stiction, high-passed, pushes on after
break-away) and the 1 Hz sine's tracking error 2–3.5×.

The integral gain puts its corner a decade under the bandwidth, then halves it until the model's
step response overshoots by at most `MAX_STEP_OVERSHOOT_PCT` (half of the 10 % a rig engineer
accepts; the other half is for what the linear model leaves out: friction, lap), and drops it if
four halvings do not get there or it costs the margin. The feed-forward is the inverse of the
steady-state velocity gain (V per rad/s), so the loop's error only carries what the model missed.
A gain set the model predicts unstable is refused (`check_gains`).

Gains files (TOML): per rig (`rig` must be the profile's id), one table per joint of PID
fields; `rigctl gains load` applies them with `set_gains`.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from controller import hydraulic_linear as hl

GAINS_FORMAT = "hydrig-gains"
#: ΔP high-pass corner used by tune, Hz: well under the oil column's 5–25 Hz, over the
#: slow load changes (gravity over a sweep) it must not fight (controller/pressure_feedback.py).
DP_HP_HZ = 1.0
#: The slowest-damped closed-loop pole must have at least this damping ratio (≈ 25 % step
#: overshoot for a pure second-order pair; the position pole usually dominates, far better).
MIN_DAMPING = 0.3
#: Candidates within this factor of the target bandwidth count as reaching it.
BANDWIDTH_BAND = 1.25
#: The largest step overshoot the model may predict for the tuned loop, %.
MAX_STEP_OVERSHOOT_PCT = 5.0
#: Halvings of the integral gain tried before it is dropped.
INTEGRAL_HALVINGS = 4
_DP_GRID = np.concatenate([[0.0], np.logspace(-2, 1, 19)])
_P_GRID = np.logspace(np.log10(0.3), np.log10(60.0), 45)


@dataclass(frozen=True)
class JointTuning:
    gains: hl.LoopGains
    bandwidth_hz: float
    gain_margin: float
    min_damping: float
    natural_hz: float
    damping: float
    #: The model's step overshoot with these gains, %.
    step_overshoot_pct: float
    freqs_hz: np.ndarray
    response: np.ndarray  # complex q/q_ref predicted, with feed-forward


class TuneError(ValueError):
    """No gain set meets the bandwidth and margin; the message says what was reachable."""


def _candidates(
    lin: hl.JointLinear, period: float, margin: float
) -> list[tuple[hl.LoopGains, float, float]]:
    """(gains, bandwidth Hz, slowest ζ) of every grid point stable with `margin` and damped."""
    out = []
    for dp in _DP_GRID:
        hp = DP_HP_HZ if dp > 0 else 0.0
        for p in _P_GRID:
            g = hl.LoopGains(float(p), 0.0, 0.0, float(dp), hp)
            if not hl.is_stable(lin, g, period):
                break  # higher p only gets worse
            if hl.gain_margin(lin, g, period, top=margin * 1.01) < margin:
                break
            zeta = hl.min_damping(lin, g, period)
            if zeta >= MIN_DAMPING:
                out.append((g, hl.bandwidth_hz(lin, g, period), zeta))
    return out


def _choose(
    cands: list[tuple[hl.LoopGains, float, float]], bandwidth_hz: float
) -> tuple[hl.LoopGains, float]:
    """The smallest ΔP gain within the bandwidth band, else the closest bandwidth."""

    def off(bw: float) -> float:
        return abs(math.log(bw / bandwidth_hz))

    inside = [c for c in cands if off(c[1]) <= math.log(BANDWIDTH_BAND)]
    if inside:
        g, bw, _ = min(inside, key=lambda c: (c[0].dp, off(c[1]), -c[2]))
    else:
        g, bw, _ = min(cands, key=lambda c: (off(c[1]), -c[2]))
    return g, bw


def _with_integral(
    lin: hl.JointLinear, g: hl.LoopGains, bw: float, period: float, margin: float
) -> hl.LoopGains:
    """The integral gain (corner a decade under `bw`, halved until the step overshoot is
    within `MAX_STEP_OVERSHOOT_PCT`), or none if that fails or costs the margin."""
    i = g.p * 2.0 * math.pi * bw / 10.0
    for _ in range(INTEGRAL_HALVINGS + 1):
        gi = hl.LoopGains(g.p, i, g.ff1, g.dp, g.dp_hp_hz)
        if (
            hl.step_overshoot_pct(lin, gi, period) <= MAX_STEP_OVERSHOOT_PCT
            and hl.gain_margin(lin, gi, period, top=20.0) >= margin
        ):
            return gi
        i /= 2.0
    return g


def tune_joint(
    lin: hl.JointLinear, period: float, bandwidth_hz: float, margin: float
) -> JointTuning:
    cands = _candidates(lin, period, margin)
    if not cands:
        raise TuneError(
            f"no gains reach a gain margin of {margin:g} with ζ ≥ {MIN_DAMPING} on this model"
        )
    g, bw = _choose(cands, bandwidth_hz)
    g = hl.LoopGains(g.p, 0.0, 1.0 / lin.velocity_gain, g.dp, g.dp_hp_hz)
    g = _with_integral(lin, g, bw, period, margin)
    freqs = np.logspace(-1, math.log10(min(0.45 / period, 100.0)), 60)
    return JointTuning(
        g,
        hl.bandwidth_hz(lin, g, period),
        hl.gain_margin(lin, g, period, top=20.0),
        hl.min_damping(lin, g, period),
        lin.omega_h / (2 * math.pi),
        lin.zeta_h,
        hl.step_overshoot_pct(lin, g, period),
        freqs,
        hl.frequency_response(lin, g, period, freqs),
    )


def tune(
    params: Any, home: Any, period: float, bandwidth_hz: float, margin: float
) -> list[JointTuning]:
    """One `JointTuning` per joint about `home` (rad)."""
    if not 0.05 <= bandwidth_hz <= 0.2 / period:
        raise TuneError(f"bandwidth {bandwidth_hz:g} Hz out of range [0.05, {0.2 / period:g}] Hz")
    if not 1.0 < margin <= 10.0:
        raise TuneError(f"gain margin {margin:g} out of range (1, 10] (a factor, 2 = 6 dB)")
    q = np.asarray(home, dtype=float)
    return [
        tune_joint(hl.linearise(params, j, q), period, bandwidth_hz, margin)
        for j in range(int(params.n))
    ]


def check_gains(
    params: Any, home: Any, period: float, gains: Sequence[Mapping[str, float]]
) -> list[str]:
    """Why each joint's gain set is predicted unstable on the model ([] if all are stable)."""
    q = np.asarray(home, dtype=float)
    out = []
    for j, g in enumerate(gains):
        lg = hl.LoopGains(
            float(g.get("p", 0.0)),
            float(g.get("i", 0.0)),
            float(g.get("ff1", 0.0)),
            float(g.get("dp", 0.0)),
            float(g.get("dp_hp_hz", 0.0)),
        )
        lin = hl.linearise(params, j, q)
        if not hl.is_stable(lin, lg, period):
            poles = hl.closed_loop_poles(lin, lg, period)
            worst = poles[np.argmax(poles.real)]
            out.append(
                f"joint {j + 1}: p={lg.p:g} i={lg.i:g} dp={lg.dp:g} is predicted unstable "
                f"(a pole at {abs(worst.imag) / (2 * math.pi):.3g} Hz grows at "
                f"{worst.real:.3g} 1/s)"
            )
    return out


def gains_file(
    rig: str, joints: Sequence[str], tuned: Sequence[JointTuning], meta: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "format": GAINS_FORMAT,
        "version": 1,
        "rig": rig,
        "meta": dict(meta),
        "joints": [
            {
                "name": name,
                "p": t.gains.p,
                "i": t.gains.i,
                "ff1": t.gains.ff1,
                "dp": t.gains.dp,
                "dp_hp_hz": t.gains.dp_hp_hz,
            }
            for name, t in zip(joints, tuned, strict=True)
        ],
    }


def read_gains_toml(path: Path) -> dict[str, Any]:
    """A gains file's TOML as a dict; ValueError naming the path if unreadable or malformed."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def read_gains_file(
    d: Mapping[str, Any], rig: str, joints: Sequence[str]
) -> dict[str, dict[str, float]]:
    """{joint name: {gain: value}} from a gains file's dict; refuses another rig's file."""
    if d.get("format") != GAINS_FORMAT:
        raise ValueError(
            f"not a gains file: format is {d.get('format')!r}, expected {GAINS_FORMAT!r}"
        )
    if d.get("rig") != rig:
        raise ValueError(
            f"gains file is for rig {d.get('rig')!r}, this rig is {rig!r}: gains tuned on another "
            f"rig's model are not applied"
        )
    out: dict[str, dict[str, float]] = {}
    for row in d.get("joints", []):
        name = row.get("name")
        if name not in joints:
            raise ValueError(
                f"gains file names joint {name!r}; this rig's joints are {list(joints)}"
            )
        out[name] = {k: float(v) for k, v in row.items() if k != "name"}
    return out


def dumps_gains(d: Mapping[str, Any]) -> str:
    """TOML text of a `gains_file` dict (flat tables of strings and numbers only)."""

    def val(v: Any) -> str:
        return json.dumps(v) if isinstance(v, str) else repr(float(v))

    lines = [f"format = {val(d['format'])}", f"version = {int(d['version'])}",
             f"rig = {val(d['rig'])}", "", "[meta]"]  # fmt: skip
    lines += [f"{k} = {val(v)}" for k, v in d["meta"].items()]
    for row in d["joints"]:
        lines += ["", "[[joints]]"] + [f"{k} = {val(v)}" for k, v in row.items()]
    return "\n".join(lines) + "\n"
