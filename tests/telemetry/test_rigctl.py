"""rigctl against a command server with a fake handler and a publisher fed by the test."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daq.commands import ClientIdentity, CommandError, CommandServer
from daq.security import CurveConfig, generate_client_key
from rigctl.main import main
from tests.telemetry.conftest import write_rows


class Fake:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, cmd: str, args: dict[str, Any], who: ClientIdentity) -> dict[str, Any]:
        self.calls.append((cmd, args))
        if cmd == "arm":
            raise CommandError("invalid_state", "cannot arm: fault latched (estop)")
        if cmd == "status":
            return {"state": "FAULT", "fault": "estop", "timing": {"overruns": 0}}
        if cmd == "describe":
            return {
                "rig": "sim2dof",
                "channels": [{"name": "q_1", "role": "resolver", "joint": "j1"}],
                "joints": [{"name": "j1", "home_deg": 40.0, "limits": {"soft_min_deg": 22.0}}],
                "columns": [{"name": "seq", "unit": "1"}],
            }
        return {}


@pytest.fixture
def service(ctx) -> Iterator[tuple[str, Fake]]:
    fake = Fake()
    srv = CommandServer(ctx, "tcp://127.0.0.1:*", fake)
    srv.start()
    yield srv.endpoint, fake
    srv.stop()


def test_status_json_and_exit_codes(service, capsys) -> None:
    ep, fake = service
    assert main(["status", "--endpoint", ep, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["state"] == "FAULT"
    assert main(["status", "--endpoint", ep]) == 0
    assert "state: FAULT" in capsys.readouterr().out
    assert main(["arm", "--endpoint", ep]) == 1
    assert "invalid_state" in capsys.readouterr().err
    assert main(["describe", "--endpoint", ep]) == 0
    out = capsys.readouterr().out
    assert "rig sim2dof" in out and "q_1" in out and "soft_min_deg" in out
    assert main(["status", "--endpoint", "tcp://127.0.0.1:9", "--timeout", "0.3"]) == 3
    assert main(["frobnicate"]) == 2
    assert [c for c, _ in fake.calls] == ["status", "status", "arm", "describe"]


def test_commands_send_the_documented_args(service, tmp_path: Path) -> None:
    ep, fake = service
    exp = tmp_path / "exp.toml"
    exp.write_text('name = "sine"\n[[segments]]\nkind = "sine"\namplitude_deg = 5.0\n')
    assert main(["run", str(exp), "--endpoint", ep]) == 0
    assert main(["estop", "operator", "--endpoint", ep]) == 0
    assert main(["record", "start", "--name", "r1", "--endpoint", ep]) == 0
    assert main(["record", "stop", "--endpoint", ep]) == 0
    assert main(["gains", "j1", "p=9", "i=0.5", "--endpoint", ep]) == 0
    for name in ("disarm", "stop", "reset"):
        assert main([name, "--endpoint", ep]) == 0
    assert fake.calls == [
        (
            "run",
            {"experiment": {"name": "sine", "segments": [{"kind": "sine", "amplitude_deg": 5.0}]}},
        ),
        ("estop", {"reason": "operator"}),
        ("record_start", {"name": "r1"}),
        ("record_stop", {}),
        ("set_gains", {"joint": "j1", "gains": {"p": 9.0, "i": 0.5}}),
        ("disarm", {}),
        ("stop", {}),
        ("reset", {}),
    ]
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    assert main(["run", str(bad), "--endpoint", ep]) == 2
    assert main(["run", str(tmp_path / "missing.toml"), "--endpoint", ep]) == 2
    assert main(["gains", "j1", "q=1", "--endpoint", ep]) == 2
    assert main(["gains", "j1", "p=fast", "--endpoint", ep]) == 2
    assert len(fake.calls) == 8


def test_keys_and_curve_options(tmp_path: Path, ctx, capsys) -> None:
    keys = tmp_path / "keys"
    assert main(["keys", "generate", "ops", "--role", "controller", "--dir", str(keys)]) == 0
    assert main(["keys", "generate", "view", "--role", "monitor", "--dir", str(keys)]) == 0
    assert main(["keys", "generate", "view", "--role", "monitor", "--dir", str(keys)]) == 2
    capsys.readouterr()
    assert main(["keys", "list", "--dir", str(keys), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"name": "ops", "role": "controller"},
        {"name": "view", "role": "monitor"},
    ]
    generate_client_key(tmp_path / "other", "stranger", "controller")
    fake = Fake()
    srv = CommandServer(ctx, "tcp://127.0.0.1:*", fake, auth=CurveConfig.from_keys_dir(keys))
    srv.start()
    try:
        base = ["--endpoint", srv.endpoint, "--keys-dir", str(keys)]
        assert main(["disarm", *base, "--key", "ops"]) == 0
        assert main(["disarm", *base, "--key", "view"]) == 1  # forbidden
        assert main(["status", *base, "--key", "view", "--json"]) == 0
        stranger = str(tmp_path / "other" / "stranger.key_secret")
        assert main(["status", *base, "--key", stranger, "--timeout", "0.5"]) == 3
        assert main(["status", *base]) == 2  # --keys-dir without --key
        assert main(["status", *base, "--key", "nobody"]) == 2
    finally:
        srv.stop()
    assert [c for c, _ in fake.calls] == ["disarm", "status"]


def _profile_with_network(tmp_path: Path, **network: str) -> Path:
    """sim-2dof.toml with its [network] keys replaced."""
    src = (Path(__file__).resolve().parents[2] / "hw_profiles" / "sim-2dof.toml").read_text()
    for key, value in network.items():
        lines = src.splitlines()
        start = lines.index("[network]")
        hit = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith(f"{key} =")), None
        )
        if hit is None:
            lines.insert(start + 1, f'{key} = "{value}"')
        else:
            lines[hit] = f'{key} = "{value}"'
        src = "\n".join(lines) + "\n"
    path = tmp_path / "rig.toml"
    path.write_text(src)
    return path


def test_endpoint_from_profile_then_environment_then_default(
    service, tmp_path: Path, monkeypatch, capsys
) -> None:
    """--endpoint beats --profile's [network], which beats $RIG_COMMANDS, which beats 5556."""
    ep, fake = service
    port = ep.rsplit(":", 1)[1]
    dead = "tcp://127.0.0.1:9"
    monkeypatch.setenv("RIG_COMMANDS", dead)
    prof = _profile_with_network(tmp_path, commands=f"tcp://*:{port}")  # a bind address
    assert main(["status", "--profile", str(prof), "--json"]) == 0  # profile beats env
    assert main(["status", "--profile", str(prof), "--endpoint", dead, "--timeout", "0.3"]) == 3
    monkeypatch.setenv("RIG_COMMANDS", ep)
    assert main(["status", "--json"]) == 0  # from the environment
    capsys.readouterr()
    monkeypatch.delenv("RIG_COMMANDS")
    from rigctl.common import DEFAULT_COMMANDS, resolve_connection
    from rigctl.main import build_parser

    args = build_parser().parse_args(["status"])
    resolve_connection(args)
    assert args.endpoint == DEFAULT_COMMANDS
    assert [c for c, _ in fake.calls] == ["status", "status"]
    # A profile that does not load, or a CURVE profile without a client key: usage errors.
    assert main(["status", "--profile", str(tmp_path / "missing.toml")]) == 2
    assert "missing.toml" in capsys.readouterr().err
    curve = _profile_with_network(tmp_path, commands=ep, keys_dir=str(tmp_path / "keys"))
    assert main(["status", "--profile", str(curve)]) == 2
    assert "network.keys_dir is set" in capsys.readouterr().err
    monkeypatch.setenv("RIG_TELEMETRY", "tcp://127.0.0.1:9")
    assert main(["monitor", "--timeout", "0.3"]) == 3
    assert "tcp://127.0.0.1:9" in capsys.readouterr().err


