"""Calibrations through the command handler and the service: applied by the loop's scaling layer,
kept per rig, reverted, refused outside IDLE or for another rig with nothing applied half-way,
restored at start, and named in every run's header."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daq.backends.sim import SimBackend
from daq.loop import Loop
from daq.profile.loader import load_profile
from daq.service.control_api import CommandError, ControlApi, joint_gains, make_hold_runner
from tests.conditions import wait_until

PROFILE = load_profile(Path(__file__).resolve().parents[2] / "hw_profiles" / "sim-2dof.toml")
CAL = """
rig = "sim2dof"
created_utc = "2026-11-25T18:00:00Z"

[channels.p_cap_1]
offset = 200000.0
gain = 1.0
sigma_offset = 300.0
method = "pressure_zero"
"""


class Handle:
    def __init__(self, cal_dir: Path) -> None:
        sim = SimBackend.from_profile(PROFILE)
        sim.open()
        hold = make_hold_runner(PROFILE, joint_gains(PROFILE))
        self.loop = Loop(PROFILE, sim, hold=hold, virtual_time=True, ring_capacity=1 << 14)
        self.loop.warm_up()
        self.api = ControlApi(self.loop, calibration_dir=cal_dir)
        self.loop.start()

    def __call__(self, cmd: str, **args: Any) -> dict[str, Any]:
        return self.api.handle(cmd, args)

    def mean_eng(self, name: str, n: int = 2000) -> float:
        """Mean of the channel over the last `n` published rows (noise 5 kPa → 0.1 kPa)."""
        ring, col = self.loop.ring, self.loop.layout.index(f"eng.{name}")
        end = ring.published
        rows = ring.data[np.arange(end - n, end) & ring.mask, col]
        return float(rows.mean())

    def close(self) -> None:
        self.loop.stop()
        assert self.loop.join(10.0) and self.loop.error is None


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Handle]:
    h = Handle(tmp_path / "cal")
    assert wait_until(lambda: h.loop.ring.published > 5000)
    yield h
    h.close()


def _settle(h: Handle) -> None:
    n = h.loop.ring.published
    assert wait_until(lambda: h.loop.ring.published > n + 4000)


def test_apply_show_and_revert_through_the_scaling_layer(rig: Handle, tmp_path: Path) -> None:
    before = rig.mean_eng("p_cap_1")
    out = rig("calibration_apply", text=CAL, source="cal.toml")
    assert out["calibration"]["channels"]["p_cap_1"]["offset"] == 200000.0
    _settle(rig)
    assert rig.mean_eng("p_cap_1") == pytest.approx(before - 200000.0, abs=3000.0)
    shown = rig("calibration")
    assert shown["calibration"]["sha256"] == out["calibration"]["sha256"]
    assert len(shown["applied"]) == 1
    kept = tmp_path / "cal" / "sim2dof" / shown["applied"][0]
    assert kept.read_text().startswith("# hydrig transducer calibration")
    reverted = rig("calibration_revert")
    assert reverted["calibration"] is None and reverted["reverted"] == kept.name
    _settle(rig)
    assert rig.mean_eng("p_cap_1") == pytest.approx(before, abs=3000.0)
    with pytest.raises(CommandError, match="no calibration is in force"):
        rig("calibration_revert")


def test_refusals_apply_nothing(rig: Handle, tmp_path: Path) -> None:
    before = rig.mean_eng("p_cap_1")
    for text, message in [
        (CAL.replace('"sim2dof"', '"sim2dofreal"'), "made for rig 'sim2dofreal'"),
        (CAL.replace("gain = 1.0", "gain = 1.3"), r"gain: 1.3 is outside the allowed 0.8–1.25"),
        (CAL.replace("offset = 200000.0", "offset = nan"), "offset: expected a finite number"),
        (CAL.replace("p_cap_1]", "p_cap_7]"), "p_cap_7: not a channel"),
    ]:
        with pytest.raises(CommandError, match=message) as err:
            rig("calibration_apply", text=text)
        assert err.value.code == "rejected"
    rig("arm")
    with pytest.raises(CommandError, match="calibration refused in ARMED") as err:
        rig("calibration_apply", text=CAL)
    assert err.value.code == "invalid_state"
    rig("disarm")
    assert rig("calibration") == {"calibration": None, "applied": []}
    assert not (tmp_path / "cal" / "sim2dof").exists() or not any(
        (tmp_path / "cal" / "sim2dof").glob("*.toml")
    )
    _settle(rig)
    assert rig.mean_eng("p_cap_1") == pytest.approx(before, abs=3000.0)


def test_the_calibration_in_force_is_restored_at_start(tmp_path: Path) -> None:
    first = Handle(tmp_path / "cal")
    try:
        first("calibration_apply", text=CAL)
    finally:
        first.close()
    again = Handle(tmp_path / "cal")  # a new service on the same directory
    try:
        assert wait_until(lambda: again.loop.ring.published > 3000)
        assert again("calibration")["calibration"]["channels"]["p_cap_1"]["offset"] == 200000.0
        assert again.loop.scaler.corr_offset[0] == 200000.0  # from the first cycle on
    finally:
        again.close()


def test_the_loop_process_applies_the_calibration_in_force_from_its_first_cycle(
    tmp_path: Path,
) -> None:
    from daq.service import Service

    h = Handle(tmp_path / "cal")
    assert wait_until(lambda: h.loop.ring.published > 5000)
    before = h.mean_eng("p_cap_1", 1000)
    h("calibration_apply", text=CAL)
    h.close()
    service = Service(
        PROFILE, None, loop_process=True, virtual_time=True, network=False,
        run_dir=tmp_path / "runs", calibration_dir=tmp_path / "cal",
    )  # fmt: skip
    service.start()
    try:
        ring, col = service.loop.ring, service.loop.layout.index("eng.p_cap_1")
        assert wait_until(lambda: ring.published > 3000)
        rows = ring.data[:1000]
        if rows[0, 0] == 0:  # row 0 not yet overwritten: the loop's first cycle
            assert rows[0, col] == pytest.approx(before - 200000.0, abs=30000.0)
        end = ring.published
        latest = ring.data[np.arange(end - 1000, end) & ring.mask, col].mean()
        assert latest == pytest.approx(before - 200000.0, abs=5000.0)
    finally:
        assert service.shutdown() == 0


def test_every_run_header_names_the_calibration(tmp_path: Path) -> None:
    from daq.recording.reader import read_run
    from daq.service import Service

    sim = SimBackend.from_profile(PROFILE)
    service = Service(
        PROFILE, sim, virtual_time=True, network=False, loop_process=False,
        run_dir=tmp_path / "runs", calibration_dir=tmp_path / "cal",
    )  # fmt: skip
    service.start()
    try:
        api = service.api
        api.handle("calibration_apply", {"text": CAL})
        path = api.handle("record_start", {"name": "calibrated"})["path"]
        api.handle("record_stop", {})
        assert service.status()["calibration"]["sha256"]
    finally:
        assert service.shutdown() == 0
    meta = read_run(path).meta
    assert meta["calibration"]["channels"]["p_cap_1"]["offset"] == 200000.0
