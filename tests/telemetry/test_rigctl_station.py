"""`rigctl power | jog | calibrate` against the real command server and handler, on the
realistic simulated plant given a hydraulic station, as a user types them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daq.backends.sim import SimBackend
from daq.commands import CommandServer
from daq.loop import Loop
from daq.profile.loader import load_profile
from daq.service.control_api import ControlApi, joint_gains, make_hold_runner
from daq.station.twin import with_station
from rigctl.main import main
from tests.conditions import wait_until

PROFILE = with_station(
    load_profile(Path(__file__).resolve().parents[2] / "hw_profiles" / "sim-2dof-realistic.toml")
)


@pytest.fixture
def endpoint(ctx: Any, tmp_path: Path) -> Iterator[tuple[str, Loop]]:
    sim = SimBackend.from_profile(PROFILE)
    sim.open()
    hold = make_hold_runner(PROFILE, joint_gains(PROFILE))
    loop = Loop(PROFILE, sim, hold=hold, virtual_time=True, ring_capacity=1 << 14)
    loop.warm_up()
    api = ControlApi(loop, calibration_dir=tmp_path / "cal")
    srv = CommandServer(ctx, "tcp://127.0.0.1:*", lambda cmd, args, who: api.handle(cmd, args, who))
    srv.start()
    loop.start()
    yield srv.endpoint, loop
    srv.stop()
    loop.stop()
    assert loop.join(10.0) and loop.error is None


def test_calibrate_power_and_jog_from_the_command_line(
    endpoint: tuple[str, Loop], tmp_path: Path, capsys: Any
) -> None:
    ep, loop = endpoint
    opts = ["--endpoint", ep, "--timeout", "30"]
    assert main(["calibrate", "show", *opts]) == 0
    assert "no calibration in force" in capsys.readouterr().out
    assert main(["calibrate", "pressure-zero", "--apply", *opts]) == 0
    out = capsys.readouterr().out
    assert "p_cap_1" in out and "applied:" in out and "ok" in out
    assert main(["calibrate", "show", *opts]) == 0
    assert "pressure_zero" in capsys.readouterr().out
    bad = tmp_path / "other.toml"
    bad.write_text('rig = "elsewhere"\n[channels.p_cap_1]\noffset = 1.0\n')
    assert main(["calibrate", "apply", str(bad), *opts]) == 1
    assert "made for rig 'elsewhere'" in capsys.readouterr().err
    assert main(["calibrate", "revert", *opts]) == 0
    assert main(["power", "low", *opts]) == 0
    assert wait_until(lambda: loop.station.power.name == "LOW")
    assert main(["power", "medium", *opts]) == 2  # argparse: not a level
    # The realistic arm sags onto its stops while idle; jog joint 2 to 30° at low pressure.
    assert wait_until(lambda: main(["jog", "j2", "30", "--velocity", "3", *opts]) == 0, 60.0)
    jog_ended = wait_until(lambda: loop.active is not None and loop.active.done, 60.0)
    # A jog that does not end was replaced by the safe hold: say which trip did it.
    fault = loop.fault.message if loop.fault is not None else "none"
    assert jog_ended, (
        f"jog not done within 60 s: state {loop.state.name}, active {type(loop.active).__name__},"
        f" fault: {fault}"
    )
    assert main(["calibrate", "position", *opts]) == 1  # ARMED: refused
    assert "refused in ARMED" in capsys.readouterr().err


def test_shunt_and_the_shunt_calibration_from_the_command_line(
    endpoint: tuple[str, Loop], capsys: Any
) -> None:
    ep, loop = endpoint
    opts = ["--endpoint", ep, "--timeout", "30"]
    # The supply, off from the start, is at zero load; the chambers still hold the arm.
    assert main(["shunt", "on", "p_supply", *opts]) == 0
    assert loop.station.shunted() == ["p_supply"]
    assert main(["status", *opts]) == 0
    status = capsys.readouterr().out.splitlines()
    assert any(line.split() == ["station.shunt", "['p_supply']"] for line in status), status
    assert main(["arm", *opts]) == 1
    assert "relay closed on p_supply" in capsys.readouterr().err
    assert main(["shunt", "off", *opts]) == 0
    assert loop.station.shunted() == []
    assert main(["calibrate", "pressure_zero", "--apply", *opts]) == 0
    capsys.readouterr()
    assert main(["calibrate", "pressure_shunt", "--apply", *opts]) == 0
    out = capsys.readouterr().out
    assert "pressure_shunt: oil" in out and "shunt on p_rod_2: step" in out and "applied:" in out
    assert loop.station.shunted() == [] and loop.state.name == "IDLE"


def test_the_oil_temperature_calibration_from_the_command_line(
    endpoint: tuple[str, Loop], capsys: Any
) -> None:
    ep, loop = endpoint
    opts = ["--endpoint", ep, "--timeout", "30"]
    assert main(["calibrate", "oil-temperature", *opts]) == 2  # the reference is not optional
    assert "required: --reference-c" in capsys.readouterr().err
    assert main(["calibrate", "oil-temperature", "--reference-c", "23.1",
                 "--reference-sigma-c", "0.05", "--apply", *opts]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "oil_temperature: oil 23.1 °C" in out
    assert "against the reference 23.100 °C (σ 0.05)" in out and "applied:" in out
    assert main(["calibrate", "show", *opts]) == 0
    assert "oil_temperature" in capsys.readouterr().out
    assert loop.state.name == "IDLE" and loop.station.power.name == "OFF"  # nothing switched
