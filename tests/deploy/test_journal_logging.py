from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from daq import journal_logging as jl


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    if jl._handler is not None:
        root.removeHandler(jl._handler)
        jl._handler = None
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize(
    ("level", "prio"),
    [
        (logging.CRITICAL, 2),
        (logging.ERROR, 3),
        (logging.WARNING, 4),
        (logging.INFO, 6),
        (logging.DEBUG, 7),
        (25, 4 + 2),
    ],  # between INFO and WARNING rounds down to info
)
def test_syslog_priority(level: int, prio: int) -> None:
    assert jl.syslog_priority(level) == prio


def test_journal_format_prefixes_every_line_with_priority_and_names_the_rig() -> None:
    out = io.StringIO()
    jl.configure_logging(0, "sim2dof", stream=out, journal=True)
    log = logging.getLogger("daq.loop")
    log.warning("overruns: %d", 3)
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("backend read failed")
    lines = out.getvalue().splitlines()
    assert lines[0] == "<4>WARNING [sim2dof] daq.loop: overruns: 3"
    assert lines[1] == "<3>ERROR [sim2dof] daq.loop: backend read failed"
    assert len(lines) > 3  # the traceback
    assert all(line.startswith("<3>") for line in lines[1:])
    assert lines[-1] == "<3>ValueError: boom"


def test_plain_format_has_time_level_and_rig_id_set_after_profile_load() -> None:
    out = io.StringIO()
    jl.configure_logging(0, stream=out, journal=False)
    logging.getLogger("daq.service").info("starting")
    jl.set_rig_id("rigA")
    logging.getLogger("daq.service").debug("hidden at verbosity 0")
    logging.getLogger("daq.service").info("profile loaded")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert not lines[0].startswith("<")
    assert lines[0].endswith("INFO    [-] daq.service: starting")
    assert lines[1].endswith("INFO    [rigA] daq.service: profile loaded")


def test_verbosity_and_reconfiguration_replace_only_our_handler() -> None:
    root = logging.getLogger()
    before = len(root.handlers)
    jl.configure_logging(1, stream=io.StringIO(), journal=False)
    assert root.level == logging.DEBUG
    out = io.StringIO()
    jl.configure_logging(-1, "r", stream=out, journal=False)
    assert len(root.handlers) == before + 1
    assert root.level == logging.WARNING
    logging.getLogger("x").info("quiet")
    logging.getLogger("x").warning("loud")
    assert "quiet" not in out.getvalue() and "loud" in out.getvalue()


def test_journal_stream_detection_matches_device_and_inode(tmp_path: Path) -> None:
    with open(tmp_path / "a", "w") as a, open(tmp_path / "b", "w") as b:
        st = os.fstat(a.fileno())
        env = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        assert jl.stderr_is_journal(env, a)
        # Inherited JOURNAL_STREAM but stderr redirected elsewhere: not the journal.
        assert not jl.stderr_is_journal(env, b)
        assert not jl.stderr_is_journal({}, a)
        assert not jl.stderr_is_journal({"JOURNAL_STREAM": "garbage"}, a)
        assert not jl.stderr_is_journal(env, io.StringIO())  # no file descriptor
