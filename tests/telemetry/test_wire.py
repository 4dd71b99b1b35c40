"""Decoder edge cases and publisher details: malformed messages, seq restarts, failures."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
import zmq

from daq.telemetry import Event, SampleBatch, Status, TelemetrySubscriber, WireError, decode
from daq.telemetry.wire import layout_id
from tests.conditions import GENEROUS_S
from tests.telemetry.conftest import write_rows


def _h(**kw) -> bytes:
    return msgpack.packb({"v": 1, "rig": "r", **kw})


SAMPLE = dict(layout_id="L", seq0=5, n=2, t0=0.0, t1=0.001, width=3)


def test_decode_samples_column_major() -> None:
    payload = np.arange(6, dtype="<f8").tobytes()  # columns [0,1], [2,3], [4,5]
    msg = decode([b"samples", _h(**SAMPLE), payload])
    assert isinstance(msg, SampleBatch) and msg.seq0 == 5 and msg.n == 2
    np.testing.assert_array_equal(msg.data[1], [2.0, 3.0])
    np.testing.assert_array_equal(msg.rows(), [[0, 2, 4], [1, 3, 5]])


@pytest.mark.parametrize(
    ("frames", "match"),
    [
        ([b"samples"], "2 or 3 frames"),
        ([b"gossip", _h()], "unknown topic"),
        ([b"status", b"\xc1"], "not msgpack"),
        ([b"status", msgpack.packb([1])], "not a map"),
        ([b"status", msgpack.packb({"v": 2, "rig": "r", "state": "x", "fault": None})], "version"),
        ([b"event", _h(seq=1, t=0.0)], "lacks \\['kind'\\]"),
        ([b"samples", _h(**SAMPLE)], "expected 3 frames"),
        ([b"samples", _h(**SAMPLE), b"\0" * 40], "payload of 40 bytes"),
    ],
)
def test_decode_rejects_malformed_messages(frames, match) -> None:
    with pytest.raises(WireError, match=match):
        decode(frames)


def test_decode_other_topics() -> None:
    assert isinstance(decode([b"status", _h(state="IDLE", fault=None)]), Status)
    ev = decode([b"event", _h(seq=3, t=0.1, kind="state", state="ARMED")])
    assert isinstance(ev, Event) and ev.kind == "state"


def test_layout_id_is_stable_and_layout_specific(layout) -> None:
    assert layout_id(layout) == layout_id(layout) and len(layout_id(layout)) == 16
    from daq.sample_layout import SampleLayout

    shorter = SampleLayout(layout.columns[:-1])
    assert layout_id(shorter) != layout_id(layout)


def test_batches_split_where_seq_restarts_and_bad_status_is_survived(make_publisher, ctx) -> None:
    def broken_status() -> dict:
        raise RuntimeError("status unavailable")

    pub, ring = make_publisher("inproc://wire-restart", status_fn=broken_status)
    sub = TelemetrySubscriber(pub.endpoint, ctx=ctx)
    try:
        assert sub.wait_meta(GENEROUS_S) is not None
        write_rows(ring, 100, 10)
        write_rows(ring, 0, 10)  # the loop restarted: seq goes back to 0 inside one batch
        pub.event("weird", payload=object())  # not encodable: dropped and counted
        pub.event("state", state="ARMED", previous="IDLE")
        got: list[tuple[int, int]] = []
        kinds: list[str] = []
        while sum(n for _, n in got) < 20 or not kinds:
            msg = sub.recv(5.0)
            assert msg is not None
            if isinstance(msg, SampleBatch):
                got.append((msg.seq0, msg.n))
            elif isinstance(msg, Event):
                kinds.append(msg.kind)
        assert got == [(100, 10), (0, 10)]
        assert sub.lost_rows == 0  # a restart is not a loss
        assert kinds == ["state"] and pub.stats.dropped_events == 1
    finally:
        sub.close()


def test_bind_conflict_is_a_clear_error(make_publisher, ctx) -> None:
    pub, _ = make_publisher()
    with pytest.raises(OSError, match="cannot bind"):
        make_publisher(pub.endpoint)


def test_subscriber_counts_undecodable_messages(ctx) -> None:
    raw = ctx.socket(zmq.PUB)
    raw.bind("inproc://wire-bad")
    sub = TelemetrySubscriber("inproc://wire-bad", ctx=ctx)
    try:
        while True:  # until the subscription is through (inproc: immediate, but be exact)
            raw.send_multipart([b"status", _h(state="IDLE", fault=None)])
            if sub.recv(0.05) is not None:
                break
        raw.send_multipart([b"samples", b"\xc1"])
        raw.send_multipart([b"status", _h(state="ARMED", fault=None)])
        msg = sub.recv(5.0)
        assert isinstance(msg, Status) and msg.header["state"] == "ARMED"
        assert sub.bad_messages == 1
    finally:
        sub.close()
        raw.close(linger=0)
