"""Shunt calibration of the pressure transducers (docs/operations.md, "Shunt calibration"): the
`pressure_shunt` procedure of `daq.service.procedures.ProcedureRunner`.

A bridge transducer at zero load, its conditioner's shunt relay closed, reads its shunt
equivalent (the pressure its calibration certificate states for that resistor) on top of what
it read before: gain = (reading shunted − reading unshunted) / equivalent, without hydraulic
power. The offset is the zero's (pressure_zero first, as for the span).

Steps: power off, the supply decays, the chambers drain as pressure_zero drains them (the same
code: `ProcedureRunner._drain`), disarm; then with the valves at null: unshunted window, shunt
relays closed (every channel with a `shunt` at once: each has its own conditioner), settle,
shunted window, relays open, settle, unshunted window. The two unshunted windows bracket the
shunted one: the unshunted reading at the shunted window's time is interpolated between them
(a linear drift of the sensor or of a chamber still settling cancels), and half their
difference counts in the σ. σ of the gain: the three windows' noise (batch means), that drift,
and the certificate's σ of the equivalent. Residual: the bracket's drift and each window's
settling drift, checked against the declared accuracy like every procedure's.

What it cannot see: a change of the diaphragm's mechanical sensitivity since the certificate
(the shunt exercises the bridge and the conditioner, not the diaphragm); the hydraulic span
(pressure_span) does.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from daq.commands.errors import CommandError
from daq.service.procedures import ZEROED, Finding, ProcedureError, Rows
from daq.station.analysis import Mean, window_mean
from daq.station.calfile import ChannelCal, now_utc
from daq.station.shunt import bits_of, shunt_channels

if TYPE_CHECKING:
    from daq.service.procedures import ProcedureRunner


def pressure_shunt(run: ProcedureRunner, args: dict[str, Any]) -> list[Finding]:
    p = run.profile
    chans = shunt_channels(p)
    if not chans:
        raise ProcedureError(
            "no channel of the profile has a shunt: add a shunt table (equivalent_pa, sigma, "
            "line) to the pressure channels whose conditioner has a shunt resistor"
        )
    unzeroed = [c.name for c in chans if run._current(c.name).method not in ZEROED]
    if unzeroed:
        raise ProcedureError(
            f"{', '.join(unzeroed)} not zeroed: run pressure_zero (with apply) before the "
            "shunt calibration, which keeps the zero's offset"
        )
    window_s = float(args.get("window_s", 2.0))
    settle_s = float(args.get("settle_s", 0.5))
    if not (window_s > 0 and settle_s > 0):
        raise ProcedureError(f"window_s {window_s:g} and settle_s {settle_s:g} must be > 0 (s)")
    bits = bits_of(p, None)
    rows = Rows(run.api.loop)
    run._drain(rows, args, 0.0)
    run._call("disarm")
    try:
        windows = _bracket(run, rows, bits, window_s, settle_s)
    finally:
        _open(run, bits)
    lay = run.api.loop.layout
    t_col = lay.index("t")
    times = [float(w[:, t_col].mean()) for w in windows]
    f = (times[1] - times[0]) / (times[2] - times[0])  # where the shunted window lies
    oil = run._oil(windows[1])
    points: dict[str, dict[str, float]] = {}
    findings = []
    for c in chans:
        assert c.shunt is not None
        a, b, z = (window_mean(run._declared(w, c.name)) for w in windows)
        step, sigma_step, drift = _step(a, b, z, f)
        eq = c.shunt.equivalent_pa
        gain = step / eq
        sg = math.hypot(sigma_step / eq, gain * c.shunt.sigma)
        residual = max(drift, a.drift, b.drift, z.drift)
        cur = run._current(c.name)
        cal = ChannelCal(
            cur.offset, gain, cur.sigma_offset, sg, "pressure_shunt", now_utc(), oil, residual
        )
        findings.append(run._finding(c.name, cal))
        points[c.name] = {
            "unshunted_before": a.value, "shunted": b.value, "unshunted_after": z.value,
            "step": step, "sigma_step": sigma_step, "equivalent_pa": eq,
            "sigma_equivalent_rel": c.shunt.sigma, "drift": drift,
        }  # fmt: skip
    run.status["shunt_points"] = points
    return findings


def _bracket(
    run: ProcedureRunner, rows: Rows, bits: int, window_s: float, settle_s: float
) -> list[np.ndarray]:
    """The three windows, valves at null in IDLE: unshunted, shunted, unshunted."""
    rows.restart()
    run._step(f"valves at null: settling {settle_s:g} s, then unshunted for {window_s:g} s")
    rows.seconds(settle_s)
    before = rows.seconds(window_s)
    run._step(f"shunt relays closed: settling {settle_s:g} s, then shunted for {window_s:g} s")
    run._call("shunt", (True, bits))
    rows.restart()
    rows.seconds(settle_s)
    shunted = rows.seconds(window_s)
    run._step(f"shunt relays open: settling {settle_s:g} s, then unshunted for {window_s:g} s")
    run._call("shunt", (False, bits))
    rows.restart()
    rows.seconds(settle_s)
    after = rows.seconds(window_s)
    return [before, shunted, after]


def _open(run: ProcedureRunner, bits: int) -> None:
    """Open the relays whatever happened (a state change has opened them already, if any)."""
    try:
        run._call("shunt", (False, bits))
    except CommandError as exc:
        raise ProcedureError(f"could not open the shunt relays: {exc.message}") from None


def _step(a: Mean, b: Mean, z: Mean, f: float) -> tuple[float, float, float]:
    """The shunted window `b` over the unshunted reading at its time, interpolated between
    `a` (before) and `z` (after) at fraction `f`: (step, its 1σ, the bracket's drift)."""
    base = (1.0 - f) * a.value + f * z.value
    drift = abs(z.value - a.value)
    noise = math.sqrt(b.sigma**2 + ((1.0 - f) * a.sigma) ** 2 + (f * z.sigma) ** 2)
    return b.value - base, math.hypot(noise, 0.5 * drift), drift
