"""At `loop_rate_hz = 4000` the service records every cycle: a complete run file whose rows are
0.25 ms apart, with the period in its metadata (the recorder follows the profile's rate)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from daq.backends.factory import make_backend
from daq.loop.states import State
from daq.profile import load_profile
from daq.recording import read_run
from daq.service import Service

ROOT = Path(__file__).resolve().parents[2]


def test_a_4khz_run_is_recorded_whole(tmp_path: Path) -> None:
    base = load_profile(ROOT / "hw_profiles" / "sim-2dof.toml")
    profile = base.model_copy(update={"rig": base.rig.model_copy(update={"loop_rate_hz": 4000.0})})
    service = Service(
        profile, make_backend(profile), virtual_time=True, network=False, run_dir=tmp_path
    )
    service.start()
    api = service.api
    exp = {
        "name": "sine-4khz",
        "home_deg": [40.0, 30.0],
        "segments": [
            {
                "name": "sine",
                "duration_s": 2.0,
                "trajectory": {"kind": "sine", "amplitude_deg": [3, 3], "frequency_hz": [1, 1]},
                "controller": {"kind": "pid"},
            }
        ],
    }
    try:
        path = api.handle("record_start", {"name": "fast"}, None)["path"]
        api.handle("arm", {}, None)
        api.handle("run", {"experiment": exp}, None)
        deadline = time.monotonic() + 600
        while service.loop.state != State.RUNNING and time.monotonic() < deadline:
            service.loop.finished.wait(0.05)
        while service.loop.state == State.RUNNING and time.monotonic() < deadline:
            service.loop.finished.wait(0.2)
        assert service.loop.state == State.ARMED, service.loop.fault
        api.handle("record_stop", {}, None)
    finally:
        service.shutdown()
    run = read_run(path)
    assert run.complete
    assert run.meta["period"] == 2.5e-4
    t = run.column("t")
    assert np.allclose(np.diff(t), 2.5e-4)
    running = run.column("state") == State.RUNNING
    assert 7_990 <= running.sum() <= 8_400  # 2 s of sine (and a short approach) at 4 kHz
    q1 = np.degrees(run.column("eng.q_1")[running])
    assert np.ptp(q1) > 5.0  # the ±3° sine was followed
