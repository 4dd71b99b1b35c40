"""Calibrate a simulated rig's transducers as a user would before identifying it.

`calibrate_twin(profile, directory)` gives the simulated profile a hydraulic station
(`daq.station.twin.with_station`), runs the calibration procedures behind the service's command
handler in virtual time, and keeps the resulting calibration — restricted to the channels of
`profile` itself — in `directory` as the one in force for that rig. A service started on
`profile` with that calibration directory then applies it from its first cycle, and its runs'
headers carry it (benchmarks: `bench/identification_accuracy.py --calibrate`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from daq.profile.schema import Profile
from daq.service.procedure_temperature import DEFAULT_REFERENCE_SIGMA_C
from daq.station.calfile import Calibration
from daq.station.calstore import CalibrationStore

#: The order a station runs them: the oil temperature first (every later one records the oil's
#: temperature), zeros before spans, the valve null last (its balance reads the chamber
#: pressures, zeroed and spanned by then). The oil temperature only where the profile has the
#: channel.
PROCEDURES = ("oil_temperature", "pressure_zero", "pressure_span", "position", "valve_null")


def run_procedure(api: Any, procedure: str, **args: Any) -> dict[str, Any]:
    """Start a procedure through the command handler and wait for its result."""
    api.handle("calibrate", {"procedure": procedure, **args})
    while api.handle("calibrate_status", {})["running"]:
        time.sleep(0.05)
    report = api.handle("calibrate_status", {})
    if report["error"]:
        raise RuntimeError(report["error"])
    return dict(report["result"])


def calibrate_twin(
    profile: Profile, directory: Path, procedures: Sequence[str] = PROCEDURES
) -> tuple[Calibration, Path, list[dict[str, Any]]]:
    from daq.backends.sim import SimBackend
    from daq.loop import Loop
    from daq.service.control_api import ControlApi, joint_gains, make_hold_runner
    from daq.station.twin import with_station

    station = with_station(profile)
    sim = SimBackend.from_profile(station)
    sim.open()
    hold = make_hold_runner(station, joint_gains(station))
    loop = Loop(station, sim, hold=hold, virtual_time=True, ring_capacity=1 << 14)
    loop.warm_up()
    work = directory / ".station"
    api = ControlApi(loop, calibration_dir=work)
    loop.start()
    try:
        results = []
        for p in procedures:
            args: dict[str, Any] = {"apply": True}
            if p == "oil_temperature":
                if profile.oil_temperature is None:
                    continue
                # The user reads the reference thermometer and types its reading.
                args["reference_c"] = sim.reference_thermometer_c(DEFAULT_REFERENCE_SIGMA_C)
            results.append(run_procedure(api, p, **args))
    finally:
        loop.stop()
        loop.join(30.0)
    found = api.calibration.current
    if found is None:
        raise RuntimeError("no calibration was applied (a residual beyond the declared accuracy?)")
    mine = {c.name for c in profile.inputs}
    cal = Calibration(
        found.rig, found.created_utc, {n: c for n, c in found.channels.items() if n in mine}
    )
    store = CalibrationStore(directory, profile)
    path = store.save(cal)
    store.push(path)
    return cal, path, results
