"""Telemetry benchmark: latency at 1 kHz, loop jitter with a stalled subscriber, throughput
against a bare pyzmq PUB/SUB of the same payload. Last line: JSON.

    /work/venv/bin/python bench/telemetry.py [--seconds 5]

Latency is from the moment the writer publishes a row into the ring to the moment a subscriber
thread has it decoded; "row" counts every row (includes waiting for the batch to fill),
"newest" only the last row of each batch (the transport + wake-up part).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daq.profile.loader import load_profile
from daq.ring import SampleRing
from daq.sample_layout import SampleLayout
from daq.telemetry import SampleBatch, TelemetryPublisher, TelemetrySubscriber

PROFILE = Path(__file__).resolve().parents[1] / "hw_profiles" / "sim-2dof.toml"
PERIOD = 1e-3
BATCH = 20


def _publisher(ctx: zmq.Context, layout: SampleLayout, capacity: int) -> tuple:
    ring = SampleRing(capacity, layout.width)
    pub = TelemetryPublisher(
        ctx,
        "tcp://127.0.0.1:*",
        ring,
        layout,
        rig_id="bench",
        period=PERIOD,
        batch=BATCH,
        status_fn=lambda: {"state": "BENCH"},
    )
    pub.start()
    return pub, ring


def realtime_writer(ring: SampleRing, seconds: float, stamps: np.ndarray) -> np.ndarray:
    """Write one row per 1 ms absolute deadline; return each cycle's wake lateness (s)."""
    n = int(seconds / PERIOD)
    late = np.empty(n)
    t0 = time.perf_counter_ns()
    for k in range(n):
        deadline = t0 + k * 1_000_000
        while (now := time.perf_counter_ns()) < deadline - 200_000:
            time.sleep((deadline - now) / 1e9 - 1.5e-4)
        while (now := time.perf_counter_ns()) < deadline:
            pass
        late[k] = (now - deadline) / 1e9
        row = ring.claim()
        row[0] = k
        row[1] = k * PERIOD
        ring.publish()
        stamps[k] = time.perf_counter_ns()
    return late


def latency(ctx: zmq.Context, layout: SampleLayout, seconds: float) -> dict:
    pub, ring = _publisher(ctx, layout, 16384)
    stamps = np.full(int(seconds / PERIOD), np.nan)
    row_lat: list[np.ndarray] = []
    newest: list[float] = []
    sub = TelemetrySubscriber(pub.endpoint, ctx=ctx, topics=(b"samples", b"meta"))
    sub.wait_meta(5.0)
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            msg = sub.recv(0.1)
            if isinstance(msg, SampleBatch):
                now = time.perf_counter_ns()
                seqs = msg.data[0].astype(np.int64)
                row_lat.append((now - stamps[seqs]) / 1e9)
                newest.append((now - stamps[seqs[-1]]) / 1e9)

    th = threading.Thread(target=reader)
    th.start()
    realtime_writer(ring, seconds, stamps)
    while sub.next_seq is None or sub.next_seq < len(stamps):
        time.sleep(0.01)
    done.set()
    th.join()
    sub.close()
    pub.stop()
    rows = np.concatenate(row_lat)
    return {
        "row_latency_p50_ms": float(np.percentile(rows, 50) * 1e3),
        "row_latency_p99_ms": float(np.percentile(rows, 99) * 1e3),
        "newest_row_latency_p50_ms": float(np.percentile(newest, 50) * 1e3),
        "newest_row_latency_p99_ms": float(np.percentile(newest, 99) * 1e3),
        "rows_received": int(rows.size),
    }


def jitter(ctx: zmq.Context, layout: SampleLayout, seconds: float, stalled: bool) -> dict:
    pub, ring = _publisher(ctx, layout, 16384)
    socks = []
    if stalled:
        s = ctx.socket(zmq.SUB)
        s.rcvhwm = 1
        s.setsockopt(zmq.RCVBUF, 4096)
        s.subscribe(b"")
        s.connect(pub.endpoint)
        assert s.poll(5000)
        socks.append(s)
    late = realtime_writer(ring, seconds, np.empty(int(seconds / PERIOD)))
    pub.stop()
    for s in socks:
        s.close(linger=0)
    return {
        "p99_us": float(np.percentile(late, 99) * 1e6),
        "max_us": float(late.max() * 1e6),
        "dropped_batches": pub.stats.dropped_batches,
        "rows_sent": pub.stats.rows_sent,
    }


