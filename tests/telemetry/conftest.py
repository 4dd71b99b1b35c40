from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import zmq

from daq.profile.loader import load_profile
from daq.ring import SampleRing
from daq.sample_layout import SampleLayout
from daq.telemetry import TelemetryPublisher
from tests.conditions import wait_until  # noqa: F401  (used by the telemetry tests)

PERIOD = 1e-3


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    c = zmq.Context()
    yield c
    c.destroy(linger=0)


@pytest.fixture
def layout(profile_2dof_path: Any) -> SampleLayout:
    return SampleLayout.from_profile(load_profile(profile_2dof_path))


def write_rows(ring: SampleRing, start: int, n: int) -> None:
    """Rows as the loop would write them: seq, t = seq·period, and a known value in every
    other column (col c of row k = k + c/1000) so that a decoder's column order is checked."""
    for k in range(start, start + n):
        row = ring.claim()
        row[:] = k + np.arange(ring.width) / 1000.0
        row[0] = k
        row[1] = k * PERIOD
        ring.publish()


@pytest.fixture
def make_publisher(
    ctx: zmq.Context, layout: SampleLayout
) -> Iterator[Callable[..., tuple[TelemetryPublisher, SampleRing]]]:
    made: list[TelemetryPublisher] = []

    def make(
        endpoint: str = "tcp://127.0.0.1:*", batch: int = 20, capacity: int = 16384, **kw: Any
    ) -> tuple[TelemetryPublisher, SampleRing]:
        ring = SampleRing(capacity, layout.width)
        kw.setdefault("status_fn", lambda: {"state": "IDLE", "fault": None, "timing": {}})
        pub = TelemetryPublisher(
            ctx, endpoint, ring, layout, rig_id="sim2dof", period=PERIOD, batch=batch, **kw
        )
        pub.start()
        made.append(pub)
        return pub, ring

    yield make
    for p in made:
        p.stop()
