"""The control segment between the loop process and the service process (issue 15).

One `multiprocessing.shared_memory` segment, laid out once, mapped by both processes:

- `words` (int64): heartbeats both ways, the stop request, the loop's life cycle (ready,
  finished), the mailbox's sequence words and lengths (`daq/loop/shm_mailbox.py`), the event
  FIFO's indices, the virtual-time low-water mark;
- `status` (float64): what `Loop.status()` reports — state, seq, t, flags, timing counters,
  runner progress — rewritten by the loop at the end of every cycle (scalar stores, nothing
  allocated);
- `wake_hist`, `compute_hist`, `between_hist`: the loop's timing histograms themselves
  (`LoopTiming` writes into these views, the service computes percentiles from them);
- the event FIFO: fixed slots of pickled event dicts (state changes, trips, runner progress
  names), written by the loop only in the cycles that make an event, drained by the service;
- the mailbox's request and reply areas.

Each word has one writer. Ordering: the writer fills a payload, then stores its length, then
bumps the sequence word; on x86-64 (TSO) a reader that sees the new sequence word sees the
payload (see daq/ring.py). Integers that live in `status` stay below 2**53, so float64 holds
them exactly.
"""

from __future__ import annotations

import enum
import pickle
from typing import Any

import numpy as np

from daq.loop.timing import DEFAULT_BINS_US
from daq.ring import SharedSegment, shared_name


class W(enum.IntEnum):
    """Index of each int64 word."""

    SERVICE_HEARTBEAT_NS = 0  # service (its helper process, and its supervisor thread): the
    #                           time.monotonic_ns() of its last heartbeat
    LOOP_HEARTBEAT = 1  # loop: cycles completed
    STOP = 2  # service: 1 = stop the loop (valves null, backend closed, exit)
    READY = 3  # loop: 1 once the backend is open and warmed up
    FINISHED = 4  # loop: 1 = ended in order, 2 = ended by a loop error, 3 = could not start
    LOOP_PID = 5
    POSTED = 6  # mailbox: sequence number of the last request posted (service)
    CANCELLED = 7  # mailbox: last request withdrawn before the loop took it (service)
    TAKEN = 8  # mailbox: last request the loop took (loop)
    DONE = 9  # mailbox: last request the loop answered (loop)
    REQUEST_LEN = 10
    REPLY_LEN = 11
    EVENTS_WRITTEN = 12  # event FIFO: events written (loop)
    EVENTS_READ = 13  # event FIFO: events consumed (service)
    EVENTS_DROPPED = 14  # event FIFO: events lost because the FIFO was full (loop)
    LOW_WATER = 15  # virtual time: oldest row a lossless reader still needs (-1: none)
    STOP_REASON = 16  # loop: why it ended (see `StopReason`)
    GO = 17  # service: 1 = run the first cycle (the loop waits for it after READY)
    RUN_PATH_LEN = 18  # service: bytes of the run file's path in `run_path` (0: not recording)
    LOOP_STALLED_NS = 19  # heartbeat helper: when it saw the loop stop cycling or die (0: not)
    N = 32


class StopReason(enum.IntEnum):
    NONE = 0
    REQUESTED = 1  # the service asked (shutdown)
    DURATION = 2  # --duration reached
    SIGNAL = 3  # SIGTERM to the loop process itself (systemd stops the whole cgroup)
    SERVICE_LOST = 4  # the service's heartbeat went stale or its process is gone
    LOOP_ERROR = 5  # an exception inside a cycle


class S(enum.IntEnum):
    """Index of each float64 status field."""

    SEQ = 0
    T = 1
    STATE = 2
    FLAGS = 3
    CLAMPED = 4
    FAULT_CODE = 5
    STARTED_NS = 6
    STOPPED_NS = 7
    CYCLES = 8
    OVERRUNS = 9
    CONSECUTIVE_OVERRUNS = 10
    MAX_CONSECUTIVE_OVERRUNS = 11
    SKIPPED = 12
    WAKE_MAX_NS = 13
    COMPUTE_MAX_NS = 14
    RUNNER_ACTIVE = 15  # 1 while a runner is active
    # Runner progress, NaN when the runner does not have the attribute.
    SEGMENT_INDEX = 16
    ELAPSED = 17
    TOTAL_DURATION = 18
    TIME_IN_SEGMENT = 19
    SEGMENT_DURATION = 20
    SEGMENT_REPEATS = 21
    # The station (daq.loop.station): hydraulic power level, 1 while a jog is active, the
    # shunt relays closed (a bit per daq.station.shunt.shunt_channels entry).
    POWER = 30
    JOGGING = 31
    SHUNT = 32
    BETWEEN_MAX_NS = 33  # the backend's longest between-cycles work (the simulated plant)
    N = 34


#: Runner attributes mirrored into `status` each cycle (those that are numbers).
RUNNER_FIELDS = (
    ("segment_index", S.SEGMENT_INDEX),
    ("elapsed", S.ELAPSED),
    ("total_duration", S.TOTAL_DURATION),
    ("time_in_segment", S.TIME_IN_SEGMENT),
    ("segment_duration", S.SEGMENT_DURATION),
    ("segment_repeats", S.SEGMENT_REPEATS),
)

EVENT_SLOTS = 512
EVENT_SLOT_BYTES = 2048
#: Largest request (a pickled experiment runner with its trajectories) and reply.
REQUEST_BYTES = 4 << 20
REPLY_BYTES = 64 << 10
#: The path of the run file being recorded (the loop process closes it if the service dies).
RUN_PATH_BYTES = 4096

