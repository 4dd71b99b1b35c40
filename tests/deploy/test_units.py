"""The systemd units: `systemd-analyze verify` passes, and the properties the rig relies on.

`verify` checks that every ExecStart= binary exists, so it runs with `--root` on a temporary
tree holding the units, stand-in executables at the installed paths and a copy of the host's
system units (the targets ours depend on). It exits 0 even on unknown keys or unparsable
values, which it only prints, so any output about our units counts as a failure too.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from rigctl import cmd_install

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "systemd"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
SYSTEM_UNIT_DIRS = [Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")]

needs_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None,
    reason="systemd-analyze not installed (Debian package 'systemd'); units not verified",
)


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Sections → key → every value (systemd allows repeated keys, configparser does not)."""
    out: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out[section][key.strip()].append(value.strip())
    return out


def verify_root(
    tmp: Path, units: list[Path], prefix: str = "/opt/rig"
) -> subprocess.CompletedProcess[str]:
    assert SYSTEMD_ANALYZE is not None
    system = next((d for d in SYSTEM_UNIT_DIRS if (d / "multi-user.target").exists()), None)
    if system is None:
        pytest.skip("systemd-analyze present but no system units to verify against")
    shutil.copytree(system, tmp / "usr/lib/systemd/system", symlinks=True, dirs_exist_ok=True)
    bindir = tmp / prefix.lstrip("/") / "venv/bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for exe in ("rig-daq", "rig-estimator"):
        (bindir / exe).write_text("#!/bin/sh\n")
        (bindir / exe).chmod(0o755)
    etc = tmp / "etc/systemd/system"
    etc.mkdir(parents=True, exist_ok=True)
    for u in units:
        if u.parent != etc:
            shutil.copy(u, etc / u.name)
    return subprocess.run(
        [SYSTEMD_ANALYZE, "verify", "--man=no", f"--root={tmp}", *(u.name for u in units)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@needs_analyze
def test_repository_units_verify_cleanly(tmp_path: Path) -> None:
    units = sorted(UNITS.glob("*.service")) + sorted(UNITS.glob("*.target"))
    assert [u.name for u in units] == ["rig-daq.service", "rig-estimator.service", "rig.target"]
    res = verify_root(tmp_path, units)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "" and res.stderr.strip() == "", res.stdout + res.stderr


@needs_analyze
def test_verify_check_catches_a_broken_unit(tmp_path: Path) -> None:
    # The check above can fail: a mistyped value is only printed by verify, and we catch it.
    bad = tmp_path / "src" / "rig-daq.service"
    bad.parent.mkdir()
    bad.write_text(
        (UNITS / "rig-daq.service")
        .read_text()
        .replace("CPUSchedulingPolicy=fifo", "CPUSchedulingPolicy=fifoo")
    )
    res = verify_root(tmp_path / "root", [bad])
    assert "fifoo" in res.stdout + res.stderr


@needs_analyze
def test_installed_units_with_other_prefix_and_user_verify(tmp_path: Path) -> None:
    root = tmp_path / "root"
    args = argparse.Namespace(
        profile=ROOT / "hw_profiles/sim-2dof.toml",
        root=root,
        dry_run=False,
        user="rigop",
        prefix="/srv/rig",
        source=None,
        units=UNITS,
        no_venv=False,
        no_enable=True,
    )
    assert cmd_install.run(args) == 0
    etc = root / "etc/systemd/system"
    daq = parse_unit(etc / "rig-daq.service")
    assert daq["Service"]["ExecStart"] == [
        "/srv/rig/venv/bin/rig-daq --profile /etc/rig/profile.toml"
    ]
    assert daq["Service"]["User"] == ["rigop"]
    res = verify_root(root, [etc / n for n in cmd_install.UNIT_NAMES], prefix="/srv/rig")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "" and res.stderr.strip() == "", res.stdout + res.stderr


# --------------------------------------------------------------------------- what the rig needs


def test_daq_unit_is_a_watched_real_time_hardened_notify_service() -> None:
    u = parse_unit(UNITS / "rig-daq.service")
    s = u["Service"]
    assert s["Type"] == ["notify"] and s["NotifyAccess"] == ["main"]
    assert float(s["WatchdogSec"][0]) > 0
    assert s["Restart"] == ["on-failure"]
    assert int(u["Unit"]["StartLimitBurst"][0]) > 0 and u["Unit"]["StartLimitIntervalSec"]
    assert s["CPUSchedulingPolicy"] == ["fifo"] and s["CPUSchedulingPriority"]
    assert s["CPUAffinity"] and int(s["LimitRTPRIO"][0]) >= 80
    assert s["LimitMEMLOCK"] == ["infinity"]
    assert s["User"] == ["rig"]
    assert s["ExecStart"] == ["/opt/rig/venv/bin/rig-daq --profile /etc/rig/profile.toml"]
    assert s["ProtectSystem"] == ["strict"] and s["ReadWritePaths"] == ["/var/lib/rig"]
    assert s["WorkingDirectory"] == ["/var/lib/rig"]
    assert s["NoNewPrivileges"] == ["yes"] and s["PrivateTmp"] == ["yes"]
    assert s["DevicePolicy"] == ["closed"]
    allowed = {v.split()[0] for v in s["DeviceAllow"]}
    assert {"char-ni*", "char-ttyUSB"} <= allowed
    # These would break the loop: SCHED_FIFO refused, numba's JIT refused, devices hidden.
    for key in ("RestrictRealtime", "MemoryDenyWriteExecute", "PrivateDevices"):
        assert key not in s


def test_estimator_follows_daq_but_daq_never_depends_on_it() -> None:
    daq = parse_unit(UNITS / "rig-daq.service")
    est = parse_unit(UNITS / "rig-estimator.service")
    assert "rig-daq.service" in " ".join(est["Unit"]["Wants"])
    assert "rig-daq.service" in " ".join(est["Unit"]["After"])
    for key in ("Requires", "BindsTo", "Requisite", "PartOf", "Wants", "Upholds", "OnFailure"):
        assert "rig-estimator" not in " ".join(daq["Unit"].get(key, [])), key
    # The estimator must not stop daq through its own dependencies either.
    for key in ("PropagatesStopTo", "StopPropagatedFrom", "Conflicts"):
        assert key not in est["Unit"]
    assert est["Service"]["Restart"] == ["on-failure"]
    assert est["Service"]["CPUAffinity"] == daq["Service"]["CPUAffinity"]


def test_target_pulls_in_both_with_wants_and_is_enabled_at_boot() -> None:
    t = parse_unit(UNITS / "rig.target")
    wants = " ".join(t["Unit"]["Wants"]).split()
    assert sorted(wants) == ["rig-daq.service", "rig-estimator.service"]
    assert "Requires" not in t["Unit"] and "BindsTo" not in t["Unit"]
    assert t["Install"]["WantedBy"] == ["multi-user.target"]
    for name in ("rig-daq.service", "rig-estimator.service"):
        assert parse_unit(UNITS / name)["Unit"]["PartOf"] == ["rig.target"]
