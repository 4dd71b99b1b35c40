"""CURVE over TCP on loopback: controller keys drive, monitor keys watch, unknown keys get
nothing; and no socket binds beyond loopback without CURVE."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daq.commands import ClientIdentity, CommandClient, CommandServer, ServiceUnreachable
from daq.security import (
    ClientKeys,
    CurveConfig,
    SecurityError,
    generate_client_key,
    is_local_endpoint,
)
from daq.telemetry import Meta, TelemetrySubscriber
from tests.conditions import GENEROUS_S


@pytest.fixture
def keys_dir(tmp_path: Path) -> Path:
    generate_client_key(tmp_path, "alice", "controller")
    generate_client_key(tmp_path, "bob", "monitor")
    # An unknown key: a valid pair made elsewhere, whose public key is not listed here.
    generate_client_key(tmp_path / "elsewhere", "mallory", "controller")
    return tmp_path


def test_roles_are_read_from_the_keys_dir(keys_dir: Path) -> None:
    cfg = CurveConfig.from_keys_dir(keys_dir)
    assert sorted((k.name, k.role) for k in cfg.clients.values()) == [
        ("alice", "controller"),
        ("bob", "monitor"),
    ]
    with pytest.raises(SecurityError, match="already exists"):
        generate_client_key(keys_dir, "alice", "monitor")
    with pytest.raises(SecurityError, match="role"):
        generate_client_key(keys_dir, "carol", "admin")  # type: ignore[arg-type]


def test_curve_roles_over_tcp(keys_dir: Path, make_publisher, ctx) -> None:
    cfg = CurveConfig.from_keys_dir(keys_dir)
    calls: list[tuple[str, ClientIdentity]] = []

    def handler(cmd: str, args: dict[str, Any], who: ClientIdentity) -> dict[str, Any]:
        calls.append((cmd, who))
        return {"state": "ARMED" if cmd == "arm" else "IDLE"}

    srv = CommandServer(ctx, "tcp://127.0.0.1:*", handler, auth=cfg)
    srv.start()
    pub, _ring = make_publisher("tcp://127.0.0.1:*", auth=cfg)
    alice = ClientKeys.load("alice", keys_dir)
    bob = ClientKeys.load("bob", keys_dir)
    mallory = ClientKeys.load(keys_dir / "elsewhere" / "mallory.key_secret", keys_dir)
    try:
        with CommandClient(srv.endpoint, keys=alice, ctx=ctx) as c:
            assert c.request("arm")["ok"] is True
        assert calls == [("arm", ClientIdentity("alice", "controller", True))]

        with CommandClient(srv.endpoint, keys=bob, ctx=ctx) as c:
            reply = c.request("arm")
            assert reply["ok"] is False and reply["error"] == "forbidden"
            assert c.request("status")["ok"] is True
            assert c.request("describe")["ok"] is True
        assert [cmd for cmd, _ in calls] == ["arm", "status", "describe"]

        with CommandClient(srv.endpoint, keys=mallory, ctx=ctx, timeout=1.0) as c:
            with pytest.raises(ServiceUnreachable):
                c.request("arm")
        with CommandClient(srv.endpoint, ctx=ctx, timeout=1.0) as c:  # no CURVE at all
            with pytest.raises(ServiceUnreachable):
                c.request("status")
        assert len(calls) == 3

        # Telemetry: the monitor key subscribes; the unknown key receives nothing while the
        # listed one keeps receiving (so the silence is the ZAP handler's, not a slow start).
        watcher = TelemetrySubscriber(pub.endpoint, keys=bob, ctx=ctx)
        intruder = TelemetrySubscriber(pub.endpoint, keys=mallory, ctx=ctx)
        try:
            assert isinstance(watcher.wait_meta(GENEROUS_S), Meta)
            assert intruder.recv(timeout=1.5) is None
            pub.request_meta()
            assert watcher.recv(timeout=GENEROUS_S) is not None
        finally:
            watcher.close()
            intruder.close()
    finally:
        srv.stop()


@pytest.mark.parametrize("endpoint", ["tcp://0.0.0.0:*", "tcp://*:5556", "tcp://eth0:5556"])
def test_non_loopback_bind_without_curve_is_refused(endpoint: str, ctx) -> None:
    assert not is_local_endpoint(endpoint)
    srv = CommandServer(ctx, endpoint, lambda c, a, w: {})
    with pytest.raises(SecurityError, match="without CURVE"):
        srv.start()


@pytest.mark.parametrize(
    "endpoint", ["tcp://127.0.0.1:5555", "tcp://localhost:1", "tcp://[::1]:5", "inproc://x"]
)
def test_loopback_endpoints_are_local(endpoint: str) -> None:
    assert is_local_endpoint(endpoint)
