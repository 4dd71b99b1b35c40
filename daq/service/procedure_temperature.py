"""The oil temperature transmitter against a reference thermometer (docs/operations.md,
"Calibration procedures"): the `oil_temperature` procedure of
`daq.service.procedures.ProcedureRunner`.

Why it matters: the model family's temperature-referred parameters (viscous friction, leakage,
1/b, the valve null's shift) are read through this channel (docs/estimator.md, "Temperature").
A Pt100 transmitter of class B is off by up to 0.5 °C + 1 % of the reading; on the realistic
simulated rig its 0.75 °C alone cost the true plant's closed-loop FIT 6 points on p_cap2.

One point: the user reads a reference thermometer where the transmitter sits (a calibrated probe
in the thermowell beside it, or in the tank's test port with the oil circulating) and types its
reading; the procedure averages the channel's declared reading over a window that starts then.
With the gain kept (the calibration in force, else the declared scaling's 1):

    offset = reading − gain · reference          (declared = gain · true + offset)

σ of the offset: the reference's 1σ (× gain) and the window mean's batch-means σ. The oil moves
slowly at rest (τ ≈ 30 min towards the room), so the window's settling drift is the residual.
A gain needs two references far apart: the oil moves a few °C in a test, which a 1 % gain error
turns into a few hundredths of a degree once the offset is made at the test's temperature —
below what the family can tell. Nothing moves and the power is not switched.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from daq.service.procedures import Finding, ProcedureError, Rows
from daq.station.analysis import window_mean
from daq.station.calfile import ChannelCal, now_utc

if TYPE_CHECKING:
    from daq.service.procedures import ProcedureRunner

#: A precision reference probe (IEC 60751 class AA, 0.1 + 0.0017·|T| °C at the limit of its
#: tolerance, taken as 1σ near room temperature: conservative).
DEFAULT_REFERENCE_SIGMA_C = 0.1
DEFAULT_WINDOW_S = 2.0


def oil_temperature(run: ProcedureRunner, args: dict[str, Any]) -> list[Finding]:
    ch = run.profile.oil_temperature
    if ch is None:
        raise ProcedureError(
            'the profile has no oil temperature channel (role = "temperature") to calibrate'
        )
    if args.get("reference_c") is None:
        raise ProcedureError(
            "needs reference_c: the oil temperature read on a reference thermometer at the "
            "transmitter, °C (rigctl calibrate oil-temperature --reference-c T)"
        )
    ref = float(args["reference_c"])
    if not ch.valid_min <= ref <= ch.valid_max:
        raise ProcedureError(
            f"reference_c {ref:g} °C is outside {ch.name}'s valid range "
            f"[{ch.valid_min:g}, {ch.valid_max:g}] °C"
        )
    sigma_ref = float(args.get("reference_sigma_c", DEFAULT_REFERENCE_SIGMA_C))
    if not 0.0 <= sigma_ref <= 5.0:
        raise ProcedureError(f"reference_sigma_c {sigma_ref:g} °C must be within 0–5 °C")
    window_s = float(args.get("window_s", DEFAULT_WINDOW_S))
    if not window_s > 0:
        raise ProcedureError(f"window_s {window_s:g} must be > 0 (s)")
    rows = Rows(run.api.loop)
    run._step(f"averaging {ch.name} over {window_s:g} s against the reference {ref:g} °C")
    m = window_mean(run._declared(rows.seconds(window_s), ch.name))
    gain = run._current(ch.name).gain
    cal = ChannelCal(
        offset=m.value - gain * ref,
        gain=gain,
        sigma_offset=math.hypot(gain * sigma_ref, m.sigma),
        sigma_gain=run._sigma_gain(ch.name),
        method="oil_temperature",
        time_utc=now_utc(),
        oil_c=ref,
        residual=m.drift,
        pivot=ref,  # the kept gain's error acts around the reference (daq.station.calfile)
    )
    run.status["temperature_point"] = {
        "channel": ch.name,
        "reference_c": ref,
        "sigma_reference_c": sigma_ref,
        "reading_c": m.value,
        "sigma_reading_c": m.sigma,
    }
    return [run._finding(ch.name, cal)]
