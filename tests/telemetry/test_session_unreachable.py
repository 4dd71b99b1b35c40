"""A service that does not answer is a `SessionError` to `rigctl identify` (rigctl.session), so
the steps after the identification — validation, tracking check, power off — lose only
themselves, never the identification's result."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from daq.profile import load_profile
from daq.station.twin import with_station
from rigctl.identify_power import power_down
from rigctl.session import RigSession, SessionError, SessionUnreachable, free_endpoint

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def silent_session(tmp_path: Path) -> Iterator[RigSession]:
    """A session whose command endpoint has nobody behind it (no process is started)."""
    s = RigSession(ROOT / "hw_profiles" / "sim-2dof.toml", tmp_path, virtual_time=True)
    s.commands = free_endpoint()
    yield s
    s.stop()


def test_no_reply_is_a_session_error_naming_the_command(silent_session: RigSession) -> None:
    s = silent_session
    with pytest.raises(SessionUnreachable, match=r"^status: no reply from tcp://") as err:
        s.request("status", timeout=0.2)
    assert isinstance(err.value, SessionError)


def test_power_off_unanswered_says_the_power_is_left_on(silent_session: RigSession) -> None:
    s = silent_session
    profile = with_station(load_profile(ROOT / "hw_profiles" / "sim-2dof-realistic.toml"))
    said: list[str] = []
    # The session's own limit applies; shorten it so the test does not wait 30 s.
    s.request = lambda cmd, args=None, timeout=0.2: RigSession.request(  # type: ignore[method-assign]
        s, cmd, args, timeout=timeout
    )
    assert power_down(s, profile, said.append) == []
    assert len(said) == 1 and said[0].startswith("hydraulic power left on: power off not answered")
