"""`rig-daq` end to end: the real entry point in a subprocess, and the Service in-process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daq.backends.base import BackendStatus
from daq.loop.states import State
from daq.profile.schema import Profile
from daq.service import Service
from tests.loop.fakes import FakeBackend

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "hw_profiles" / "sim-2dof.toml"
QUIET_RT = ["--rt-priority", "0", "--cpu", "-1", "--no-mlock"]


def _service(args: list[str], tmp: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [
        sys.executable,
        "-m",
        "daq.service",
        "--profile",
        str(PROFILE),
        "--no-network",
        "--run-dir",
        str(tmp / "runs"),
        "--status-out",
        str(tmp / "status.json"),
        *args,
    ]
    return subprocess.Popen(
        cmd, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _status(tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((tmp / "status.json").read_text())
    return out


def test_virtual_time_run_for_a_duration_exits_zero(tmp_path: Path) -> None:
    proc = _service(["--virtual-time", "--duration", "2.5"], tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    st = _status(tmp_path)
    assert st["seq"] == 2500 and st["timing"]["cycles"] == 2500
    assert st["state"] == "IDLE" and st["fault"] is None
    assert st["t"] == pytest.approx(2.499)


def test_sigterm_stops_cleanly_in_real_time(tmp_path: Path) -> None:
    proc = _service(QUIET_RT, tmp_path)
    assert proc.stdout is not None
    for line in proc.stdout:  # "running" is logged once the loop has completed a cycle
        if "running sim2dof" in line:
            break
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    st = _status(tmp_path)
    assert st["timing"]["cycles"] >= 1
    # The simulated plant's steps between cycles, timed in the loop process, reach the service.
    between = st["timing"]["between_cycles_us"]
    assert between["p50"] == between["p50"] and between["max"] > 0.0, st["timing"]
    assert "signal SIGTERM" in out


def test_a_bad_profile_exits_2_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(PROFILE.read_text().replace("loop_rate_hz = 1000.0", "loop_rate_hz = -1.0"))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run(
        [sys.executable, "-m", "daq.service", "--profile", str(bad)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert "bad.toml" in r.stderr and "loop_rate_hz" in r.stderr


# ---------------------------------------------------------------------- in-process


def _wait(service: Service, timeout: float = 60.0) -> None:
    stop = threading.Event()
    timer = threading.Timer(timeout, stop.set)
    timer.start()
    try:
        service.wait(stop)
    finally:
        timer.cancel()


def test_service_in_process_runs_its_duration_and_closes(profile: Profile) -> None:
    # Valves on every exit path, armed: tests/loop/test_exit_paths.py.
    backend = FakeBackend(profile)
    service = Service(profile, backend, virtual_time=True, network=False)
    service.start(duration=0.5)
    _wait(service)
    assert service.shutdown() == 0
    assert backend.closed
    assert service.loop.seq == 500


def test_a_latched_fault_is_not_a_failure_but_a_loop_exception_is(profile: Profile) -> None:
    backend = FakeBackend(profile)
    backend.override["p_cap_1"] = 8.0e6
    service = Service(profile, backend, virtual_time=True, network=False)
    service.start(duration=0.1)
    _wait(service)
    assert service.loop.state == State.FAULT
    assert service.shutdown() == 0

    class Broken(FakeBackend):
        def read(self, t: float, raw_out: np.ndarray) -> BackendStatus:
            if t > 0.05:
                raise RuntimeError("driver crashed")
            return super().read(t, raw_out)

    broken = Broken(profile)
    service = Service(profile, broken, virtual_time=True, network=False)
    service.start(duration=0.2)
    _wait(service)
    assert service.shutdown() == 1
    assert service.loop.fault is not None and "driver crashed" in service.loop.fault.where
    assert broken.closed


def test_recording_of_n_cycles_holds_exactly_n_contiguous_samples(tmp_path: Path) -> None:
    recording = pytest.importorskip("daq.recording")
    proc = _service(["--virtual-time", "--duration", "3", "--record"], tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == 1
    run = recording.read_run(runs[0])
    seq = run.column("seq")
    assert len(seq) == 3000
    assert np.array_equal(seq, np.arange(3000))
    np.testing.assert_allclose(run.column("t"), np.arange(3000) * 1e-3, atol=1e-12)
    assert run.complete


def test_record_into_an_unusable_directory_exits_2(tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("a file where the run directory should be")
    proc = _service(["--virtual-time", "--duration", "1", "--record"], tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out
    assert "--record" in out


def test_params_file_is_loaded_or_refused(tmp_path: Path) -> None:
    pytest.importorskip("controller.paramfile")
    # A partial file: the service fills nothing from the simulator's truth (the profile has
    # no initial guesses), so the values it lacks are named and the start refused.
    partial = tmp_path / "partial.toml"
    partial.write_text(
        'format = "hydrig-plant-params"\nversion = 1\n[meta]\nrig = "sim2dof"\n'
        "[global]\nbulk_modulus_pa = 2.0e8\n[[joints]]\ninertia = 4.0\n[[joints]]\ninertia = 1.2\n"
    )
    proc = _service(["--virtual-time", "--duration", "0.2", "--params", str(partial)], tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "no value for" in out and "Fv1" in out, out
    # A complete file (every identified value given) is loaded.
    joint = (
        "[[joints]]\ninertia = {m}\nviscous_friction = {fv}\ngravity_moment = {w}\n"
        "flow_gains = [6.3e-7, 6.6e-7, 5.5e-7, 6.3e-7]\n"
    )
    good = tmp_path / "params.toml"
    good.write_text(
        'format = "hydrig-plant-params"\nversion = 1\n[meta]\nrig = "sim2dof"\n'
        "[global]\nbulk_modulus_pa = 2.0e8\ncoupling = 1.3\n"
        + joint.format(m=4.0, fv=50.0, w=8.5)
        + joint.format(m=1.2, fv=4.4, w=3.3)
    )
    proc = _service(["--virtual-time", "--duration", "0.2", "--params", str(good)], tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    bad = tmp_path / "bad.toml"
    bad.write_text('format = "something else"\n')
    proc = _service(["--virtual-time", "--duration", "0.2", "--params", str(bad)], tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "--params" in out, out
