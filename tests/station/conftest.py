"""The `station` fixture: the realistic station (tests/station/station_rig.py), stopped after."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.loop.station_profile import station_profile
from tests.station.station_rig import REALISTIC, Station


@pytest.fixture
def station(tmp_path: Path) -> Iterator[Station]:
    st = Station(station_profile(REALISTIC), tmp_path / "cal")
    yield st
    st.loop.stop()
    assert st.loop.join(10.0) and st.loop.error is None
