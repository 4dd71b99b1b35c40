"""Profiles with a hydraulic station, derived from the shipped simulated rigs for tests."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from daq.loop import Loop
from daq.loop.mailbox import Request
from daq.profile.loader import load_profile
from daq.profile.schema import Profile
from daq.service.control_api import joint_gains
from daq.service.station_api import jog_request
from daq.station.twin import with_station

PROFILES = Path(__file__).resolve().parents[2] / "hw_profiles"


def station_profile(
    name: str = "sim-2dof.toml",
    *,
    supply_channel: bool = True,
    initial_deg: list[float] | None = None,
    soft_min_deg: list[float] | None = None,
    **hydraulics: Any,
) -> Profile:
    profile = with_station(
        load_profile(PROFILES / name), supply_channel=supply_channel, **hydraulics
    )
    if initial_deg is None and soft_min_deg is None:
        return profile
    data = profile.model_dump(exclude_none=True)
    if initial_deg is not None:
        for tj, q in zip(data["backend"]["sim"]["plant"]["joints"], initial_deg, strict=True):
            tj["initial_deg"] = q
    if soft_min_deg is not None:
        for j, q in zip(data["joints"], soft_min_deg, strict=True):
            j["limits"]["soft_min_deg"] = q
    return Profile.model_validate(data)


def ask(loop: Loop, kind: str, payload: Any = None) -> Request:
    """Hand a loop stepped in virtual time a request and run the few cycles that answer it."""
    req = Request(kind, payload)
    loop.mailbox._slot.append(req)
    loop.run(0.005)
    assert req.done.is_set(), (kind, "not answered")
    return req


def jog_payload(profile: Profile, joint: str, target_deg: float) -> Any:
    """The service's jog request, its runner built as the `jog` command builds it."""
    return jog_request(SimpleNamespace(profile=profile, gains=joint_gains(profile)),
                       {"joint": joint, "target_deg": target_deg})  # fmt: skip
