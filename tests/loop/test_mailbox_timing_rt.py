from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daq.loop import realtime as rt
from daq.loop.mailbox import Mailbox, MailboxTimeout
from daq.loop.timing import LoopTiming, percentile_from_histogram


def test_mailbox_round_trip_through_a_polling_thread() -> None:
    box = Mailbox()
    stop = threading.Event()
    seen: list[str] = []

    def loop() -> None:
        while not stop.is_set():
            req = box.take()
            if req is not None:
                seen.append(req.kind)
                req.finish(req.kind != "bad", "no" if req.kind == "bad" else "", echo=req.payload)
            time.sleep(0.0005)

    th = threading.Thread(target=loop)
    th.start()
    try:
        results = [box.call(k, i, timeout=30.0) for i, k in enumerate(["arm", "bad", "run"])]
    finally:
        stop.set()
        th.join()
    assert seen == ["arm", "bad", "run"]
    assert [r.ok for r in results] == [True, False, True]
    assert results[1].reason == "no" and results[2].data["echo"] == 2


def test_mailbox_timeout_withdraws_the_request() -> None:
    box = Mailbox()
    with pytest.raises(MailboxTimeout, match="did not answer 'arm'"):
        box.call("arm", timeout=0.05)
    assert box.take() is None  # withdrawn: a late loop will not act on it


def test_histogram_percentiles() -> None:
    timing = LoopTiming(1e-3, bins_us=100)
    rng = np.random.default_rng(0)
    values = rng.integers(0, 90, size=10_000)
    for v in values:
        timing.record(int(v) * 1000 + 500, 1000)
    snap0: dict[str, Any] = timing.snapshot()
    for q, key in ((50.0, "p50"), (99.0, "p99")):
        assert abs(percentile_from_histogram(timing.wake_hist, q) - np.percentile(values, q)) <= 1
        assert snap0["wake_latency_us"][key] == percentile_from_histogram(timing.wake_hist, q)
    timing.record(5_000_000, 2_000_000)  # beyond the range: overflow bin, still the max
    snap = timing.snapshot()
    assert snap["cycles"] == 10_001
    assert snap["wake_latency_us"]["max"] == 5000.0  # type: ignore[index]
    assert timing.wake_hist[-1] == 1


def test_overrun_counters() -> None:
    timing = LoopTiming(1e-3)
    assert timing.record_overrun(2) == 1
    assert timing.record_overrun(1) == 2
    timing.record_on_time()
    assert timing.record_overrun(1) == 1
    snap = timing.snapshot()
    assert snap["overruns"] == 3 and snap["skipped_cycles"] == 4
    assert snap["max_consecutive_overruns"] == 2 and snap["consecutive_overruns"] == 1


def test_rt_setup_warns_once_when_not_permitted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(*_args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(rt.os, "sched_setscheduler", refuse)
    monkeypatch.setattr(rt.os, "sched_setaffinity", refuse)
    monkeypatch.setattr(rt, "_lock_memory", lambda rep: rep.failed.append("mlockall: refused"))
    with caplog.at_level(logging.WARNING, logger="daq.loop.realtime"):
        report = rt.apply(rt.RtSettings(priority=80, cpu=0, lock_memory=True))
    assert len(report.failed) == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    for word in ("SCHED_FIFO", "affinity", "mlockall"):
        assert word in warnings[0].getMessage()


def test_rt_setup_in_a_thread_applies_affinity() -> None:
    import os

    cpu = sorted(os.sched_getaffinity(0))[0]
    out: dict[str, object] = {}

    def body() -> None:
        out["report"] = rt.apply(rt.RtSettings(priority=0, cpu=cpu))
        out["affinity"] = os.sched_getaffinity(0)

    th = threading.Thread(target=body)
    th.start()
    th.join()
    assert out["affinity"] == {cpu}
    assert os.sched_getaffinity(0) != {cpu} or len(os.sched_getaffinity(0)) == 1  # thread only


def test_cpu_latency_request_is_written_and_held(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The PM QoS request: a 32-bit µs value written to the device, the descriptor kept open
    (closing it would drop the request); a second apply rewrites the same descriptor."""
    device = tmp_path / "cpu_dma_latency"
    device.write_bytes(b"")
    monkeypatch.setattr(rt, "CPU_LATENCY_DEVICE", str(device))
    monkeypatch.setattr(rt, "_latency_fd", None)
    report = rt.apply(rt.RtSettings(cpu_latency_us=0))
    try:
        assert "cpu latency 0 µs" in report.applied and not report.failed
        fd = rt._latency_fd
        assert fd is not None and os.fstat(fd).st_ino == device.stat().st_ino
        assert device.read_bytes() == (0).to_bytes(4, sys.byteorder)
        rt.apply(rt.RtSettings(cpu_latency_us=5))
        assert rt._latency_fd == fd
        assert device.read_bytes()[-4:] == (5).to_bytes(4, sys.byteorder)
    finally:
        if rt._latency_fd is not None:
            os.close(rt._latency_fd)


def test_cpu_latency_request_refused_is_a_warning_naming_the_device(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "no" / "cpu_dma_latency"
    monkeypatch.setattr(rt, "CPU_LATENCY_DEVICE", str(missing))
    monkeypatch.setattr(rt, "_latency_fd", None)
    with caplog.at_level(logging.WARNING, logger="daq.loop.realtime"):
        report = rt.apply(rt.RtSettings(cpu_latency_us=0))
    assert report.failed and str(missing) in report.failed[0]
    assert any(str(missing) in r.getMessage() for r in caplog.records)
    # -1 leaves the kernel's default alone: nothing is opened.
    assert rt.apply(rt.RtSettings(cpu_latency_us=-1)).failed == []


def test_keep_off_cpu_confines_the_thread_and_what_it_starts() -> None:
    """The service process keeps its threads off the loop's CPU (threads inherit the mask)."""
    allowed = sorted(os.sched_getaffinity(0))
    out: dict[str, Any] = {}

    def child() -> None:
        out["child"] = os.sched_getaffinity(0)

    def body() -> None:
        out["missing"] = rt.keep_off_cpu(max(allowed) + 1)  # not ours: nothing to leave
        out["result"] = rt.keep_off_cpu(allowed[0])
        th = threading.Thread(target=child)
        th.start()
        th.join()
        out["self"] = os.sched_getaffinity(0)

    th = threading.Thread(target=body)
    th.start()
    th.join()
    assert out["missing"] is None
    if len(allowed) == 1:  # nothing else to run on: left as it was
        assert out["result"] is None and out["self"] == set(allowed)
    else:
        assert out["result"] == set(allowed[1:]) == out["self"] == out["child"]
    assert sorted(os.sched_getaffinity(0)) == allowed  # only that thread was confined
