"""The bridge keeps the station's security: with CURVE on, a WebSocket client without a token
standing for a listed key gets nothing (not one frame); a browser Origin must be allowed; a bind
beyond loopback without authentication is refused. Probed with a raw `websockets` client."""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daq.bridge.auth import TokenStore, make_token
from daq.security import ClientKeys, CurveConfig, SecurityError, generate_client_key
from tests.telemetry.conftest import ctx, layout, make_publisher, wait_until, write_rows  # noqa: F401

websockets_sync = pytest.importorskip("websockets.sync.client")
from websockets.exceptions import InvalidMessage, InvalidStatus  # noqa: E402

from daq.bridge.cli import main  # noqa: E402
from daq.bridge.server import Bridge  # noqa: E402


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    d = tmp_path / "keys"
    generate_client_key(d, "bridge", "monitor")
    generate_client_key(d, "viewer", "monitor")
    generate_client_key(d, "op", "controller")
    return d


@pytest.fixture
def curve_bridge(keys: Path, make_publisher: Any) -> Iterator[tuple[Bridge, Any]]:  # noqa: F811
    pub, ring = make_publisher("tcp://127.0.0.1:*", auth=CurveConfig.from_keys_dir(keys))
    tokens = {"viewer": make_token(keys, "viewer"), "op": make_token(keys, "op")}
    bridge = Bridge(pub.endpoint, keys=ClientKeys.load("bridge", keys), port=0,
                    tokens=TokenStore(keys))  # fmt: skip
    bridge.tokens_for_test = tokens  # type: ignore[attr-defined]
    t = threading.Thread(target=bridge.run)
    t.start()
    feeding = threading.Event()

    def feed() -> None:
        k = 0
        while not feeding.is_set():
            write_rows(ring, k, 20)
            k += 20
            feeding.wait(0.02)

    f = threading.Thread(target=feed)
    f.start()
    try:
        assert wait_until(lambda: bridge.rows_out >= 3, 30), "the bridge got no telemetry"
        yield bridge, ring
    finally:
        feeding.set()
        f.join(10)
        bridge.stop()
        t.join(30)
        bridge.close()


def connect(port: int, query: str = "", **kw: Any) -> Any:
    return websockets_sync.connect(
        f"ws://127.0.0.1:{port}/{query}", subprotocols=["foxglove.sdk.v1"], open_timeout=30,
        **kw,
    )  # fmt: skip


def first_data(ws: Any) -> dict[str, Any]:
    """Subscribe to /rig/joints, return the first data message."""
    while True:
        msg = json.loads(ws.recv(timeout=30))
        if msg["op"] == "advertise":
            joints = [c for c in msg["channels"] if c["topic"] == "/rig/joints"]
            if joints:
                break
    ws.send(json.dumps({"op": "subscribe", "subscriptions": [
        {"id": 1, "channelId": joints[0]["id"]}]}))  # fmt: skip
    while True:
        frame = ws.recv(timeout=30)
        if isinstance(frame, bytes) and frame[0] == 0x01:
            assert struct.unpack_from("<I", frame, 1)[0] == 1
            return json.loads(frame[13:])


def test_unauthenticated_clients_get_nothing(curve_bridge: tuple[Bridge, Any]) -> None:
    bridge, _ = curve_bridge
    good = bridge.tokens_for_test["viewer"]  # type: ignore[attr-defined]
    name, _, secret = good.partition(".")
    for query in ("", "?token=", f"?token={name}.wrong", f"?token=op.{secret}",
                  f"?token={name}"):  # fmt: skip
        with pytest.raises(InvalidStatus) as e:
            with connect(bridge.port, query):
                pass
        assert e.value.response.status_code == 401, query
        assert b"token" in e.value.response.body
    with pytest.raises(InvalidStatus) as e:  # a valid token from a foreign web page
        with connect(bridge.port, f"?token={good}", origin="https://evil.example"):
            pass
    assert e.value.response.status_code == 403
    assert bridge.server.clients == []  # none of them was ever a client
    assert bridge.server.refused == 6


def test_token_admits_with_its_keys_role(curve_bridge: tuple[Bridge, Any]) -> None:
    bridge, _ = curve_bridge
    tok = bridge.tokens_for_test["viewer"]  # type: ignore[attr-defined]
    with connect(bridge.port, f"?token={tok}", origin="https://app.foxglove.dev") as ws:
        assert ws.subprotocol == "foxglove.sdk.v1"
        info = json.loads(ws.recv(timeout=30))
        assert info["op"] == "serverInfo"
        assert info["metadata"] == {"client": "viewer", "role": "monitor"}
        assert "position_deg" in first_data(ws)
    tok = bridge.tokens_for_test["op"]  # type: ignore[attr-defined]
    hdr = {"Authorization": f"Bearer {tok}"}
    with connect(bridge.port, additional_headers=hdr) as ws:
        info = json.loads(ws.recv(timeout=30))
        assert info["metadata"] == {"client": "op", "role": "controller"}


def test_revoked_key_revokes_its_token(keys: Path) -> None:
    tok = make_token(keys, "viewer")
    assert TokenStore(keys).check(tok) is not None
    assert (keys / "clients" / "viewer.wstoken").stat().st_mode & 0o077 == 0
    assert tok.split(".", 1)[1] not in (keys / "clients" / "viewer.wstoken").read_text()
    (keys / "clients" / "viewer.key").unlink()
    assert TokenStore(keys).check(tok) is None
    with pytest.raises(SecurityError, match="no listed key 'nobody'"):
        make_token(keys, "nobody")


def test_non_loopback_bind_needs_authentication(
    keys: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--host", "0.0.0.0", "--port", "0", "--estimates", "none"]) == 2
    err = capsys.readouterr().err
    assert "refusing to serve on 0.0.0.0 without authentication" in err
    assert main(["--keys-dir", str(keys), "--make-token", "op"]) == 0
    tok = capsys.readouterr().out.strip()
    assert TokenStore(keys).check(tok) is not None


def test_tls_serves_wss_and_still_needs_the_token(
    curve_bridge: tuple[Bridge, Any], keys: Path, tmp_path: Path
) -> None:
    """--tls-cert/--tls-key: the same admission over wss:// (the token never crosses in clear)."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a test certificate")
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)  # fmt: skip
    from daq.bridge.cli import tls_context

    base, _ = curve_bridge
    tls = Bridge(base.sub.endpoint, keys=ClientKeys.load("bridge", keys), port=0,
                 tokens=TokenStore(keys), ssl=tls_context(cert, key))  # fmt: skip
    try:
        client_ctx = ssl.create_default_context(cafile=str(cert))
        url = f"wss://127.0.0.1:{tls.port}/"
        with pytest.raises(InvalidStatus) as e:
            with websockets_sync.connect(url, subprotocols=["foxglove.sdk.v1"], ssl=client_ctx):
                pass
        assert e.value.response.status_code == 401
        tok = base.tokens_for_test["viewer"]  # type: ignore[attr-defined]
        with websockets_sync.connect(f"{url}?token={tok}", subprotocols=["foxglove.sdk.v1"],
                                     ssl=client_ctx) as ws:  # fmt: skip
            assert json.loads(ws.recv(timeout=30))["metadata"]["client"] == "viewer"
        with pytest.raises(InvalidMessage):  # plain ws:// to a wss server: no handshake
            with connect(tls.port, f"?token={tok}"):
                pass
    finally:
        tls.close()
    with pytest.raises(ValueError, match="go together"):
        tls_context(cert, None)
