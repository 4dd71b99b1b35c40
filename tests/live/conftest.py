"""Fixtures for the live-view tests: the service on the simulator (real time, as on the rig
PC) started as its own process with `RigSession`, on free loopback ports."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rigctl.session import RigSession

ROOT = Path(__file__).resolve().parents[2]
PROFILE_2DOF = ROOT / "hw_profiles" / "sim-2dof.toml"


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[RigSession]:
    with RigSession(PROFILE_2DOF, tmp_path / "rig", virtual_time=False, estimator=False) as s:
        yield s


def spawn(
    args: list[str], env_extra: dict[str, str] | None = None, **kw: object
) -> subprocess.Popen[str]:
    """`python ARGS` with the repository on the path."""
    env = dict(os.environ, **(env_extra or {}))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, *args], env=env, text=True, **kw)  # type: ignore[call-overload]


def stop(proc: subprocess.Popen[str]) -> int:
    """Terminate a spawned bridge (its stdout a pipe); its exit code."""
    proc.terminate()
    code = proc.wait(30)
    if proc.stdout is not None:
        proc.stdout.close()
    return code


def record_experiment(tmp_path: Path, experiment: str, name: str) -> Path:
    """Run one experiment (TOML text) on the simulated 2-DOF rig in virtual time, recorded from
    before arm to just after its end (the recording stopped at once: the events still on
    their way must be in it); the run file's path."""
    import tomllib

    from tests.telemetry.conftest import wait_until

    with RigSession(PROFILE_2DOF, tmp_path / "rig", virtual_time=True, estimator=False) as s:
        path = Path(s.command("record_start", {"name": name})["path"])
        s.command("arm")
        s.command("run", {"experiment": tomllib.loads(experiment)})
        assert wait_until(lambda: s.request("status")["state"] != "RUNNING", 300)
        s.command("record_stop")
    return path
