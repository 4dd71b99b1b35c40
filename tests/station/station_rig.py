"""The realistic simulated station the calibration procedure tests drive: a loop in virtual
time with its command handler (`ControlApi`), and a procedure run to its result or its error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daq.backends.sim import SimBackend
from daq.loop import Loop
from daq.profile.schema import Profile
from daq.service.control_api import CommandError, ControlApi, joint_gains, make_hold_runner
from tests.conditions import wait_until

REALISTIC = "sim-2dof-realistic.toml"


class Station:
    def __init__(self, profile: Profile, cal_dir: Path) -> None:
        self.profile = profile
        self.sim = SimBackend.from_profile(profile)
        self.sim.open()
        hold = make_hold_runner(profile, joint_gains(profile))
        self.loop = Loop(profile, self.sim, hold=hold, virtual_time=True, ring_capacity=1 << 14)
        self.loop.warm_up()
        self.api = ControlApi(self.loop, calibration_dir=cal_dir)
        self.loop.start()

    def calibrate(self, procedure: str, **args: Any) -> dict[str, Any]:
        self.api.handle("calibrate", {"procedure": procedure, **args})
        assert wait_until(lambda: not self.api.handle("calibrate_status", {})["running"], 300.0)
        report = self.api.handle("calibrate_status", {})
        assert report["error"] is None, report["error"]
        return dict(report["result"])

    def truth(self, name: str) -> tuple[float, float]:
        """(offset at this loop time, 1 + gain error) of the simulated sensor."""
        ch = next(c for c in self.profile.inputs if c.name == name)
        e = ch.sim_error
        if e is None:
            return 0.0, 1.0
        return e.offset + e.drift_per_hour * self.loop.t / 3600.0, 1.0 + e.gain_error

    def error(self, procedure: str, **args: Any) -> str:
        """Start a procedure that must end in an error; that error."""
        self.api.handle("calibrate", {"procedure": procedure, **args})
        assert wait_until(lambda: not self.api.handle("calibrate_status", {})["running"], 300.0)
        report = self.api.handle("calibrate_status", {})
        assert report["result"] is None
        return str(report["error"])


def arms(api: ControlApi) -> bool:
    """Whether `arm` is accepted."""
    try:
        api.handle("arm", {})
    except CommandError:
        return False
    return True
