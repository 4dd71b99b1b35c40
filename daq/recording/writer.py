"""The recorder: a writer thread that drains the sample ring into a `.rigrun` file.

The loop never waits for the recorder: the recorder is one more `RingCursor` on the
`SampleRing`. Its thread copies the published rows into a preallocated chunk buffer and appends
it as a checksummed record once it holds `flush_rows` rows (a `write`, no fsync: what is written
survives a `kill -9` of this process), and the partial one every `fsync_interval_s` before the
fsync (what is fsynced survives a power cut). If the
loop laps it, the cursor counts the overwritten rows; the recorder logs them, writes a
`rows_lost` event where the gap is and marks the run incomplete. A full disk, an exhausted quota
or any I/O error stops the recording (loudly: `stats.error`, a log line, an event and an
incomplete trailer in the file) and never the loop.

The run file appears under its name already holding its header: `start()` writes the header to
a hidden temporary file, fsyncs it and links it to the run name (no-clobber), so a process
killed at any moment leaves either no run file or one that `read_run` opens.
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from daq.recording import format as fmt
from daq.recording.appender import Appender, BudgetExceeded, sync_directory
from daq.recording.quota import DiskGuard
from daq.ring import RingCursor, SampleRing
from daq.sample_layout import SampleLayout

log = logging.getLogger(__name__)

#: Events queued by `event()` and not yet written; beyond this they are counted and dropped.
MAX_PENDING_EVENTS = 4096
#: Temporary files of runs being created: hidden, and not `.rigrun` (never taken for a run).
TEMP_SUFFIX = ".rigrun-new"
#: How often the writer thread wakes to drain the ring (the ring must hold many times this).
POLL_S = 0.005
#: Rows buffered before they are appended to the file. A `kill -9` of the service loses the
#: rows not yet appended: fewer than this many in the buffer, plus the rows published since the
#: writer's last pass (`POLL_S`: ≈ 5 rows at 1 kHz while the writer gets the CPU). 50 rows is
#: 50 ms at 1 kHz: 20 records a second, each with its 28-byte header.
FLUSH_ROWS = 50


@dataclass(frozen=True)
class RecorderStats:
    active: bool
    path: Path | None
    rows_written: int
    lost: int
    bytes_written: int
    error: str | None
    #: True only once the run is closed (trailer written) with every row and event in it.
    complete: bool
    chunks_written: int = 0
    events_written: int = 0
    events_dropped: int = 0
    #: The most rows that were published but not yet appended to the file at the start of a
    #: writer pass: what a `kill -9` at that moment would have lost (docs/recording.md).
    max_unwritten: int = 0


class Recorder:
    def __init__(
        self,
        ring: SampleRing,
        layout: SampleLayout,
        directory: Path,
        meta: dict[str, Any],
        *,
        quota_bytes: int = 0,
        min_free_bytes: int = 0,
        profile_text: str | None = None,
        chunk_rows: int = 500,
        fsync_interval_s: float = 1.0,
        flush_rows: int | None = None,
    ) -> None:
        """`flush_rows`: rows buffered before they are appended (default `FLUSH_ROWS`, at most
        `chunk_rows`); `chunk_rows`: the most rows one record holds."""
        if layout.width != ring.width:
            raise ValueError(f"layout has {layout.width} columns but the ring {ring.width}")
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
        if flush_rows is None:
            flush_rows = min(FLUSH_ROWS, chunk_rows)
        if not 1 <= flush_rows <= chunk_rows:
            raise ValueError(f"flush_rows must be in 1…chunk_rows ({chunk_rows}), got {flush_rows}")
        if not fsync_interval_s > 0:
            raise ValueError(f"fsync_interval_s must be > 0, got {fsync_interval_s}")
        if not isinstance(meta.get("rig"), str) or not meta["rig"]:
            raise ValueError("meta must hold the rig id as a non-empty string under 'rig'")
        period = meta.get("period")
        if not isinstance(period, int | float) or not period > 0:
            raise ValueError(f"meta must hold the loop period in s (> 0) under 'period': {period}")
        self.ring = ring
        self.layout = layout
        self.directory = Path(directory)
        self.meta = dict(meta)
        self.profile_text = profile_text
        self.chunk_rows = chunk_rows
        self.fsync_interval_s = fsync_interval_s
        self.flush_rows = flush_rows
        self._guard = DiskGuard(self.directory, quota_bytes, min_free_bytes)
        self._buf = np.zeros((chunk_rows, ring.width), dtype=fmt.DTYPE)
        self._events: collections.deque[dict[str, Any]] = collections.deque()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        #: Told the run file's path when recording starts and None once its trailer is on
        #: disk (the service shares it with the loop process, which closes the file if the
        #: service dies: daq/recording/salvage.py).
        self.on_file: Any = None
        self._reset(None)

    def _reset(self, path: Path | None) -> None:
        self._path = path
        self._file: Appender | None = None
        self._cursor: RingCursor | None = None
        self._fill = 0
        self._first = 0  # ring index of the row in self._buf[0]
        self._rows = self._lost = self._chunks = 0
        self._max_unwritten = 0
        self._events_written = self._events_dropped = 0
        self._error: str | None = None
        self._closed = False  # trailer written and synced
        self._last_loss_log = -float("inf")
        self._stop.clear()
        self._events.clear()

    # -- caller side --------------------------------------------------------------------------

    def start(self, run_name: str | None = None) -> Path:
        """Create the run file and record every row published from now on; return its path.

        An explicit `run_name` that exists raises `FileExistsError`. Any other failure to
        create the file does not raise: recording stops loudly (see `stats.error`).
        """
        if self._thread is not None:
            raise RuntimeError(f"recorder already running ({self._path})")
        if run_name is not None and (
            not run_name
            or "/" in run_name
            or run_name[0] == "."
            or any(ord(c) < 32 or ord(c) == 127 for c in run_name)
        ):
            raise ValueError(
                f"run name must be a plain file name (no '/', no leading '.', no control "
                f"characters), got {run_name!r}"
            )
        cursor = RingCursor(self.ring)  # from ring.published onward
        header = fmt.encode_file_header(self._header_meta(cursor.position))
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if not self.directory.is_dir():
                raise NotADirectoryError(f"{self.directory} is not a directory")
            path, file = self._create(run_name, header)
        except FileExistsError as exc:
            if run_name is not None and exc.filename == str(self._named(run_name)):
                raise  # the caller's own name is taken: bad input, not a disk failure
            return self._not_started(run_name, exc)
        except (OSError, BudgetExceeded) as exc:
            return self._not_started(run_name, exc)
        self._reset(path)
        self._file = file
        self._cursor = cursor
        self._thread = threading.Thread(target=self._run, name="recorder", daemon=True)
        self._thread.start()
        if self.on_file is not None:
            self.on_file(str(path.resolve()))
        return path

    def _not_started(self, run_name: str | None, exc: Exception) -> Path:
        path = self._named(run_name or str(self.meta["rig"]))
        self._reset(path)
        self._error = f"cannot create the run file: {exc}"
        log.error("recording not started: %s", self._error)
        return path

    def _named(self, run_name: str) -> Path:
        return self.directory / (
            run_name if run_name.endswith(fmt.SUFFIX) else run_name + fmt.SUFFIX
        )

    def _create(self, run_name: str | None, header: bytes) -> tuple[Path, Appender]:
        """Write `header` to a temporary file, fsync it, and link it to a free run name."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        temp = self.directory / f".{os.getpid()}-{threading.get_ident()}{TEMP_SUFFIX}"
        temp.unlink(missing_ok=True)  # left by a killed process that had our pid: stale
        fd = os.open(temp, flags, 0o644)
        try:
            file = Appender(fd, self._guard)
            file.append([header])
            file.sync()
            path = self._link(temp, run_name)
        except BaseException:
            os.close(fd)
            raise
        finally:
            temp.unlink(missing_ok=True)
        sync_directory(self.directory)  # the name survives a power cut
        return path, file

    def _link(self, temp: Path, run_name: str | None) -> Path:
        if run_name is not None:
            path = self._named(run_name)
            _link_new(temp, path)
            return path
        stem = f"{self.meta['rig']}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
        for n in range(1, 1000):
            path = self.directory / f"{stem}{'' if n == 1 else f'-{n}'}{fmt.SUFFIX}"
            try:
                _link_new(temp, path)
                return path
            except FileExistsError:
                continue
        raise FileExistsError(f"no free run name for {stem} in {self.directory}")

    def _header_meta(self, first_seq: int) -> dict[str, Any]:
        now = time.time()
        return {
            **self.meta,
            "format": fmt.VERSION,
            "start_wall": now,
            "start_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            "columns": self.layout.to_dict(),
            "width": self.layout.width,
            "first_seq": first_seq,
            "chunk_rows": self.chunk_rows,
            "profile": self.profile_text,
        }

    def event(self, kind: str, **payload: Any) -> None:
        """Queue an event for the file; never blocks, does no I/O. Ignored when not recording.

        The record holds `kind`, `wall` (time.time()), `seq` (the ring index of the next row to
        be published, unless the caller passes its own) and the payload.
        """
        if self._thread is None or self._error is not None:
            return
        if len(self._events) >= MAX_PENDING_EVENTS:
            self._events_dropped += 1
            return
        self._events.append(
            {"kind": kind, "wall": time.time(), "seq": self.ring.published, **payload}
        )

    @property
    def position(self) -> int | None:
        """The next ring row the recorder will write while recording, else None (virtual time:
        the loop waits for it rather than lap it)."""
        cursor = self._cursor
        return None if cursor is None or not self.stats.active else int(cursor.position)

    def stop(self) -> RecorderStats:
        """Record every row published so far, write the trailer, close; idempotent."""
        thread = self._thread
        if thread is not None:
            self._stop.set()
            thread.join()
            self._thread = None
        return self.stats

    @property
    def stats(self) -> RecorderStats:
        with self._lock:
            return RecorderStats(
                active=self._thread is not None and self._thread.is_alive() and not self._error,
                path=self._path,
                rows_written=self._rows,
                lost=self._lost,
                bytes_written=self._file.good if self._file else 0,
                error=self._error,
                complete=self._closed and self._lossless(),
                chunks_written=self._chunks,
                events_written=self._events_written,
                events_dropped=self._events_dropped,
                max_unwritten=self._max_unwritten,
            )

    def _lossless(self) -> bool:
        return self._path is not None and not (self._lost or self._error or self._events_dropped)

    # -- writer thread ------------------------------------------------------------------------

    def _run(self) -> None:
        file = self._file
        assert file is not None
        try:
            next_sync = time.monotonic() + self.fsync_interval_s
            while True:
                stopping = self._stop.is_set()  # read first: rows published before stop() drain
                self._note_unwritten()
                self._drain()
                if self._fill >= self.flush_rows:
                    self._flush_chunk()
                self._write_events()
                now = time.monotonic()
                if stopping or now >= next_sync:
                    self._flush_chunk()
                    file.sync()
                    next_sync = now + self.fsync_interval_s
                if stopping:
                    break
                self._stop.wait(POLL_S)
            self._write_trailer()
            file.sync()
            with self._lock:
                self._closed = True
        except BudgetExceeded as exc:
            self._fail(file, str(exc))
        except Exception as exc:
            self._fail(file, f"{type(exc).__name__}: {exc}")
        finally:
            file.close()
            if self.on_file is not None:
                self.on_file(None)

    def _note_unwritten(self) -> None:
        """Rows published but not in the file yet (buffered or still in the ring)."""
        assert self._cursor is not None
        unwritten = self.ring.published - self._cursor.position + self._fill
        if unwritten > self._max_unwritten:
            with self._lock:
                self._max_unwritten = unwritten

    def _drain(self) -> None:
        cursor = self._cursor
        assert cursor is not None
        budget = self.ring.capacity  # bounded, so events and stop() are served under any load
        while budget > 0 and cursor.available() > 0:
            lost0 = cursor.lost
            n = cursor.read_into(self._buf[self._fill :])
            start = cursor.position - n
            if cursor.lost != lost0:
                self._on_lost(cursor.lost - lost0, start)
            if self._fill and start != self._first + self._fill:
                # A gap: the rows before it go out as their own chunk so that every chunk holds
                # contiguous ring indices, then the rows after it start the next one.
                fill = self._fill
                self._write_chunk(fill)
                self._buf[:n] = self._buf[fill : fill + n]
            if self._fill == 0:
                self._first = start
            self._fill += n
            budget -= max(n, 1)
            if self._fill == self.chunk_rows:
                self._flush_chunk()

    def _on_lost(self, count: int, at_seq: int) -> None:
        with self._lock:
            self._lost += count
        lost = {"kind": "rows_lost", "wall": time.time(), "seq": at_seq - count}
        lost.update(count=count, resume_seq=at_seq, total=self._lost)
        self._events.append(lost)
        now = time.monotonic()
        if now - self._last_loss_log >= 1.0:  # at most once a second, with the running total
            self._last_loss_log = now
            log.error(
                "recorder lapped by the loop: %d rows lost so far in %s (run incomplete)",
                self._lost,
                self._path,
            )

    def _flush_chunk(self) -> None:
        if self._fill:
            self._write_chunk(self._fill)

    def _write_chunk(self, n: int) -> None:
        body = self._buf[:n].reshape(-1).view(np.uint8).data
        head = fmt.encode_chunk_header(n, self.ring.width, self._first, body)
        self._write([head, body])
        with self._lock:
            self._rows += n
            self._chunks += 1
        self._first += n
        self._fill = 0

    def _write_events(self) -> None:
        while self._events:
            record = fmt.encode_blob(fmt.TAG_EVENT, self._events.popleft())
            self._write([record])
            with self._lock:
                self._events_written += 1

    def _write_trailer(self) -> None:
        with self._lock:
            complete = self._lossless()
        trailer = {
            "rows": self._rows,
            "lost": self._lost,
            "complete": complete,
            "error": self._error,
            "chunks": self._chunks,
            "events": self._events_written,
            "events_dropped": self._events_dropped,
            "next_seq": self._first + self._fill,
            "end_wall": time.time(),
        }
        self._write([fmt.encode_blob(fmt.TAG_TRAILER, trailer)], guarded=False)

    def _write(self, parts: list[Any], *, guarded: bool = True) -> None:
        assert self._file is not None
        self._file.append(parts, guarded=guarded)

    def _fail(self, file: Appender, reason: str) -> None:
        """Stop recording loudly; leave a readable file with an incomplete trailer if we can."""
        with self._lock:
            self._error = reason
        log.error("recording stopped: %s (file %s; the loop carries on)", reason, self._path)
        try:
            file.cut_back()  # drop a half-written record, if any
            stop = {"kind": "recording_stopped", "wall": time.time(), "reason": reason}
            stop["seq"] = self._first + self._fill
            self._write([fmt.encode_blob(fmt.TAG_EVENT, stop)], guarded=False)
            self._write_trailer()
            file.sync()
        except OSError as exc:
            log.error("could not finish %s after the stop: %s", self._path, exc)


def _link_new(temp: Path, path: Path) -> None:
    """Give the complete file `temp` the name `path`, which must not exist yet.

    link() creates the name atomically and never clobbers (rename() would); on a file system
    without hard links, rename() after a check (racy only against another recorder)."""
    try:
        os.link(temp, path)
        return
    except FileExistsError:
        raise FileExistsError(errno.EEXIST, "run file exists", str(path)) from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
    if path.exists():
        raise FileExistsError(errno.EEXIST, "run file exists", str(path))
    os.rename(temp, path)
