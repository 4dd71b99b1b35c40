"""`rig-bridge --replay RUN.rigrun`: a recorded run served like the live rig.

The same `Station` as live (same topics, schemas and message bodies): the rows the live bridge
would have sent (every k-th loop cycle for `--rate`, by `seq`, so a replay sends the very rows a
live view of the run showed), the recorded events on `/rig/events` and `/rig/log` (shaped as the
telemetry's: `v`, `rig`, no recorder-only `wall`), recorded status and estimates where the run
holds them, and the arm. Log times are those of the MCAP export (mcap_export.RunClock): the
recording's wall-clock start + each row's loop time.

Playback is the protocol's own (capability `playbackControl`, Foxglove's playback bar): play,
pause, speed (any > 0; `--speed` sets the start) and seek to any time of the run. It starts
when the first client subscribes (or asks to play), so nothing of the run goes out before anyone
listens. The server's time follows the playback position.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from daq.bridge.auth import DEFAULT_ORIGINS, TokenStore
from daq.bridge.channels import decimation_step
from daq.bridge.mcap_export import play, run_arm, run_items, run_roles
from daq.bridge.station import Station
from daq.bridge.wsserver import ENDED, PAUSED, PLAYING, FoxgloveServer, PlaybackHandler
from daq.recording.reader import read_run

log = logging.getLogger(__name__)

#: Seconds between playback steps (messages due in between go out together).
TICK_S = 0.01


class Replay(PlaybackHandler):
    def __init__(
        self,
        path: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 8765,
        rate_hz: float = 100.0,
        speed: float = 1.0,
        tokens: TokenStore | None = None,
        origins: tuple[str, ...] = DEFAULT_ORIGINS,
        name: str = "hydrig replay",
        ssl: Any = None,
    ) -> None:
        if not speed > 0:
            raise ValueError(f"--speed must be > 0, got {speed:g}")
        run = read_run(path)
        if not len(run.data):
            raise ValueError(f"{path}: the run holds no rows")
        self.recording = run
        rig = str(run.meta.get("rig", ""))
        step = decimation_step(float(run.meta.get("period", 1e-3)), rate_hz)
        self.items = run_items(run, step)
        self.stamps = np.array([x[0] for x in self.items], dtype=np.int64)
        self.time_range = (int(self.stamps[0]), int(self.stamps[-1]))
        self.server = FoxgloveServer(name=name, host=host, port=port, tokens=tokens,
                                     origins=origins, playback=self, ssl=ssl)  # fmt: skip
        self.port = self.server.port
        self.station = Station(self.server, rig)
        self.station.set_layout(run.meta["columns"], run_roles(run), run_arm(run))
        self.station.service_back(self.time_range[0])
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.speed = speed
        self.playing = False  # until the first subscription (or a play request)
        self._started = False
        self.pos = 0  # next item to send
        self.current = self.time_range[0]  # playback time, ns
        self._anchor = time.monotonic()
        self.sent = 0

    # ------------------------------------------------------------------ control

    def control(self, play: bool, speed: float, seek_ns: int | None, request_id: str) -> None:
        with self._lock:
            self._advance_clock()
            self._started = True
            if speed > 0:
                self.speed = float(speed)
            self.playing = play
            if seek_ns is not None:
                lo, hi = self.time_range
                self.current = min(max(int(seek_ns), lo), hi)
                self.pos = int(np.searchsorted(self.stamps, self.current, side="left"))
            self._state(seek_ns is not None, request_id)

    def subscribed(self) -> None:
        """Play from the start once the first client subscribes: nothing of the run goes out
        before anyone listens."""
        with self._lock:
            if not self._started:
                self._started = self.playing = True
                self._anchor = time.monotonic()
                self._state(False)

    def _advance_clock(self) -> None:
        now = time.monotonic()
        if self.playing:
            step = round((now - self._anchor) * self.speed * 1e9)
            self.current = min(self.current + step, self.time_range[1])
        self._anchor = now

    def _state(self, did_seek: bool, request_id: str = "") -> None:
        ended = self.pos >= len(self.items)
        status = ENDED if ended else PLAYING if self.playing else PAUSED
        self.server.broadcast_playback_state(status, self.current, self.speed, did_seek,
                                             request_id)  # fmt: skip

    # ------------------------------------------------------------------ playing

    def step(self) -> int:
        """Send everything due up to the playback time; the number of items sent."""
        with self._lock:
            self._advance_clock()
            n = 0
            while self.pos < len(self.items) and self.items[self.pos][0] <= self.current:
                play(self.station, self.items[self.pos])
                self.pos += 1
                n += 1
            if n:
                self.server.broadcast_time(self.current)
                if self.pos >= len(self.items):
                    self.playing = False
                    self._state(False)
            self.sent += n
            return n

    def run(self) -> None:
        self._state(False)
        while not self._stop.wait(TICK_S):
            self.step()

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self.server.stop()