def test_monitor_json(make_publisher, capsys) -> None:
    pub, ring = make_publisher()
    done = threading.Event()

    def loop() -> None:  # a stand-in for the loop: 20 rows every 20 ms
        k = 0
        while not done.wait(0.02):
            write_rows(ring, k, 20)
            k += 20
            if k % 200 == 0:  # again and again: events are not replayed to a late subscriber
                pub.event("fault", cause="estop")

    writer = threading.Thread(target=loop)
    writer.start()
    try:
        rc = main(
            ["monitor", "--endpoint", pub.endpoint, "--json", "--duration", "3.0", "--rate", "5"]
        )
    finally:
        done.set()
        writer.join()
    assert rc == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(lines) >= 3
    last = lines[-1]
    assert last["state"] == "IDLE" and last["rows"] > 0 and last["lost_rows"] == 0
    seq = last["seq"]
    assert last["channels"]["eng.q_1"] == pytest.approx(seq + 26 / 1000.0)  # column 26
    events = last["events"]
    assert any(e["kind"] == "fault" and e["cause"] == "estop" for e in events), events
    assert main(["monitor", "--endpoint", "tcp://127.0.0.1:9", "--timeout", "0.3"]) == 3


def test_monitor_live_view_renders_state_channels_and_events() -> None:
    import numpy as np
    from rich.console import Console

    from daq.telemetry import Event, Meta, SampleBatch, Status
    from rigctl.cmd_monitor import View

    cols = [
        {"name": "seq", "unit": "1", "role": "header"},
        {"name": "eng.q_1", "unit": "rad", "role": "eng", "channel": "q_1", "joint": "j1"},
        {"name": "eng.p_cap_1", "unit": "Pa", "role": "eng", "channel": "p_cap_1", "joint": "j1"},
        {"name": "ref.j1", "unit": "rad", "role": "ref", "channel": None, "joint": "j1"},
    ]
    view = View()
    view.update(Meta({"layout_id": "L", "rig": "sim2dof", "columns": cols}))
    data = np.array([[40, 41], [0.5, 0.7], [5e6, 6.5e6], [0.5, 0.75]])
    view.update(SampleBatch({"layout_id": "L", "seq0": 40, "n": 2}, data))
    fault = {"name": "PRESSURE", "where": "p_cap_1", "message": "over 7.5 MPa"}
    view.update(Status({"state": "FAULT", "fault": fault, "timing": {"overruns": 3}}))
    view.update(Event({"seq": 41, "kind": "fault", "name": "PRESSURE"}))
    console = Console(record=True, width=80)
    console.print(view.render(lost=2))
    text = console.export_text()
    # 0.7 rad = 40.11°, reference 0.75 rad = 42.97°, 6.5 MPa = 65 bar: the display units.
    for expected in ("sim2dof", "FAULT", "PRESSURE at p_cap_1", "j1", "40.11", "42.97", "+2.86",
                     "p_cap_1", "65.00", "overruns 3", "41 fault"):  # fmt: skip
        assert expected in text, expected
    assert "NO DATA" not in text
    view.last_data = 0.0  # long ago
    console = Console(record=True, width=80)
    console.print(view.render(lost=2))
    assert "NO DATA" in console.export_text()


def test_a_closed_pipe_is_not_a_traceback() -> None:
    """`rigctl status | head -1`: the reader leaves early; rigctl exits 0 without a traceback."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    script = (
        "import sys, rigctl.cmd_status as st\n"
        "from rigctl.main import main\n"
        "def chatty(args):\n"
        "    for _ in range(100000):\n"
        "        print('x' * 80)\n"
        "    return 0\n"
        "st.run = chatty\n"
        "sys.exit(main(['status']))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    assert proc.stdout is not None
    proc.stdout.read(100)  # read a little, then leave like `head`
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
    assert proc.returncode == 0
