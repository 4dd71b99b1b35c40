"""After the publisher has been stalled (a stopped or starved service process) while the loop kept
writing, it sends the backlog from the ring without a gap that a subscriber keeping up would see."""

from __future__ import annotations

import threading
import time

import pytest

from daq.telemetry import TelemetrySubscriber
from daq.telemetry.publisher import SNDHWM
from tests.conditions import wait_until
from tests.telemetry.conftest import write_rows

WAIT_S = 30.0


@pytest.mark.parametrize("stalled_rows", [3000, 12000])
def test_a_subscriber_that_keeps_up_sees_no_gap_after_a_stall(
    make_publisher, ctx, stalled_rows: int
) -> None:
    """3000 rows: the 3 s stall of 1 kHz; 12000: most of the ring (16384 rows)."""
    stall, stalled, release = threading.Event(), threading.Event(), threading.Event()

    def status() -> dict:
        if stall.is_set():  # the publisher thread stops here, as if the process were stopped
            stalled.set()
            release.wait(WAIT_S)
        return {"state": "RUNNING", "fault": None, "timing": {}}

    pub, ring = make_publisher("tcp://127.0.0.1:*", batch=20, status_fn=status)
    sub = TelemetrySubscriber(pub.endpoint, ctx=ctx)
    try:
        assert sub.wait_meta(WAIT_S) is not None
        stall.set()
        assert stalled.wait(WAIT_S), "the publisher never called status"
        write_rows(ring, 0, stalled_rows)  # the loop carries on meanwhile
        stall.clear()
        release.set()
        deadline = time.monotonic() + WAIT_S
        while (sub.next_seq is None or sub.next_seq < stalled_rows) and sub.lost_rows == 0:
            assert time.monotonic() < deadline, f"rows after seq {sub.next_seq} never arrived"
            sub.recv(1.0)
        assert sub.lost_rows == 0, f"a gap of {sub.lost_rows} rows"
        assert pub.stats.dropped_batches == 0 and pub.stats.lost_rows == 0
        # Caught up, it is back to one batch per message.
        write_rows(ring, stalled_rows, 40)
        sizes = []
        while sub.next_seq < stalled_rows + 40:
            msg = sub.recv(WAIT_S)
            assert msg is not None
            sizes.append(getattr(msg, "n", None))
        assert [n for n in sizes if n is not None] == [20, 20]
    finally:
        release.set()
        sub.close()


def test_the_backlog_of_a_whole_ring_fits_half_a_subscriber_queue(make_publisher) -> None:
    pub, ring = make_publisher("tcp://127.0.0.1:*", batch=20)
    assert wait_until(lambda: pub.stats.alive, WAIT_S)
    assert pub.catch_up_rows % pub.batch == 0
    assert -(-ring.capacity // pub.catch_up_rows) <= SNDHWM // 2
