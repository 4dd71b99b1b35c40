"""The telemetry publisher never dies: lapped reads (even ones that return no row) are counted and
recovered from, and an unexpected exception restarts it, rate-limited and visible in its stats.

After each incident a *fresh* subscriber must receive `meta` and contiguous samples: that is what
a client connecting to a running service sees.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np
import pytest

import daq.telemetry.publisher as publisher_mod
from daq.ring import RingCursor, SampleRing
from daq.telemetry import SampleBatch, TelemetrySubscriber
from daq.telemetry.wire import Status
from tests.telemetry.conftest import PERIOD, wait_until, write_rows

BATCH = 20
CAPACITY = 256
#: Deadline for anything waited on here: generous, the suite must pass on a loaded machine.
WAIT_S = 30.0


class Lapper:
    """Laps the ring in the middle of the publisher's next copy, when armed: the publisher's
    read then finds every row it copied overwritten and returns 0 rows."""

    def __init__(self, ring: SampleRing) -> None:
        self.ring = ring
        self.armed = threading.Event()
        self.done = threading.Event()

    def arm(self) -> None:
        self.done.clear()
        self.armed.set()

    def during_copy(self) -> None:
        if self.armed.is_set():
            self.armed.clear()
            write_rows(self.ring, self.ring.published, self.ring.capacity)
            self.done.set()


def lapping_cursor(lapper: list[Lapper]) -> type[RingCursor]:
    class LappedCursor(RingCursor):
        def _copy(self, out: np.ndarray, position: int, n: int) -> None:
            super()._copy(out, position, n)
            if lapper:
                lapper[0].during_copy()

    return LappedCursor


def fresh_subscriber_sees_meta_and_contiguous_samples(
    pub: Any, ring: SampleRing, ctx: Any, batches: int = 3
) -> None:
    """A new subscriber gets `meta`, then `batches` sample messages without a gap, while the
    test writes rows as the loop would."""
    with TelemetrySubscriber(pub.endpoint, ctx=ctx) as sub:
        assert sub.wait_meta(WAIT_S) is not None, "no meta for a new subscriber"
        runs = 0
        next_seq: int | None = None
        deadline = time.monotonic() + WAIT_S
        while runs < batches:
            assert time.monotonic() < deadline, "no contiguous samples for a new subscriber"
            write_rows(ring, ring.published, BATCH)
            msg = sub.recv(WAIT_S)
            assert msg is not None, "telemetry stopped"
            if isinstance(msg, SampleBatch):
                # Every row is the one written under its seq (write_rows' values), untorn.
                k = np.arange(msg.seq0, msg.seq0 + msg.n, dtype=np.float64)[:, None]
                expected = k + np.arange(ring.width) / 1000.0
                expected[:, 0], expected[:, 1] = k[:, 0], k[:, 0] * PERIOD
                np.testing.assert_array_equal(msg.rows(), expected)
                runs = runs + 1 if next_seq is None or msg.seq0 == next_seq else 1
                next_seq = msg.seq0 + msg.n


def test_lapped_repeatedly_even_to_an_empty_read_telemetry_resumes_each_time(
    make_publisher, ctx, monkeypatch: pytest.MonkeyPatch
) -> None:
    holder: list[Lapper] = []
    monkeypatch.setattr(publisher_mod, "RingCursor", lapping_cursor(holder))
    pub, ring = make_publisher("inproc://telemetry-lapped", batch=BATCH, capacity=CAPACITY)
    lapper = Lapper(ring)
    holder.append(lapper)
    rounds = 4
    for _ in range(rounds):
        lost_before, lapped_before = pub.stats.lost_rows, pub.stats.lapped
        lapper.arm()
        write_rows(ring, ring.published, BATCH)  # the publisher's read of these gets lapped
        assert lapper.done.wait(WAIT_S), "the publisher never read"
        # One read found nothing left of what it copied; the next may find more rows gone.
        assert wait_until(lambda n=lapped_before: pub.stats.lapped > n, WAIT_S)
        assert pub.stats.lost_rows >= lost_before + BATCH
        fresh_subscriber_sees_meta_and_contiguous_samples(pub, ring, ctx)
        st = pub.stats.as_dict()
        assert st["alive"] is True and st["restarts"] == 0 and st["last_error"] is None
    # What the service's `status` carries (the publisher's own status topic, here).
    with TelemetrySubscriber(pub.endpoint, ctx=ctx) as sub:
        deadline = time.monotonic() + WAIT_S
        while True:
            assert time.monotonic() < deadline, "no status reporting the laps"
            msg = sub.recv(WAIT_S)
            if isinstance(msg, Status) and msg.header["telemetry"]["lapped"] >= rounds:
                tel = msg.header["telemetry"]
                assert tel["alive"] is True and tel["restarts"] == 0 and tel["lost_rows"] > 0
                break


def test_an_unexpected_exception_restarts_the_publisher_rate_limited_and_visibly(
    make_publisher, ctx, caplog: pytest.LogCaptureFixture
) -> None:
    pub, ring = make_publisher("inproc://telemetry-restart", batch=BATCH, capacity=CAPACITY)
    real = pub._drain_subscriptions
    failed_at: list[float] = []
    failures = 3

    def broken(sock: Any) -> None:
        if len(failed_at) < failures:
            failed_at.append(time.monotonic())
            raise RuntimeError(f"injected failure {len(failed_at)}")
        real(sock)

    caplog.set_level(logging.ERROR, logger="daq.telemetry.publisher")
    pub._drain_subscriptions = broken  # type: ignore[method-assign]
    assert wait_until(lambda: pub.stats.restarts == failures and pub.stats.alive, WAIT_S)
    assert pub.stats.last_error == f"RuntimeError: injected failure {failures}"
    # Rate-limited: the pause doubles per failure in a row (a lower bound holds on any machine).
    gaps = np.diff(failed_at)
    assert gaps[0] >= publisher_mod.RESTART_MIN_S and gaps[1] >= 2 * publisher_mod.RESTART_MIN_S
    # In the journal, with the traceback.
    records = [r for r in caplog.records if "telemetry publisher failed" in r.getMessage()]
    assert len(records) == failures and all(r.exc_info for r in records)
    fresh_subscriber_sees_meta_and_contiguous_samples(pub, ring, ctx)
    st = pub.stats.as_dict()
    assert st["alive"] is True and st["restarts"] == failures
    pub.stop()
    assert pub.stats.alive is False
