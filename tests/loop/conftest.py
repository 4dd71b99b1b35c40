from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daq.loop import Loop
from daq.loop.mailbox import Request
from daq.profile.loader import load_profile
from daq.profile.schema import Profile
from daq.service import control_api
from daq.service.control_api import ControlApi
from tests.loop.compiled_harness import sim_loop
from tests.loop.fakes import FakeBackend, HoldP

PROFILES = Path(__file__).resolve().parents[2] / "hw_profiles"


@pytest.fixture(autouse=True)
def generous_loop_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands wait up to 30 s for the loop to take them: on a loaded machine a thread can go
    unscheduled for longer than the service's 1 s (tests of that timeout set their own)."""
    monkeypatch.setattr(control_api, "LOOP_TIMEOUT_S", 30.0)


@pytest.fixture
def profile() -> Profile:
    return load_profile(PROFILES / "sim-2dof.toml")


def with_changes(profile: Profile, **interlocks: Any) -> Profile:
    return profile.model_copy(
        update={"interlocks": profile.interlocks.model_copy(update=interlocks)}
    )


@pytest.fixture
def make_loop(profile: Profile) -> Callable[..., tuple[Loop, FakeBackend]]:
    def make(prof: Profile | None = None, **kw: Any) -> tuple[Loop, FakeBackend]:
        p = prof or profile
        backend = FakeBackend(p)
        kw.setdefault("hold", HoldP())
        kw.setdefault("ring_capacity", 1 << 12)
        return Loop(p, backend, virtual_time=True, **kw), backend

    return make


def post(loop: Loop, kind: str, payload: Any = None) -> Request:
    """Put a request in the loop's mailbox the way `Mailbox.call` does, without a thread."""
    req = Request(kind, payload)
    loop.mailbox._slot.append(req)
    return req


def cycles(loop: Loop, n: int) -> None:
    loop.run(n * loop.period)


def row(loop: Loop, seq: int) -> np.ndarray:
    assert loop.ring.published - seq <= loop.ring.capacity, "row overwritten"
    r = loop.ring.data[seq & loop.ring.mask]
    assert r[0] == seq
    return r


def col(loop: Loop, seq: int, name: str) -> float:
    return float(row(loop, seq)[loop.layout.index(name)])


@pytest.fixture
def rig(profile: Profile) -> Iterator[tuple[Loop, ControlApi]]:
    """The real controller's hold runner on the simulated rig, in virtual time on a thread (as
    fast as the CPU goes; the ring holds 65 s of rows), behind the command handler."""
    loop = sim_loop(profile, ring_capacity=1 << 16)
    api = ControlApi(loop)
    loop.start()
    try:
        yield loop, api
    finally:
        loop.stop()
        assert loop.join(5.0) and loop.error is None
