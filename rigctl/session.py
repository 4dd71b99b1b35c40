"""Start the rig service and the estimator as separate processes, as on the rig PC, on free
loopback ports, for the end-to-end identification (`rigctl identify`) and its tests."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import msgpack
import zmq

from daq.commands import CommandClient, ProtocolError, ServiceUnreachable

log = logging.getLogger(__name__)

#: How long a starting rig-daq or rig-estimator may take to answer (s): a deadline for a hung
#: process only (a dead one is seen at once), long enough for a cold kernel compile on a
#: loaded machine (248 s measured at a load average of 9.5 on 2 cores).
START_TIMEOUT_S = 600.0
ROOT = Path(__file__).resolve().parents[1]


#: How long one command may wait for its reply (s). The service answers within a cycle or two
#: when well; the margin is for a loaded machine, where a 10-s limit was once exceeded during
#: the tracking check after an identification.
COMMAND_TIMEOUT_S = 30.0


class SessionError(RuntimeError):
    """A process did not start, died, or the service refused a step (message says which)."""


class SessionUnreachable(SessionError):
    """The service sent no (or no valid) reply within the command's time limit."""


def free_endpoint() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


class RigSession:
    """`rig-daq` + `rig-estimator` subprocesses; commands over the service's own socket.

    Nothing here reaches into either process: the session sees what any client sees.
    """

    def __init__(self, profile: Path, out: Path, *, virtual_time: bool, estimator: bool = True):
        self.profile = profile
        self.out = out
        self.virtual_time = virtual_time
        self.with_estimator = estimator
        self.commands = free_endpoint()
        self.telemetry = free_endpoint()
        self.estimates = free_endpoint()
        self.param_file = out / "online-params.toml"
        self.daq: subprocess.Popen[bytes] | None = None
        self.estimator: subprocess.Popen[bytes] | None = None
        self._ctx = zmq.Context()
        self._est_sub: zmq.Socket[bytes] | None = None
        self.last_estimate: dict[str, Any] | None = None
        self._logs: list[Any] = []

    # ------------------------------------------------------------------ processes

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        # The profile's directory too: a user model kept beside the profile ("mymodels:models")
        # is found by rig-estimator whatever the working directory (docs/estimator.md).
        here = str(self.profile.resolve().parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), here, env.get("PYTHONPATH")]))
        logf = open(self.out / f"{name}.log", "wb")
        self._logs.append(logf)
        return subprocess.Popen(
            [sys.executable, "-m", *args], stdout=logf, stderr=subprocess.STDOUT, env=env
        )

    def start(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        daq_args = [
            "daq.service",
            "--profile",
            str(self.profile),
            "--run-dir",
            str(self.out),
            "--telemetry",
            self.telemetry,
            "--commands",
            self.commands,
        ]
        if self.virtual_time:
            # As fast as the CPU allows: real-time priority would only starve the estimator.
            daq_args += ["--virtual-time", "--rt-priority", "0", "--no-mlock"]
        self.daq = self._spawn("rig-daq", daq_args)
        self._wait_service()
        if self.with_estimator:
            self.estimator = self._spawn(
                "rig-estimator",
                [
                    "estimator.service",
                    "--profile",
                    str(self.profile),
                    "--telemetry",
                    self.telemetry,
                    "--publish",
                    self.estimates,
                    "--param-file",
                    str(self.param_file),
                    "--no-resume",
                ],
            )
            sub = self._ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.LINGER, 0)
            sub.subscribe(b"estimate")
            sub.connect(self.estimates)
            self._est_sub = sub
            # The estimator publishes only once it has the telemetry layout: then it listens.
            self.wait_estimate(
                lambda e: True, timeout=START_TIMEOUT_S, what="the estimator to start"
            )

    def _check_alive(self) -> None:
        for name, p in (("rig-daq", self.daq), ("rig-estimator", self.estimator)):
            if p is not None and p.poll() is not None:
                log_path = self.out / f"{name}.log"
                tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
                raise SessionError(f"{name} exited with code {p.returncode}:\n{tail}")

    def _wait_service(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until the service answers `status`. A dead rig-daq ends the wait at once (with its
        log's tail); the deadline only catches a hung one, so it is generous: a first start
        compiles the loop's kernels before the service binds its sockets (daq/loop/kernel.py),
        half a minute on a quiet machine and minutes on a loaded one."""
        start = time.monotonic()
        deadline = start + timeout
        said = False
        while time.monotonic() < deadline:
            self._check_alive()
            if not said and time.monotonic() - start > 10.0:
                log.info(
                    "rig-daq is not answering yet (a first start compiles the loop's kernels); "
                    "waiting up to %.0f s",
                    timeout,
                )
                said = True
            try:
                self.request("status", timeout=1.0)
                return
            except SessionUnreachable:
                continue
        raise SessionError(f"rig-daq did not answer on {self.commands} within {timeout:.0f} s")

    def stop_estimator(self, timeout: float = 60.0) -> int | None:
        """Stop the estimator (it writes its parameter file); the service carries on."""
        code = _terminate(self.estimator, timeout)
        self.estimator = None
        return code

    def stop(self) -> None:
        if self._est_sub is not None:
            self._est_sub.close(0)
            self._est_sub = None
        _terminate(self.estimator, 60.0)
        _terminate(self.daq, 60.0)
        for f in self._logs:
            f.close()
        self._ctx.term()

    def __enter__(self) -> RigSession:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ commands

    def request(
        self, cmd: str, args: dict[str, Any] | None = None, *, timeout: float = COMMAND_TIMEOUT_S
    ) -> dict[str, Any]:
        """The reply map; a missing or malformed reply is a `SessionUnreachable` (a
        `SessionError`), so every step that guards the identification's result against a
        refusal guards it against a silent service too."""
        try:
            with CommandClient(self.commands, timeout=timeout) as client:
                return client.request(cmd, args)
        except (ServiceUnreachable, ProtocolError) as exc:
            raise SessionUnreachable(f"{cmd}: {exc}") from None

    def command(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """A command that must succeed; a refusal is a SessionError naming the reason."""
        self._check_alive()
        reply = self.request(cmd, args)
        if not reply.get("ok"):
            raise SessionError(f"{cmd} refused ({reply.get('error')}): {reply.get('message')}")
        return reply

    def run_experiment(self, experiment: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Arm if needed, run, and wait until the service is back in ARMED; return the status."""
        if self.request("status").get("state") == "IDLE":
            self.command("arm")
        reply = self.command("run", {"experiment": experiment})
        deadline = time.monotonic() + timeout
        while reply.get("checking"):  # a long limit check: the run starts when it passes
            self._check_alive()
            check = self.request("status").get("check") or {}
            if check.get("state") == "started":
                break
            if check.get("state") != "checking":
                raise SessionError(f"run refused after its limit check: {check.get('message')}")
            if time.monotonic() > deadline:
                raise SessionError(f"the limit check did not finish within {timeout:.0f} s")
            time.sleep(0.2)
        while time.monotonic() < deadline:
            self._check_alive()
            status = self.request("status")
            if status.get("fault"):
                raise SessionError(f"the rig faulted during the experiment: {status['fault']}")
            if status.get("state") == "ARMED":
                return status
            self.poll_estimates(0.2)
        raise SessionError(f"the experiment did not finish within {timeout:.0f} s")

    # ------------------------------------------------------------------ estimates

    def poll_estimates(self, seconds: float) -> None:
        if self._est_sub is None:
            time.sleep(seconds)
            return
        if self._est_sub.poll(int(seconds * 1000)):
            while True:
                try:
                    head = self._est_sub.recv_multipart(zmq.NOBLOCK)[1]
                except zmq.Again:
                    break
                self.last_estimate = msgpack.unpackb(head, raw=False)

    def wait_estimate(self, done: Any, *, timeout: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            self.poll_estimates(0.2)
            if self.last_estimate is not None and done(self.last_estimate):
                return self.last_estimate
        raise SessionError(f"timed out waiting for {what}")


def _terminate(p: subprocess.Popen[bytes] | None, timeout: float) -> int | None:
    if p is None or p.poll() is not None:
        return None if p is None else p.returncode
    p.send_signal(signal.SIGTERM)
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        log.error("process %d ignored SIGTERM for %.0f s; killing it", p.pid, timeout)
        with contextlib.suppress(ProcessLookupError):
            p.kill()
        return p.wait()
