"""A subscription flood is bounded per connection: the flooder's connection is really closed
(again after every reconnection), the honest subscriber keeps receiving, and the publishing
process's memory stays bounded and returns afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from daq.telemetry import TelemetrySubscriber
from tests.conditions import wait_until
from tests.telemetry.conftest import write_rows
from tests.telemetry.zmtp_flood import flood

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 30.0
#: The fastest flooder at hand: a libzmq XSUB with no send limit, reconnecting 100 ms after each
#: close (the bench's, run as a program).
FLOODER = ROOT / "bench" / "safety_flood_kill.py"


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _receives(sub: TelemetrySubscriber, ring, start: int, n: int) -> bool:
    write_rows(ring, start, n)
    got = 0
    while got < n:
        msg = sub.recv(WAIT_S)
        if msg is None:
            return False
        got += getattr(msg, "n", 0)
    return sub.lost_rows == 0


def test_a_flooder_is_closed_each_time_it_comes_back_and_the_others_keep_receiving(
    make_publisher, ctx
) -> None:
    pub, ring = make_publisher("tcp://127.0.0.1:*", batch=10)
    honest = TelemetrySubscriber(pub.endpoint, ctx=ctx)
    try:
        assert honest.wait_meta(WAIT_S) is not None
        # Three connections one after the other: a reconnecting flooder usually gets the same
        # descriptor number back, and must be judged (and closed) afresh each time.
        res = flood(pub.endpoint, seconds=3 * WAIT_S, max_connections=3)
        assert res.connections == 3
        assert res.closed_by_service == 3, res
        assert wait_until(lambda: pub.stats.flooders_closed >= 3, WAIT_S), pub.stats
        assert pub.stats.flooders_cut_off >= 3
        assert _receives(honest, ring, 0, 30), "the honest subscriber stopped receiving"
    finally:
        honest.close()


def test_memory_stays_bounded_during_a_flood_and_returns_after_it(make_publisher, ctx) -> None:
    pub, ring = make_publisher("tcp://127.0.0.1:*", batch=10)
    honest = TelemetrySubscriber(pub.endpoint, ctx=ctx)
    try:
        assert honest.wait_meta(WAIT_S) is not None
        base = _rss_mb()
        peak = base
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        child = subprocess.Popen(
            [sys.executable, str(FLOODER), "--flooder", pub.endpoint, "8"],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        try:
            while child.poll() is None:
                peak = max(peak, _rss_mb())
                try:
                    child.wait(0.1)
                except subprocess.TimeoutExpired:
                    pass
            out, _ = child.communicate(timeout=WAIT_S)
        finally:
            if child.poll() is None:
                child.kill()
        res = json.loads(out.strip().splitlines()[-1])
        assert res["sent"] > 0 and res["connections"] >= 1
        assert peak - base <= 50, f"RSS grew by {peak - base:.0f} MB during the flood"
        assert not res["open_at_end"], "the flooder's last connection was never closed"
        assert wait_until(lambda: _rss_mb() - base <= 20, WAIT_S), (
            f"RSS still {_rss_mb() - base:.0f} MB above its level before the flood"
        )
        assert _receives(honest, ring, 0, 30), "the honest subscriber stopped receiving"
    finally:
        honest.close()
