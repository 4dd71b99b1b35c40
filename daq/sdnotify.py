"""systemd's notify protocol (`sd_notify(3)`), spoken directly on the `NOTIFY_SOCKET` datagram.

The protocol is newline-separated `KEY=VALUE` pairs in one datagram sent to the AF_UNIX socket
named by `$NOTIFY_SOCKET` (a path, or `@name` for the abstract namespace). Writing it here costs
a few lines and avoids a compiled dependency (`python-systemd`) on the rig PC.

Watchdog pings must prove that the *loop* is alive, not that some thread is: `WatchdogFeeder`
pings only when the loop's cycle counter has advanced since the previous ping, so a stuck loop
stops the pings and systemd kills and restarts the service after `WatchdogSec`.

Nothing here blocks: datagrams go out with `MSG_DONTWAIT` and a failure is logged once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)


def _address(name: str) -> str | bytes | None:
    """`$NOTIFY_SOCKET` → a `sendto` address; `@x` is the abstract name `\\0x`. Only AF_UNIX
    names are understood (systemd ≥ 254 may also hand out `vsock:`; not used on a rig PC)."""
    if name.startswith("@"):
        return b"\0" + name[1:].encode()
    if name.startswith("/"):
        return name
    return None


class Notifier:
    """One process's channel to the service manager. A notifier built with no socket (not run
    by systemd) accepts every call and sends nothing, so callers never test for systemd."""

    def __init__(self, socket_name: str | None, watchdog_usec: int | None = None) -> None:
        self._addr = _address(socket_name) if socket_name else None
        if socket_name and self._addr is None:
            log.warning(
                "NOTIFY_SOCKET=%r is not an AF_UNIX socket name; not notifying", socket_name
            )
        self._sock: socket.socket | None = None
        if self._addr is not None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._watchdog_usec = watchdog_usec if watchdog_usec and watchdog_usec > 0 else None
        self._failed = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        """Read `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` the way `sd_notify` and
        `sd_watchdog_enabled` do. The watchdog is off if `WATCHDOG_PID` names another process
        (the variables were inherited by a child of the service)."""
        env = os.environ if environ is None else environ
        usec: int | None = None
        raw = env.get("WATCHDOG_USEC", "")
        if raw:
            try:
                usec = int(raw)
            except ValueError:
                log.warning("WATCHDOG_USEC=%r is not an integer; watchdog off", raw)
            pid = env.get("WATCHDOG_PID", "")
            if usec is not None and pid and pid != str(os.getpid()):
                usec = None
        return cls(env.get("NOTIFY_SOCKET") or None, usec)

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Notifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ messages

    def notify(self, message: str) -> bool:
        """Send one datagram; True if it went out. Never raises, never blocks."""
        sock = self._sock
        if sock is None or self._addr is None:
            return False
        try:
            sock.sendto(message.encode("utf-8", "replace"), socket.MSG_DONTWAIT, self._addr)
        except OSError as exc:
            # Once: a dead manager socket would otherwise log at the ping rate.
            if not self._failed:
                self._failed = True
                log.warning(
                    "sd_notify to %r failed (%s); further failures not logged", self._addr, exc
                )
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        msg = "READY=1"
        if status is not None:
            msg += "\nSTATUS=" + _one_line(status)
        return self.notify(msg)

    def status(self, text: str) -> bool:
        return self.notify("STATUS=" + _one_line(text))

    def stopping(self, status: str | None = None) -> bool:
        msg = "STOPPING=1"
        if status is not None:
            msg += "\nSTATUS=" + _one_line(status)
        return self.notify(msg)

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def extend_timeout(self, seconds: float) -> bool:
        """Ask for more start-up (or stop) time, e.g. while numba compiles on a first start."""
        return self.notify(f"EXTEND_TIMEOUT_USEC={round(seconds * 1e6)}")

    def watchdog_interval(self) -> float | None:
        """`WatchdogSec` in seconds, or None when systemd expects no pings."""
        return None if self._watchdog_usec is None else self._watchdog_usec / 1e6


def _one_line(text: str) -> str:
    # A newline would start a new KEY=VALUE pair.
    return text.replace("\n", " ")


class WatchdogFeeder:
    """Thread that turns the loop's progress into `WATCHDOG=1` pings and `STATUS=` lines.

    Every `interval/4` it reads `heartbeat()` (the loop's cycle counter) and pings only if the
    counter moved since the last ping. A stalled loop therefore stops the pings within one check
    and systemd acts after `WatchdogSec`; a running loop is pinged at ≤ interval/4, leaving
    margin for the scheduler. `status_text()` is sent about once a second; when the loop has not
    advanced for half the watchdog interval the line is prefixed with `LOOP STALLED`.
    """

    def __init__(
        self,
        notifier: Notifier,
        heartbeat: Callable[[], int],
        status_text: Callable[[], str],
        *,
        status_period: float = 1.0,
        check_period: float | None = None,
    ) -> None:
        if status_period <= 0 or (check_period is not None and check_period <= 0):
            raise ValueError(
                f"status_period ({status_period}) and check_period ({check_period}) must be > 0"
            )
        self._notifier = notifier
        self._heartbeat = heartbeat
        self._status_text = status_text
        interval = notifier.watchdog_interval()
        self.interval = interval
        if check_period is None:
            check_period = min(status_period, interval / 4) if interval else status_period
        self.check_period = check_period
        self.status_period = status_period
        self.pings = 0
        self._probe_failed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> WatchdogFeeder:
        if self._thread is None and self._notifier.enabled:
            self._thread = threading.Thread(target=self._run, name="sd-watchdog", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> WatchdogFeeder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        last_ping_count = self._read_heartbeat()
        last_move = time.monotonic()
        next_status = last_move
        stall_after = self.interval / 2 if self.interval else 5.0
        while not self._stop.wait(self.check_period):
            now = time.monotonic()
            count = self._read_heartbeat()
            if count is not None and count != last_ping_count:
                last_ping_count = count
                last_move = now
                if self.interval is not None and self._notifier.watchdog():
                    self.pings += 1
            if now >= next_status:
                next_status = now + self.status_period
                self._send_status(now - last_move if now - last_move > stall_after else 0.0)

    def _read_heartbeat(self) -> int | None:
        try:
            return int(self._heartbeat())
        except Exception:
            # A broken probe must look like a stuck loop (no ping), never like a live one.
            if not self._probe_failed:
                self._probe_failed = True
                log.exception("watchdog heartbeat probe failed; no more pings")
            return None

    def _send_status(self, stalled_for: float) -> None:
        try:
            text = self._status_text()
        except Exception as exc:
            text = f"status unavailable ({exc})"
        if stalled_for > 0.0:
            text = f"LOOP STALLED {stalled_for:.1f} s; {text}"
        self._notifier.status(text)
