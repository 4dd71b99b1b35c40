"""The bridge honours CURVE on the ZeroMQ side: a listed monitor key gets rows through, an
unknown key gets nothing; with the profile's keys_dir and no --key, rig-bridge refuses to start."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from daq.security import ClientKeys, CurveConfig, generate_client_key
from tests.telemetry.conftest import ctx, layout, make_publisher, wait_until, write_rows  # noqa: F401

pytest.importorskip("foxglove")
from daq.bridge.cli import main
from daq.bridge.server import Bridge


def test_listed_key_bridges_rows_unknown_key_gets_none(tmp_path: Path, make_publisher) -> None:  # noqa: F811
    keys = tmp_path / "keys"
    generate_client_key(keys, "view", "monitor")
    generate_client_key(tmp_path / "elsewhere", "mallory", "monitor")
    pub, ring = make_publisher("tcp://127.0.0.1:*", auth=CurveConfig.from_keys_dir(keys))
    good = Bridge(pub.endpoint, keys=ClientKeys.load("view", keys), port=0, rate_hz=100.0)
    bad = Bridge(
        pub.endpoint, keys=ClientKeys.load(tmp_path / "elsewhere" / "mallory.key_secret", keys),
        port=0, rate_hz=100.0,
    )  # fmt: skip
    threads = [threading.Thread(target=b.run) for b in (good, bad)]
    for t in threads:
        t.start()
    try:
        k = 0
        while not wait_until(lambda: good.rows_out >= 5, 0.1):
            write_rows(ring, k, 20)
            k += 20
            assert k < 200_000, "the listed key's bridge never received rows"
        assert bad.rows_in == 0 and bad.rows_out == 0
        assert good.rows_in >= 10 * good.rows_out  # 100 Hz of a 1 kHz layout: every 10th row
    finally:
        for b in (good, bad):
            b.stop()
        for t in threads:
            t.join(30)
        good.close()
        bad.close()


def test_keys_dir_without_key_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = Path(__file__).resolve().parents[2] / "hw_profiles" / "sim-2dof.toml"
    text = profile.read_text().replace(
        "telemetry_batch = 20", f'telemetry_batch = 20\nkeys_dir = "{tmp_path}"'
    )
    p = tmp_path / "curve.toml"
    p.write_text(text)
    assert main(["--profile", str(p), "--port", "0"]) == 2
    assert "give --key NAME" in capsys.readouterr().err
    assert main(["--rate", "0"]) == 2
