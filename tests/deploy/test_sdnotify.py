"""sd_notify over a real AF_UNIX datagram socket bound by the test (playing systemd)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from daq.sdnotify import Notifier, WatchdogFeeder
from tests.conditions import wait_until
from tests.deploy.conftest import NotifyListener


def test_without_notify_socket_everything_is_a_quiet_no_op() -> None:
    n = Notifier.from_env({})
    assert not n.enabled
    assert n.watchdog_interval() is None
    assert n.ready() is False
    assert n.status("x") is False
    assert n.watchdog() is False
    assert n.stopping() is False
    feeder = WatchdogFeeder(n, heartbeat=lambda: 0, status_text=lambda: "s").start()
    assert feeder._thread is None  # no thread when there is nobody to talk to
    feeder.stop()


def test_ready_status_stopping_arrive_as_datagrams(notify_listener: NotifyListener) -> None:
    with Notifier.from_env({"NOTIFY_SOCKET": notify_listener.env_name}) as n:
        assert n.enabled
        assert n.ready()
        assert notify_listener.recv() == "READY=1"
        assert n.ready("running, 1000 Hz")
        assert notify_listener.recv() == "READY=1\nSTATUS=running, 1000 Hz"
        assert n.status("state IDLE\nfault none")
        # A newline would start a new KEY=VALUE pair: the status stays one line.
        assert notify_listener.recv() == "STATUS=state IDLE fault none"
        assert n.stopping("bye")
        assert notify_listener.recv() == "STOPPING=1\nSTATUS=bye"
        assert n.extend_timeout(2.5)
        assert notify_listener.recv() == "EXTEND_TIMEOUT_USEC=2500000"


def test_watchdog_usec_and_ping(notify_listener: NotifyListener) -> None:
    env = {"NOTIFY_SOCKET": notify_listener.env_name, "WATCHDOG_USEC": "2000000"}
    n = Notifier.from_env(env)
    assert n.watchdog_interval() == pytest.approx(2.0)
    assert n.watchdog()
    assert notify_listener.recv() == "WATCHDOG=1"
    n.close()


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": str(os.getpid())}, 0.5),
        # Inherited by a child: the watchdog is someone else's.
        ({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": str(os.getpid() + 1)}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval_rules(extra: dict[str, str], expected: float | None) -> None:
    n = Notifier.from_env({"NOTIFY_SOCKET": "@unused", **extra})
    got = n.watchdog_interval()
    assert got == (pytest.approx(expected) if expected is not None else None)
    n.close()


def test_abstract_namespace_socket(abstract_listener: NotifyListener) -> None:
    assert abstract_listener.env_name.startswith("@")
    with Notifier.from_env({"NOTIFY_SOCKET": abstract_listener.env_name}) as n:
        assert n.ready()
        assert abstract_listener.recv() == "READY=1"


def test_unusable_socket_name_is_refused_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="daq.sdnotify"):
        n = Notifier.from_env({"NOTIFY_SOCKET": "vsock:2:1234"})
    assert not n.enabled
    assert "not an AF_UNIX" in caplog.text


def test_send_failure_returns_false_and_is_logged_once(
    short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    n = Notifier.from_env({"NOTIFY_SOCKET": f"{short_tmp}/nobody-listens"})
    with caplog.at_level(logging.WARNING, logger="daq.sdnotify"):
        results = [n.watchdog() for _ in range(5)]
    assert results == [False] * 5
    assert len([r for r in caplog.records if "sd_notify" in r.getMessage()]) == 1
    n.close()


@pytest.mark.timeout(20)
def test_sending_never_blocks_when_the_manager_does_not_read(
    notify_listener: NotifyListener,
) -> None:
    # Nobody reads the socket: its queue fills, and then sends must fail at once, not block.
    n = Notifier.from_env({"NOTIFY_SOCKET": notify_listener.env_name})
    sent = 0
    for _ in range(100_000):
        if not n.status("x" * 200):
            break
        sent += 1
    else:
        pytest.fail("100000 datagrams queued without the receiver reading: queue never filled")
    assert sent > 0
    n.close()


# --------------------------------------------------------------------------- WatchdogFeeder


class FakeLoop:
    """Stands in for the loop's heartbeat: each read of `cycles` finds the counter moved while
    `running`, and unchanged otherwise. No thread, so a stall is exact: no cycle can land after
    the test has stopped the loop."""

    def __init__(self) -> None:
        self.count = 0
        self.running = False

    @property
    def cycles(self) -> int:
        if self.running:
            self.count += 1
        return self.count


def _until_statuses(listener: NotifyListener, n: int, timeout: float = 30.0) -> list[str]:
    """Receive until `n` STATUS lines have come (each from a pass of the feeder that also checked
    the heartbeat); return everything received."""
    got: list[str] = []
    end = time.monotonic() + timeout
    while sum(m.startswith("STATUS=") for m in got) < n:
        msg = listener.recv(max(0.0, end - time.monotonic()))
        assert msg is not None, f"only {got} within {timeout} s"
        got.append(msg)
    return got


def _wait_for(listener: NotifyListener, pred: Callable[[str], bool], timeout: float) -> list[str]:
    """Receive until a message satisfies `pred`; return everything received up to it."""
    end = time.monotonic() + timeout
    seen: list[str] = []
    while time.monotonic() < end:
        msg = listener.recv(max(0.0, end - time.monotonic()))
        if msg is None:
            break
        seen.append(msg)
        if pred(msg):
            return seen
    pytest.fail(f"no matching message within {timeout} s; got {seen[-5:]}")


@pytest.mark.timeout(120)
def test_feeder_pings_only_while_the_heartbeat_advances(notify_listener: NotifyListener) -> None:
    env = {"NOTIFY_SOCKET": notify_listener.env_name, "WATCHDOG_USEC": "400000"}
    notifier = Notifier.from_env(env)
    loop = FakeLoop()
    feeder = WatchdogFeeder(
        notifier,
        heartbeat=lambda: loop.cycles,
        status_text=lambda: f"RUNNING cycles={loop.count}",
        status_period=0.1,
    )
    # Pings are checked four times per interval: a live loop is pinged at ≤ interval/2.
    assert feeder.check_period == pytest.approx(0.1)
    try:
        loop.running = True
        feeder.start()
        seen = _wait_for(notify_listener, lambda m: m == "WATCHDOG=1", 30.0)
        seen += _wait_for(notify_listener, lambda m: m == "WATCHDOG=1", 30.0)
        if not any(m.startswith("STATUS=RUNNING cycles=") for m in seen):
            _wait_for(notify_listener, lambda m: m.startswith("STATUS=RUNNING cycles="), 30.0)

        # The loop stalls. Once the feeder reports the stall, no ping may follow: each further
        # status comes from a pass of the feeder that checked the heartbeat and did not ping.
        loop.running = False
        _wait_for(notify_listener, lambda m: m.startswith("STATUS=LOOP STALLED"), 30.0)
        pings_at_stall = feeder.pings  # the stall status is sent after the last ping's count
        after: list[str] = []
        while sum(m.startswith("STATUS=LOOP STALLED") for m in after) < 3:
            msg = notify_listener.recv(30.0)
            assert msg is not None, "the feeder stopped sending status during the stall"
            after.append(msg)
        assert "WATCHDOG=1" not in after
        assert feeder.pings == pings_at_stall

        # The loop recovers: pings resume (the datagram may arrive before `pings` counts it).
        loop.running = True
        _wait_for(notify_listener, lambda m: m == "WATCHDOG=1", 30.0)
        assert wait_until(lambda: feeder.pings > pings_at_stall)
    finally:
        feeder.stop()
        notifier.close()


@pytest.mark.timeout(30)
def test_feeder_never_pings_when_the_heartbeat_probe_fails(
    notify_listener: NotifyListener, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> int:
        raise RuntimeError("loop object gone")

    env = {"NOTIFY_SOCKET": notify_listener.env_name, "WATCHDOG_USEC": "200000"}
    notifier = Notifier.from_env(env)
    with caplog.at_level(logging.ERROR, logger="daq.sdnotify"):
        with WatchdogFeeder(notifier, broken, lambda: "s", status_period=0.05) as feeder:
            got = _until_statuses(notify_listener, 5)
        assert feeder.pings == 0
    assert "WATCHDOG=1" not in got
    assert len([r for r in caplog.records if "heartbeat probe failed" in r.getMessage()]) == 1
    notifier.close()


@pytest.mark.timeout(30)
def test_feeder_without_watchdog_sends_status_only(notify_listener: NotifyListener) -> None:
    notifier = Notifier.from_env({"NOTIFY_SOCKET": notify_listener.env_name})
    counter = iter(range(10**9))
    with WatchdogFeeder(notifier, lambda: next(counter), lambda: "IDLE", status_period=0.05):
        got = _until_statuses(notify_listener, 5)
    assert "WATCHDOG=1" not in got
    assert "STATUS=IDLE" in got
    notifier.close()


@pytest.mark.parametrize("kwargs", [{"status_period": 0.0}, {"check_period": -1.0}])
def test_feeder_rejects_non_positive_periods(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        WatchdogFeeder(Notifier(None), lambda: 0, lambda: "", **kwargs)
