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


def record_and_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], profile: Path, seconds: str, *extra: str
) -> tuple[Path, Path]:
    """Record `seconds` of `profile` in virtual time, export it with `rigctl export --format
    mcap`; (run file, MCAP file)."""
    proc = spawn(
        ["-m", "daq.service", "--profile", str(profile), "--virtual-time", "--duration",
         seconds, "--record", *extra, "--run-dir", str(tmp_path), "--no-network"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path,
    )  # fmt: skip
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    (run_path,) = tmp_path.glob(f"*{SUFFIX}")
    assert main(["export", str(run_path), "--format", "mcap"]) == 0
    return run_path, Path(capsys.readouterr().out.strip())


def test_recorded_run_exports_to_mcap_with_every_row_and_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_path, mcap_path = record_and_export(tmp_path, capsys, PROFILE_2DOF, "3")
    run = read_run(run_path)
    assert mcap_path.is_absolute() and mcap_path == run_path.with_suffix(".mcap").resolve()

    with mcap_path.open("rb") as f:
        reader = mcap_reader.make_reader(f)
        summary = reader.get_summary()
        assert summary is not None
        topics = {c.topic: c for c in summary.channels.values()}
        assert {"/rig/joints", "/rig/pressures", "/rig/valves", "/rig/state"} <= set(topics)
        # The stock panels' channels too: the log, diagnostics, and the arm (from the profile
        # the run carries) every EXPORT_ARM_STEP-th cycle.
        assert {"/rig/log", "/diagnostics", "/tf", "/rig/scene"} <= set(topics)
        n_tf = sum(1 for _ in reader.iter_messages(topics=["/tf"]))
        schema = json.loads(summary.schemas[topics["/rig/joints"].schema_id].data)
        assert schema["title"] == "hydrig.JointStates"
        joints = [json.loads(m.data) for _, _, m in reader.iter_messages(topics=["/rig/joints"])]
        press = [json.loads(m.data) for _, _, m in reader.iter_messages(topics=["/rig/pressures"])]
        times = [m.log_time for _, _, m in reader.iter_messages(topics=["/rig/state"])]
        units = {rec.name: rec.metadata for rec in reader.iter_metadata()}["hydrig.units"]

    # Same rows: every recorded seq once, in order.
    assert [m["seq"] for m in joints] == run.seq.tolist()
    assert len(press) == len(run.data) == len(times) >= 2900
    from daq.bridge.mcap_export import EXPORT_ARM_STEP

    assert n_tf == int(np.sum(run.seq % EXPORT_ARM_STEP == 0))
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


@pytest.mark.parametrize("virtual", [True, False])
def test_exported_events_sit_on_their_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], virtual: bool
) -> None:
    """A recorded experiment (state changes, experiment_done, recorder events): in the MCAP
    every event is within one cycle of its row, in virtual time and in real time."""
    import tomllib

    from rigctl.session import RigSession
    from tests.live.test_run import SHORT
    from tests.telemetry.conftest import wait_until

    with RigSession(PROFILE_2DOF, tmp_path / "rig", virtual_time=virtual, estimator=False) as s:
        path = Path(s.command("record_start", {"name": "events"})["path"])
        s.command("arm")
        s.command("run", {"experiment": tomllib.loads(SHORT)})
        # Ended either way: by its end or, on a loaded machine in real time, by a fault (an
        # overrun); both leave events to place.
        assert wait_until(lambda: s.request("status")["state"] != "RUNNING", 300)
        # The service forwards events to the recorder asynchronously: wait for the ending's
        # (arm, run, and the end or the fault: at least three state/fault/done records).
        assert wait_until(lambda: s.request("status")["recorder"]["events_written"] >= 4, 60)
        s.request("disarm")
        s.command("record_stop")
    run = read_run(path)
    kinds = {e["kind"] for e in run.events}
    assert "state" in kinds and kinds & {"experiment_done", "fault"}, kinds
    assert main(["export", str(path), "--format", "mcap"]) == 0
    with Path(capsys.readouterr().out.strip()).open("rb") as f:
        reader = mcap_reader.make_reader(f)
        rows = {json.loads(m.data)["seq"]: m.log_time
                for _, _, m in reader.iter_messages(topics=["/rig/state"])}  # fmt: skip
        events = [(m.log_time, json.loads(m.data))
                  for _, _, m in reader.iter_messages(topics=["/rig/events"])]  # fmt: skip
    assert len(events) == len(run.events)
    last = max(rows)
    period_ns = run.meta["period"] * 1e9
    for stamp, ev in events:
        seq = ev["seq"]
        row = rows[seq] if seq in rows else rows[last] + (seq - last) * period_ns
        assert abs(stamp - row) <= period_ns, (ev, (stamp - row) * 1e-9)


def test_an_excavator_run_exports_its_arm_in_3d(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A [chain] profile's run: the export draws the chain from its D-H parameters (the
    profile the run carries), with every joint's frame and every jack."""
    profile = PROFILE_2DOF.parent / "sim-excavator.toml"
    _, mcap_path = record_and_export(tmp_path, capsys, profile, "1", "--arm")
    with mcap_path.open("rb") as f:
        reader = mcap_reader.make_reader(f)
        tf = [json.loads(m.data) for _, _, m in reader.iter_messages(topics=["/tf"])]
        scene = [json.loads(m.data) for _, _, m in reader.iter_messages(topics=["/rig/scene"])]
    assert tf and len(tf) == len(scene)
    children = [t["child_frame_id"] for t in tf[-1]["transforms"]]
    assert children == ["base", "swing", "boom", "stick", "bucket", "tool"]
    ids = {e["id"] for e in scene[-1]["entities"]}
    assert {"swing/link", "bucket/link", "boom/jack0", "boom/jack1", "bucket/jack3"} <= ids
