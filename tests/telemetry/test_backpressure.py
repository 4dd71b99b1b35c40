"""A subscriber that never reads must cost the writer and the other subscribers nothing."""

from __future__ import annotations

import msgpack
import zmq

from daq.telemetry import SampleBatch, TelemetrySubscriber
from daq.telemetry.publisher import SNDHWM
from tests.telemetry.conftest import wait_until, write_rows

BATCH = 20
BATCHES = 4 * SNDHWM
#: Deadline for anything this file waits on: generous, the suite must pass on a loaded machine.
WAIT_S = 30.0


def test_stalled_subscriber_loses_only_its_own_messages(make_publisher, ctx) -> None:
    # inproc: no kernel buffers, so the stalled pipe fills after exactly SNDHWM + RCVHWM messages.
    pub, ring = make_publisher("inproc://telemetry-bp", batch=BATCH)
    stalled = ctx.socket(zmq.SUB)
    stalled.linger = 0
    stalled.rcvhwm = 1
    stalled.subscribe(b"")
    stalled.connect(pub.endpoint)
    fast = TelemetrySubscriber(pub.endpoint, ctx=ctx)
    try:
        assert fast.wait_meta(WAIT_S) is not None
        # The stalled socket's subscription is in too once it has a message queued.
        assert stalled.poll(WAIT_S * 1000)
        received = 0
        for k in range(BATCHES):
            write_rows(ring, k * BATCH, BATCH)  # the writer: plain ring writes, never waits
            while received < (k + 1) * BATCH:
                msg = fast.recv(WAIT_S)
                assert msg is not None, "the fast subscriber stopped receiving"
                if isinstance(msg, SampleBatch):
                    assert msg.seq0 == received
                    received += msg.n
        assert fast.lost_rows == 0
        # The publisher counts a batch after its send returns: wait for the count, not a time.
        assert wait_until(lambda: pub.stats.rows_sent == BATCHES * BATCH, WAIT_S)
        st = pub.stats
        assert st.lost_rows == 0
        # The publisher noticed the stalled queue (libzmq then skips that subscriber silently
        # until it reads again, so the counter is the number of stall onsets: a lower bound).
        assert 1 <= st.dropped_batches < BATCHES
        # The stalled subscriber holds at most SNDHWM + RCVHWM messages, then a gap.
        seqs = []
        while stalled.poll(0):
            frames = stalled.recv_multipart()
            if frames[0] == b"samples":
                seqs.append(msgpack.unpackb(frames[1])["seq0"])
        assert 0 < len(seqs) <= SNDHWM + 2
        assert seqs == list(range(0, BATCH * len(seqs), BATCH))
    finally:
        fast.close()
        stalled.close()


def test_publisher_counts_rows_lost_when_the_ring_laps_it(make_publisher, ctx) -> None:
    pub, ring = make_publisher("inproc://telemetry-lap", batch=BATCH, capacity=256)
    fast = TelemetrySubscriber(pub.endpoint, ctx=ctx)
    try:
        assert fast.wait_meta(WAIT_S) is not None
        # Writing 10 ring capacities at once laps the publisher's cursor (unless it is fast
        # enough to keep up, which only lowers the count): lost rows are counted on both ends.
        total = 0
        for n in (BATCH, 2560):
            write_rows(ring, total, n)
            total += n
            seen_last = False
            while not seen_last:
                msg = fast.recv(WAIT_S)
                assert msg is not None
                if isinstance(msg, SampleBatch):
                    seen_last = msg.seq0 + msg.n == total
        assert wait_until(lambda: pub.stats.rows_sent + pub.stats.lost_rows == total, WAIT_S)
        assert fast.lost_rows == pub.stats.lost_rows
    finally:
        fast.close()
