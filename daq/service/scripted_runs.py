"""`rig-daq --run FILE …` (virtual time only): once the loop runs and is armed, run each
experiment file in order through the command handler — as `rigctl run FILE --wait` does, with
its limit check and its refusals — and end the service when the last one is over. A simulated
machine's experiments from one command, with no client (docs/operations.md).

A real rig's experiments are its operator's (`rigctl run`): the option is refused without
`--virtual-time`, as `--arm` is.
"""

from __future__ import annotations

import threading
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from daq.commands.errors import CommandError

#: rig-daq's exit code when an experiment of `--run` was refused or the rig faulted in it.
EXIT_RUN_FAILED = 4
#: How often the runs look at the service's state (its own thread, not the loop's).
POLL_S = 0.02


def load_experiments(paths: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    """(path, experiment table) of every file, read before the service starts so that a
    missing or malformed file stops it at once; raises ValueError naming the file."""
    out = []
    for p in paths:
        try:
            out.append((p, tomllib.loads(Path(p).read_text(encoding="utf-8"))))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"--run {p}: {exc}") from None
    return out


def _status(api: Any) -> dict[str, Any]:
    return api.handle("status", {}, None)


def run_in_order(
    api: Any, finished: threading.Event, experiments: Sequence[tuple[str, dict[str, Any]]],
    stop: threading.Event,
) -> str | None:  # fmt: skip
    """Run each experiment and wait until the service is ARMED again. None when every one
    ended fault-free; else why not (a refusal, a fault, the loop ending, a stop signal)."""
    for path, experiment in experiments:
        try:
            reply = api.handle("run", {"experiment": experiment}, None)
        except CommandError as exc:
            return f"{path}: refused: {exc}"
        # The cycle that took the run: a state read from a cycle at or before it may still say
        # ARMED (the reply can come before that cycle's status is written).
        taken = reply.get("seq")
        while reply.get("checking"):  # a long limit check: the run starts if it passes
            status = _status(api)
            check = status.get("check") or {}
            if check.get("state") == "started":
                taken = status.get("seq")
                break
            if check.get("state") != "checking":
                return f"{path}: refused after its limit check: {check.get('message')}"
            if stop.wait(POLL_S):
                return "stopped by a signal"
        while True:
            status = _status(api)
            if status.get("fault"):
                return f"{path}: the rig faulted: {status['fault']}"
            if status.get("state") == "ARMED" and (taken is None or status["seq"] > taken):
                break
            if finished.is_set():
                return f"{path}: the loop ended first (--duration) in state {status.get('state')}"
            if stop.wait(POLL_S):
                return "stopped by a signal"
    return None


def start(
    api: Any, finished: threading.Event, experiments: Sequence[tuple[str, dict[str, Any]]],
    stop: threading.Event,
) -> tuple[threading.Thread, list[str | None]]:  # fmt: skip
    """`run_in_order` on a thread that sets `stop` when it ends; the list gets its outcome."""
    outcome: list[str | None] = []

    def body() -> None:
        try:
            outcome.append(run_in_order(api, finished, experiments, stop))
        except Exception as exc:
            outcome.append(f"--run failed: {exc!r}")
        stop.set()

    thread = threading.Thread(target=body, name="scripted-runs", daemon=True)
    thread.start()
    return thread, outcome
