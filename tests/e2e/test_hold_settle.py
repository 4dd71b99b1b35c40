"""Before the tracking check moves the arm, the hold must be at rest (rigctl/hold_settle.py).
On the reference rig a p = 2 V/rad hold without ΔP feedback is left in a limit cycle (~7 Hz,
±1.3°) by the validation run's 3 Hz valve sine; the same hold armed from rest is steady, and
the profile's `hold_dp` (the hold's own ΔP feedback) damps it."""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daq.backends.sim import SimBackend
from daq.profile import parse_profile
from daq.service import Service
from rigctl.hold_settle import RINGING_FRACTION, hold_swing_deg, settle_hold
from tests.conditions import wait_until
from tests.conftest import PROFILES

ROOT = Path(__file__).resolve().parents[2]
BASE = tomllib.loads((PROFILES / "sim-2dof.toml").read_text())
VALVE_SINE = tomllib.loads((ROOT / "experiments" / "validation-2dof.toml").read_text())
VALVE_SINE["segments"] = [s for s in VALVE_SINE["segments"] if s["name"] == "valve-sine-3hz"]


class _Session:
    """The command API of an in-process service, as `rigctl.session.RigSession` offers it."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.sent: list[str] = []

    def command(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        self.sent.append(cmd)
        return dict(self.service.api.handle(cmd, args or {}))


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Any]:
    services: list[Service] = []

    def make(p: float = 2.0, hold_dp: float | None = None) -> _Session:
        data = copy.deepcopy(BASE)
        for j in data["joints"]:
            j["pid"]["p"] = p
            if hold_dp is not None:
                j["pid"]["hold_dp"] = hold_dp
        profile = parse_profile(data)
        sim = SimBackend.from_profile(profile)
        sim.open()
        service = Service(
            profile, sim, virtual_time=True, network=False, run_dir=tmp_path / f"runs{p}"
        )
        service.start()
        services.append(service)
        session = _Session(service)
        session.command("arm")
        return session

    yield make
    for s in services:
        assert s.shutdown() == 0


def _after_the_valve_sine(s: _Session) -> None:
    s.command("run", {"experiment": VALVE_SINE})
    assert wait_until(lambda: s.command("status")["state"] == "ARMED", 120.0)


def test_a_hold_at_rest_is_left_alone(rig: Any) -> None:
    s = rig()
    assert max(hold_swing_deg(s).values()) < 0.2
    s.sent.clear()
    assert settle_hold(s) == ""
    assert "disarm" not in s.sent and s.command("status")["state"] == "ARMED"


def test_a_ringing_hold_is_rearmed_from_rest_and_said(rig: Any) -> None:
    s = rig(hold_dp=0.0)
    _after_the_valve_sine(s)
    limit = RINGING_FRACTION * 3.0  # the profile's following_error_deg
    swing = hold_swing_deg(s)
    assert swing["j1"] > 1.5 * limit, swing  # the limit cycle, a second after the run
    assert hold_swing_deg(s)["j1"] > 1.5 * limit  # and still a second later
    said = settle_hold(s, before="the PID run")
    assert said.startswith("the hold rang before the PID run (j1 ±") and "rigctl tune" in said
    assert s.sent.count("disarm") == 1 and s.command("status")["state"] == "ARMED"
    assert max(hold_swing_deg(s).values()) < 0.2  # armed from rest: steady


def test_a_hold_that_rings_from_rest_too_stops_the_check(rig: Any) -> None:
    """p = 8 V/rad: past the oil column's damping, the hold limit-cycles from rest."""
    s = rig(p=8.0, hold_dp=0.0)
    assert max(hold_swing_deg(s).values()) > RINGING_FRACTION * 3.0
    with pytest.raises(ValueError, match=r"rang again when armed from rest .*rigctl tune"):
        settle_hold(s)


def test_the_profiles_hold_dp_leaves_the_hold_at_rest_after_the_valve_sine(rig: Any) -> None:
    s = rig()
    assert BASE["joints"][0]["pid"]["hold_dp"] > 0.0
    _after_the_valve_sine(s)
    hold_swing_deg(s)  # the run's own transient, damped within a second or two
    assert max(hold_swing_deg(s).values()) < 0.2
    assert settle_hold(s) == ""
