"""Per-connection bounds on what telemetry subscribers send: (un)subscription rate, topics held,
subscription size; a connection past a bound is closed, and memory goes back after a flood.

Why this is needed. libzmq's XPUB reads every (un)subscription from its peers' pipes into one
internal queue that has no bound (`xpub_t::_pending_data`) whenever the application touches the
socket, and keeps each until the application `recv`s it. A local client sending
subscribe/unsubscribe in a tight loop fills that queue at I/O speed (tens of MB/s) while the
publisher, whose job is sending, reads a bounded number per wake-up. The bounds that hold it:

- `rcvhwm` of the XPUB (`SUBSCRIPTION_RCVHWM`): libzmq stops reading a connection whose pipe
  holds that many unread messages, so per command round of the socket at most that many more
  enter the internal queue;
- `maxmsgsize` (`MAX_SUBSCRIPTION_BYTES`): a larger subscription (a topic of megabytes would be
  a megabyte-deep trie in libzmq) makes libzmq drop the connection before queueing it;
- the publisher drains the queue with a budget per wake-up (`SUBSCRIPTIONS_PER_WAKE`, so a flood
  cannot keep it from sending) and counts per connection (`ZMQ_SRCFD`, the connection's descriptor):
  more than `SUBSCRIPTION_FLOOD_PER_S` messages in one second, or more than
  `MAX_TOPICS_PER_CONNECTION` topics held at once, and the connection is cut off:
  `shutdown(SHUT_RDWR)` under libzmq, whose engine then sees end-of-file, closes the descriptor
  and drops the peer with its subscriptions;
- a socket monitor tells which connection a descriptor number belongs to: `ACCEPTED(fd)` starts a
  new connection on that number (a flooder that reconnects gets the same number back at once, and
  is judged afresh, so it is cut off again — without this, its second connection went unjudged
  and flooded for ever), and `DISCONNECTED(fd)` confirms that a cut-off
  connection is really gone (`flooders_closed`). Messages still queued from a cut-off connection
  are discarded unread until its number is accepted again. A cut-off connection that still
  sends after a second is shut down again, but only if the descriptor still leads to the peer
  address it had when it was cut: libzmq may already have closed it and given the number to the
  flooder's next connection (or anyone's) before the monitor says so, and shutting that one down
  unjudged would close a connection nobody counted;
- once a flood's backlog is drained, `malloc_trim(0)` gives the freed heap back to the system
  (glibc keeps freed small blocks in its arenas otherwise, so RSS would stay at the peak).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import zmq
from zmq.utils.monitor import parse_monitor_message

log = logging.getLogger(__name__)

#: (Un)subscription messages libzmq queues per connection before it stops reading that connection
#: (TCP back-pressure then holds the rest in the sender's kernel buffers, not in this process).
SUBSCRIPTION_RCVHWM = 64
#: Largest (un)subscription message accepted (1 flag byte + topic); libzmq drops a connection
#: that sends a larger one. The topics are a few bytes (`samples`, `meta`, …); the CURVE
#: handshake (INITIATE: a few hundred bytes) passes under the same limit.
MAX_SUBSCRIPTION_BYTES = 1024
#: Subscription messages handled per publisher wake-up: more than can enter libzmq's queue per
#: wake-up (its command rounds × `SUBSCRIPTION_RCVHWM`), so the queue cannot grow across wake-ups;
#: still bounded, so a flood cannot keep the publisher from sending.
SUBSCRIPTIONS_PER_WAKE = 4096
#: A connection that sends more (un)subscriptions than this within one second is cut off: an
#: honest client subscribes to a few topics when it connects.
SUBSCRIPTION_FLOOD_PER_S = 200
#: A connection holding more distinct topics than this at once is cut off (the service publishes
#: five topics; each subscription is a path in libzmq's subscription trie).
MAX_TOPICS_PER_CONNECTION = 64
#: Shortest time between two log lines about cut-off connections.
LOG_INTERVAL_S = 10.0
#: Shortest time between two `malloc_trim` calls.
TRIM_INTERVAL_S = 1.0

_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED


def _peer(sock: socket.socket) -> object:
    """The connection's peer address, or None when the descriptor has none (closed, not
    connected)."""
    try:
        return sock.getpeername()
    except OSError:
        return None


def _load_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        fn = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


_malloc_trim = _load_malloc_trim()


@dataclass
class _Connection:
    """What one connection (one descriptor number, since its last ACCEPTED) has sent."""

    window_count: int = 0
    topics: set[bytes] = field(default_factory=set)
    cut: bool = False
    cut_at: float = 0.0
    #: libzmq reported it closed (after a cut: its queued messages are still discarded).
    closed: bool = False
    #: The peer address when it was cut (None: not cut, or not a socket with a peer).
    peer: object = None


@dataclass
class SubscriptionOutcome:
    """What one drain found: whether a subscription to `meta` arrived (answer with meta)."""

    meta_wanted: bool = False
    handled: int = 0


class SubscriptionGuard:
    """Reads an XPUB's (un)subscriptions with per-connection bounds. One thread (the
    publisher's) calls `configure`, `drain` and `close`."""

    def __init__(self, meta_topic: bytes) -> None:
        self.meta_topic = meta_topic
        self._monitor: zmq.Socket | None = None
        self._conns: dict[int, _Connection] = {}
        self._window_end = 0.0
        self._trim_due = False
        self._last_trim = 0.0
        self._last_log = -float("inf")
        #: Connections cut off for flooding or holding too many topics.
        self.cut_off = 0
        #: Cut-off connections libzmq has since closed (the monitor's DISCONNECTED).
        self.closed = 0
        #: Messages discarded unread because they came from a cut-off connection.
        self.discarded = 0
        #: `malloc_trim` calls after a flood.
        self.trims = 0

    @staticmethod
    def configure(sock: zmq.Socket) -> None:
        """Socket options that bound what libzmq holds per connection (before bind)."""
        sock.rcvhwm = SUBSCRIPTION_RCVHWM
        sock.maxmsgsize = MAX_SUBSCRIPTION_BYTES

    def attach(self, sock: zmq.Socket) -> None:
        """Start the socket monitor (after bind, on the thread that will drain)."""
        self._monitor = sock.get_monitor_socket(_EVENTS)

    def close(self, sock: zmq.Socket) -> None:
        if self._monitor is not None:
            try:
                sock.disable_monitor()
            except zmq.ZMQError:
                pass
            self._monitor.close(linger=0)
            self._monitor = None

    # ------------------------------------------------------------------ per wake-up

    def drain(self, sock: zmq.Socket) -> SubscriptionOutcome:
        now = time.monotonic()
        if now >= self._window_end:
            self._window_end = now + 1.0
            for conn in self._conns.values():
                conn.window_count = 0
        self._read_monitor()
        out = SubscriptionOutcome()
        for _ in range(SUBSCRIPTIONS_PER_WAKE):
            try:
                frame = sock.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                self._maybe_trim(now)
                return out
            out.handled += 1
            self._handle(frame, now, out)
        return out

    def _handle(self, frame: zmq.Frame, now: float, out: SubscriptionOutcome) -> None:
        # The connection it came on (libzmq's ZMQ_SRCFD; −1 on inproc, which cannot flood from
        # outside the process, and for unsubscriptions libzmq makes itself when a peer leaves).
        try:
            fd = frame.get(zmq.SRCFD)
        except zmq.ZMQError:
            fd = -1
        msg = frame.bytes
        if fd >= 0:
            conn = self._conns.get(fd)
            if conn is None:
                conn = self._conns[fd] = _Connection()
            if conn.cut:
                self.discarded += 1
                if not conn.closed and now - conn.cut_at >= 1.0:  # not closed yet: again
                    self._cut(fd, conn, now, "still sending after being cut off")
                return
            conn.window_count += 1
            if msg[:1] == b"\x01":
                conn.topics.add(msg[1:])
            elif msg[:1] == b"\x00":
                conn.topics.discard(msg[1:])
            if conn.window_count > SUBSCRIPTION_FLOOD_PER_S:
                self._cut(fd, conn, now, f"> {SUBSCRIPTION_FLOOD_PER_S} (un)subscriptions in 1 s")
                return
            if len(conn.topics) > MAX_TOPICS_PER_CONNECTION:
                self._cut(fd, conn, now, f"> {MAX_TOPICS_PER_CONNECTION} topics at once")
                return
        if msg[:1] == b"\x01" and self.meta_topic.startswith(msg[1:]):
            out.meta_wanted = True

    def _cut(self, fd: int, conn: _Connection, now: float, why: str) -> None:
        """Shut the connection down under libzmq, which then closes it and drops the peer (and
        its subscriptions); the descriptor stays libzmq's to close."""
        if not conn.cut:
            self.cut_off += 1
            if now - self._last_log >= LOG_INTERVAL_S:  # a reconnecting flooder: not every time
                self._last_log = now
                log.warning(
                    "telemetry: a subscriber sent %s; its connection is closed (%d cut off so far)",
                    why,
                    self.cut_off,
                )
        first = not conn.cut
        conn.cut, conn.cut_at = True, now
        conn.topics.clear()
        self._trim_due = True
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            return
        try:
            peer = _peer(sock)
            if first:
                conn.peer = peer
            elif peer is None or peer != conn.peer:
                # The number now leads elsewhere: the cut connection is gone (its DISCONNECTED is
                # on its way) and this is a new one, to be judged once its ACCEPTED is read.
                return
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            sock.detach()

    def _read_monitor(self) -> None:
        mon = self._monitor
        if mon is None:
            return
        while True:
            try:
                frames = mon.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                event = parse_monitor_message(frames)
            except RuntimeError:
                continue
            fd = int(event["value"])
            if event["event"] == zmq.EVENT_ACCEPTED:
                # A new connection on this number: whatever the old one did is not its doing.
                self._conns[fd] = _Connection()
            elif event["event"] in (zmq.EVENT_DISCONNECTED, zmq.EVENT_CLOSED):
                conn = self._conns.get(fd)
                if conn is None:
                    continue
                if not conn.cut:
                    del self._conns[fd]
                elif not conn.closed:
                    conn.closed = True
                    self.closed += 1

    def _maybe_trim(self, now: float) -> None:
        """After a flood's backlog is gone, hand the freed heap back (glibc keeps it otherwise)."""
        if not self._trim_due or now - self._last_trim < TRIM_INTERVAL_S:
            return
        self._trim_due = False
        self._last_trim = now
        if _malloc_trim is not None:
            _malloc_trim(0)
            self.trims += 1
