"""MCAP round trip: the service records a run (simulator, virtual time), `rigctl export --format
mcap` converts it, mcap's own reader gets every row back in the display units, with the SI units
of every column in the file's metadata."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from daq.recording import read_run
from daq.recording.format import SUFFIX
from rigctl.main import main
from tests.live.conftest import PROFILE_2DOF, spawn

pytestmark = pytest.mark.slow
mcap_reader = pytest.importorskip("mcap.reader")


def test_recorded_run_exports_to_mcap_with_every_row_and_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc = spawn(
        ["-m", "daq.service", "--profile", str(PROFILE_2DOF), "--virtual-time", "--duration",
         "3", "--record", "--run-dir", str(tmp_path), "--no-network"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path,
    )  # fmt: skip
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    (run_path,) = tmp_path.glob(f"*{SUFFIX}")
    run = read_run(run_path)
    assert main(["export", str(run_path), "--format", "mcap"]) == 0
    mcap_path = Path(capsys.readouterr().out.strip())
    assert mcap_path.is_absolute() and mcap_path == run_path.with_suffix(".mcap").resolve()

    with mcap_path.open("rb") as f:
        reader = mcap_reader.make_reader(f)
        summary = reader.get_summary()
        assert summary is not None
        topics = {c.topic: c for c in summary.channels.values()}
        assert {"/rig/joints", "/rig/pressures", "/rig/valves", "/rig/state"} <= set(topics)
        schema = json.loads(summary.schemas[topics["/rig/joints"].schema_id].data)
        assert schema["title"] == "hydrig.JointStates"
        joints = [json.loads(m.data) for _, _, m in reader.iter_messages(topics=["/rig/joints"])]
        press = [json.loads(m.data) for _, _, m in reader.iter_messages(topics=["/rig/pressures"])]
        times = [m.log_time for _, _, m in reader.iter_messages(topics=["/rig/state"])]
        units = {rec.name: rec.metadata for rec in reader.iter_metadata()}["hydrig.units"]

    # Same rows: every recorded seq once, in order.
    assert [m["seq"] for m in joints] == run.seq.tolist()
    assert len(press) == len(run.data) == len(times) >= 2900
    # Same values, in display units.
    q1 = run.column("eng.q_1")
    p1 = run.column("eng.p_cap_1")
    np.testing.assert_allclose(
        [m["position_deg"]["j1"] for m in joints], np.degrees(q1), rtol=1e-12
    )
    np.testing.assert_allclose([m["bar"]["p_cap_1_bar"] for m in press], p1 * 1e-5, rtol=1e-12)
    # Log times keep the loop's spacing (virtual time: exactly one period per row).
    assert np.allclose(np.diff(times), 1e6, atol=2)
    # Units: every column's SI unit, as in the run file.
    assert units == dict(zip(run.columns, run.units, strict=True))
    assert math.isclose(times[0] * 1e-9, run.meta["start_wall"], abs_tol=1e-6)
