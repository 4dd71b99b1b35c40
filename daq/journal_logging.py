"""Logging set-up for the rig's entry points (`rig-daq`, `rig-estimator`): levels and the rig id
on every record, and journald priorities when stderr is the journal.

Library modules only call `logging.getLogger(__name__)`; this module is the one place that
installs a handler, and only entry points call it.

Under systemd, stderr is a stream to journald and `$JOURNAL_STREAM` holds its `device:inode`.
journald reads a leading `<N>` (syslog priority, `sd-daemon(3)`) on each *line*, so every line of
a multi-line record (a traceback) carries the prefix; otherwise the traceback's lines would be
logged at the unit's default priority and `journalctl -p err` would show only its first line.
Timestamps are left to journald there. Anywhere else the format is plain text with a timestamp.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import TextIO

#: syslog priorities (RFC 5424) for Python levels; anything in between rounds down in severity.
_PRIORITIES = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))
_DEBUG_PRIORITY = 7

JOURNAL_FORMAT = "%(levelname)s [%(rig)s] %(name)s: %(message)s"
PLAIN_FORMAT = "%(asctime)s %(levelname)-7s [%(rig)s] %(name)s: %(message)s"


def syslog_priority(levelno: int) -> int:
    for level, prio in _PRIORITIES:
        if levelno >= level:
            return prio
    return _DEBUG_PRIORITY


def stderr_is_journal(
    environ: Mapping[str, str] | None = None, stream: TextIO | None = None
) -> bool:
    """True when `stream` (default stderr) is the journald stream systemd connected us to: the
    `JOURNAL_STREAM` variable is inherited by children whose stderr may be redirected, so the
    `device:inode` it names must match the stream's file."""
    env = os.environ if environ is None else environ
    value = env.get("JOURNAL_STREAM", "")
    if not value:
        return False
    stream = sys.stderr if stream is None else stream
    try:
        dev, ino = (int(x) for x in value.split(":", 1))
        st = os.fstat(stream.fileno())
    except (ValueError, OSError, AttributeError):
        return False
    return st.st_dev == dev and st.st_ino == ino


class RigIdFilter(logging.Filter):
    """Stamps `record.rig` on every record going through the handler. The rig id is known only
    once the profile is loaded, so it can be set later (`set_rig_id`)."""

    def __init__(self, rig_id: str = "-") -> None:
        super().__init__()
        self.rig_id = rig_id

    def filter(self, record: logging.LogRecord) -> bool:
        record.rig = self.rig_id
        return True


class JournalFormatter(logging.Formatter):
    """`<N>` syslog priority in front of every line of the formatted record."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        prefix = f"<{syslog_priority(record.levelno)}>"
        return "\n".join(prefix + line for line in text.split("\n"))


_handler: logging.Handler | None = None
_filter: RigIdFilter | None = None


def configure_logging(
    verbosity: int = 0,
    rig_id: str = "-",
    *,
    stream: TextIO | None = None,
    journal: bool | None = None,
) -> logging.Handler:
    """Install the one root handler: INFO by default, DEBUG with `verbosity ≥ 1`, WARNING with
    `verbosity < 0`. `journal=None` detects journald on `stream` (default stderr). Calling it
    again replaces the handler this module installed (and nothing else)."""
    global _handler, _filter
    stream = sys.stderr if stream is None else stream
    if journal is None:
        journal = stderr_is_journal(stream=stream)
    handler = logging.StreamHandler(stream)
    _filter = RigIdFilter(rig_id)
    handler.addFilter(_filter)
    if journal:
        handler.setFormatter(JournalFormatter(JOURNAL_FORMAT))
    else:
        handler.setFormatter(logging.Formatter(PLAIN_FORMAT))
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    root.addHandler(handler)
    root.setLevel(
        logging.DEBUG if verbosity > 0 else logging.WARNING if verbosity < 0 else logging.INFO
    )
    _handler = handler
    return handler


def set_rig_id(rig_id: str) -> None:
    """Name the rig in every later record (after the profile has been loaded)."""
    if _filter is not None:
        _filter.rig_id = rig_id
