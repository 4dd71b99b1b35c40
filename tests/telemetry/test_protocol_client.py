"""A telemetry client written from docs/protocol.md alone: raw pyzmq + msgpack + numpy.

Project imports are used only (through the `make_publisher` fixture) to start the publisher.
"""

from __future__ import annotations

import msgpack
import numpy as np
import zmq

from tests.telemetry.conftest import wait_until, write_rows

ROWS = 10_000  # 10 s at 1 kHz
BATCH = 20


def recv(sock: zmq.Socket, timeout_ms: int = 5000) -> tuple[bytes, dict, bytes | None]:
    assert sock.poll(timeout_ms), "no telemetry message within 5 s"
    frames = sock.recv_multipart()
    topic, header = frames[0], msgpack.unpackb(frames[1], raw=False)
    assert header["v"] == 1
    return topic, header, frames[2] if len(frames) == 3 else None


def test_docs_client_decodes_10_s_with_contiguous_seq(make_publisher, ctx) -> None:
    pub, ring = make_publisher(batch=BATCH)
    sub = ctx.socket(zmq.SUB)
    sub.linger = 0
    sub.subscribe(b"")
    sub.connect(pub.endpoint)
    # The protocol: a new subscriber is sent `meta` as soon as its subscription arrives.
    meta = None
    while meta is None:
        topic, header, _ = recv(sub)
        if topic == b"meta":
            meta = header
    names = [c["name"] for c in meta["columns"]]
    width = len(names)
    assert names[:2] == ["seq", "t"] and meta["period"] == 1e-3 and meta["rig"] == "sim2dof"
    assert {"name", "unit", "role", "channel", "joint"} <= set(meta["columns"][5])

    expected_seq = 0
    columns: list[np.ndarray] = []
    kinds: set[bytes] = set()
    for start in range(0, ROWS, BATCH):
        write_rows(ring, start, BATCH)  # "1 kHz" in virtual time: one batch per step
        while expected_seq < start + BATCH:
            topic, header, payload = recv(sub)
            kinds.add(topic)
            if topic != b"samples":
                continue
            assert header["layout_id"] == meta["layout_id"]
            assert header["seq0"] == expected_seq, "sequence numbers must be contiguous"
            n, w = header["n"], header["width"]
            assert w == width and payload is not None and len(payload) == 8 * n * w
            block = np.frombuffer(payload, dtype="<f8").reshape(w, n)  # column-major
            assert header["t0"] == block[1, 0] and header["t1"] == block[1, -1]
            columns.append(block)
            expected_seq += n
    data = np.concatenate(columns, axis=1)
    assert data.shape == (width, ROWS)
    seq = data[names.index("seq")]
    np.testing.assert_array_equal(seq, np.arange(ROWS))
    np.testing.assert_allclose(data[names.index("t")], np.arange(ROWS) * 1e-3)
    c = names.index("eng.q_1")
    np.testing.assert_allclose(data[c], np.arange(ROWS) + c / 1000.0)
    sub.close()
    assert wait_until(lambda: pub.stats.rows_sent == ROWS)
    assert pub.stats.lost_rows == 0


def test_events_and_status_follow_the_documented_shape(make_publisher, ctx) -> None:
    pub, ring = make_publisher()
    sub = ctx.socket(zmq.SUB)
    sub.linger = 0
    sub.subscribe(b"event")
    sub.subscribe(b"status")
    sub.subscribe(b"meta")
    sub.connect(pub.endpoint)
    while recv(sub)[0] != b"meta":
        pass
    write_rows(ring, 0, 5)
    pub.event("state", old="IDLE", new="ARMED")
    got: dict[bytes, dict] = {}
    while b"event" not in got or b"status" not in got:
        topic, header, payload = recv(sub)
        assert payload is None
        got.setdefault(topic, header)
    ev = got[b"event"]
    assert ev["kind"] == "state" and ev["new"] == "ARMED" and ev["seq"] == 4 and ev["rig"]
    st = got[b"status"]
    assert st["state"] == "IDLE" and "telemetry" in st and "batches_sent" in st["telemetry"]
    sub.close()