_ALIGN = 64


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class LoopLink:
    """Views over the control segment; `create()` in the service, `attach()` in the loop."""

    def __init__(self, shm: SharedSegment, bins_us: int) -> None:
        self.shm = shm
        self.name = shm.name
        self.bins_us = bins_us
        buf = shm.buf
        off = 0

        def take(nbytes: int) -> int:
            nonlocal off
            start = off
            off += _aligned(nbytes)
            return start

        self.words = np.ndarray((W.N,), np.int64, buf, take(8 * W.N))
        self.status = np.ndarray((S.N,), np.float64, buf, take(8 * S.N))
        self.wake_hist = np.ndarray((bins_us + 1,), np.int64, buf, take(8 * (bins_us + 1)))
        self.compute_hist = np.ndarray((bins_us + 1,), np.int64, buf, take(8 * (bins_us + 1)))
        self.between_hist = np.ndarray((bins_us + 1,), np.int64, buf, take(8 * (bins_us + 1)))
        self.event_lens = np.ndarray((EVENT_SLOTS,), np.int64, buf, take(8 * EVENT_SLOTS))
        self.events = np.ndarray(
            (EVENT_SLOTS, EVENT_SLOT_BYTES), np.uint8, buf, take(EVENT_SLOTS * EVENT_SLOT_BYTES)
        )
        self.request = np.ndarray((REQUEST_BYTES,), np.uint8, buf, take(REQUEST_BYTES))
        self.reply = np.ndarray((REPLY_BYTES,), np.uint8, buf, take(REPLY_BYTES))
        self.run_path_buf = np.ndarray((RUN_PATH_BYTES,), np.uint8, buf, take(RUN_PATH_BYTES))
        self.size = off

    @staticmethod
    def segment_bytes(bins_us: int) -> int:
        return sum(
            _aligned(n)
            for n in (
                8 * W.N,
                8 * S.N,
                8 * (bins_us + 1),
                8 * (bins_us + 1),
                8 * (bins_us + 1),
                8 * EVENT_SLOTS,
                EVENT_SLOTS * EVENT_SLOT_BYTES,
                REQUEST_BYTES,
                REPLY_BYTES,
                RUN_PATH_BYTES,
            )
        )

    @classmethod
    def create(cls, bins_us: int = DEFAULT_BINS_US) -> LoopLink:
        shm = SharedSegment(name=shared_name("link"), create=True, size=cls.segment_bytes(bins_us))
        link = cls(shm, bins_us)
        link.words.fill(0)
        link.words[W.LOW_WATER] = -1
        link.status.fill(np.nan)
        link.status[: S.RUNNER_ACTIVE + 1] = 0.0
        link.wake_hist.fill(0)
        link.compute_hist.fill(0)
        link.between_hist.fill(0)
        return link

    @classmethod
    def attach(cls, name: str, bins_us: int = DEFAULT_BINS_US) -> LoopLink:
        return cls(SharedSegment(name=name), bins_us)

    def unlink(self) -> None:
        """Remove the segment's name (the service, at shutdown); the mapping stays valid."""
        self.shm.unlink_quietly()

    def set_run_path(self, path: str | None) -> None:
        """The service: the run file now being recorded (None: none, or closed with its
        trailer). Length last, so a reader that sees it sees the bytes."""
        self.words[W.RUN_PATH_LEN] = 0
        if path is None:
            return
        data = path.encode()
        if len(data) > RUN_PATH_BYTES:
            return  # cannot happen for a real path (PATH_MAX); then nobody can close it for us
        self.run_path_buf[: len(data)] = np.frombuffer(data, np.uint8)
        self.words[W.RUN_PATH_LEN] = len(data)

    def run_path(self) -> str | None:
        n = int(self.words[W.RUN_PATH_LEN])
        return self.run_path_buf[:n].tobytes().decode() if n > 0 else None


class EventWriter:
    """Loop side of the event FIFO: `append(dict)` like the in-thread loop's deque.

    Called only in the cycles that make an event (a state change, a trip, a new segment), so
    pickling here is a transition's cost, never the steady state's. A full FIFO (the service is
    not draining: stalled or gone) drops the event and counts it, as a bounded deque would."""

    def __init__(self, link: LoopLink) -> None:
        self.link = link
        self._words = link.words

    def append(self, event: dict[str, Any]) -> None:
        words = self._words
        written = int(words[W.EVENTS_WRITTEN])
        if written - int(words[W.EVENTS_READ]) >= EVENT_SLOTS:
            words[W.EVENTS_DROPPED] += 1
            return
        data = pickle.dumps(event, protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) > EVENT_SLOT_BYTES:  # keep what identifies it; the rest cannot fit
            short = {k: event[k] for k in ("kind", "seq", "t") if k in event}
            data = pickle.dumps({**short, "truncated": True}, protocol=pickle.HIGHEST_PROTOCOL)
        slot = written % EVENT_SLOTS
        self.link.events[slot, : len(data)] = np.frombuffer(data, np.uint8)
        self.link.event_lens[slot] = len(data)
        words[W.EVENTS_WRITTEN] = written + 1


class EventReader:
    """Service side of the event FIFO (one reader; the caller serialises)."""

    def __init__(self, link: LoopLink) -> None:
        self.link = link

    def drain(self) -> list[dict[str, Any]]:
        words = self.link.words
        read, written = int(words[W.EVENTS_READ]), int(words[W.EVENTS_WRITTEN])
        out = []
        while read < written:
            slot = read % EVENT_SLOTS
            n = int(self.link.event_lens[slot])
            out.append(pickle.loads(self.link.events[slot, :n].tobytes()))
            read += 1
            words[W.EVENTS_READ] = read
        return out