def _count(sub: zmq.Socket, stop_after_idle: float, started: threading.Event) -> list[int]:
    got = [0]
    started.set()
    while sub.poll(int(stop_after_idle * 1000)):
        frames = sub.recv_multipart(copy=False)
        if frames[0].bytes == b"samples":
            got[0] += msgpack.unpackb(frames[1].bytes)["n"]
    return got


def throughput_telemetry(ctx: zmq.Context, layout: SampleLayout, seconds: float) -> dict:
    pub, ring = _publisher(ctx, layout, 1 << 16)
    sub = TelemetrySubscriber(pub.endpoint, ctx=ctx, topics=(b"samples", b"meta"))
    sub.wait_meta(5.0)
    raw = sub.sock
    result: list[int] = []
    started = threading.Event()
    th = threading.Thread(target=lambda: result.extend(_count(raw, 0.5, started)))
    th.start()
    started.wait()
    block = np.zeros((1024, layout.width))  # divides the ring capacity: no wrap inside
    t0 = time.perf_counter()
    written = 0
    while time.perf_counter() - t0 < seconds:
        # Never lap the publisher: this measures its send rate, not ring overruns.
        if written - pub.stats.rows_sent - pub.stats.lost_rows > ring.capacity // 2:
            time.sleep(1e-4)
            continue
        block[:, 0] = np.arange(written, written + len(block))
        ring.publish_block(block)
        written += len(block)
    while pub.stats.rows_sent + pub.stats.lost_rows < written:
        time.sleep(1e-3)
    elapsed = time.perf_counter() - t0
    th.join()
    sub.close()
    pub.stop()
    return {
        "rows_per_s_sent": pub.stats.rows_sent / elapsed,
        "rows_per_s_received": result[0] / elapsed,
        "elapsed_s": elapsed,
    }


def throughput_bare(ctx: zmq.Context, width: int, seconds: float) -> dict:
    pub = ctx.socket(zmq.PUB)
    pub.sndhwm = 50
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    sub = ctx.socket(zmq.SUB)
    sub.rcvhwm = 1000
    sub.subscribe(b"samples")
    sub.connect(f"tcp://127.0.0.1:{port}")
    while True:  # wait until the subscription is through
        pub.send_multipart([b"samples", msgpack.packb({"n": 0}), b""])
        if sub.poll(10):
            sub.recv_multipart()
            break
    result: list[int] = []
    started = threading.Event()
    th = threading.Thread(target=lambda: result.extend(_count(sub, 0.5, started)))
    th.start()
    started.wait()
    payload = np.zeros((width, BATCH))
    sent = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        header = msgpack.packb({"v": 1, "seq0": sent, "n": BATCH, "width": width})
        pub.send_multipart(
            [b"samples", header, np.ascontiguousarray(payload)], zmq.NOBLOCK, copy=False
        )
        sent += BATCH
    elapsed = time.perf_counter() - t0
    th.join()
    sub.close(linger=0)
    pub.close(linger=0)
    return {"rows_per_s_sent": sent / elapsed, "rows_per_s_received": result[0] / elapsed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args(argv)
    layout = SampleLayout.from_profile(load_profile(PROFILE))
    ctx = zmq.Context()
    out: dict = {"width": layout.width, "batch": BATCH, "payload_bytes": 8 * BATCH * layout.width}
    out["latency_1khz"] = latency(ctx, layout, args.seconds)
    out["writer_jitter_no_subscriber"] = jitter(ctx, layout, args.seconds, stalled=False)
    out["writer_jitter_stalled_subscriber"] = jitter(ctx, layout, args.seconds, stalled=True)
    out["writer_p99_ratio_stalled_vs_none"] = (
        out["writer_jitter_stalled_subscriber"]["p99_us"]
        / out["writer_jitter_no_subscriber"]["p99_us"]
    )
    tel = throughput_telemetry(ctx, layout, min(args.seconds, 3.0))
    bare = throughput_bare(ctx, layout.width, min(args.seconds, 3.0))
    out["throughput_telemetry"] = tel
    out["throughput_bare_pubsub"] = bare
    out["throughput_ratio_received"] = tel["rows_per_s_received"] / bare["rows_per_s_received"]
    out["throughput_ratio_sent"] = tel["rows_per_s_sent"] / bare["rows_per_s_sent"]
    ctx.destroy(linger=0)
    for k, v in out.items():
        print(f"{k}: {v}", file=sys.stderr)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
