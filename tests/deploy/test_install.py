"""`rigctl install`: the dry-run plan, a real install into a temporary root, re-installs."""

from __future__ import annotations

import argparse
import shutil
import stat
from pathlib import Path

import pytest

from rigctl import cmd_install

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "hw_profiles/sim-2dof.toml"
HAS_SYSTEMCTL = shutil.which("systemctl") is not None


def rigctl(*argv: str | Path) -> int:
    parser = argparse.ArgumentParser(prog="rigctl")
    cmd_install.register(parser.add_subparsers(required=True))
    args = parser.parse_args([str(a) for a in argv])
    return int(args.func(args))


def tree(root: Path) -> dict[str, str]:
    """Relative path → kind/mode (or symlink target) of everything under root."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "-> " + str(p.readlink())
        else:
            out[rel] = ("d" if p.is_dir() else "f") + oct(stat.S_IMODE(p.lstat().st_mode))
    return out


def test_dry_run_prints_the_plan_and_touches_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "root"
    assert rigctl("install", "--profile", PROFILE, "--root", root, "--dry-run") == 0
    out = capsys.readouterr().out.splitlines()
    assert not root.exists()
    assert out[0] == "rigctl install: dry run, nothing is changed"
    assert out[1].startswith("check ") and "rig 'sim2dof', backend sim, 1000 Hz, valid" in out[1]
    assert out[2].startswith("skip ") and "useradd --system" in out[2]
    assert " rig (--root is not /" in out[2]
    body = out[1:-1]
    for path in ("etc/rig", "var/lib/rig", "opt/rig", "etc/systemd/system"):
        assert any(line.split()[:2] == ["mkdir", f"{root}/{path}"] for line in body), path
    assert any(line.startswith("skip ") and "chown rig:rig" in line for line in body)
    assert any(line.startswith("skip ") and "-m venv /opt/rig/venv" in line for line in body)
    assert f"write      {PROFILE} -> {root}/etc/rig/profile.toml (0644)" in body
    for unit in cmd_install.UNIT_NAMES:
        assert f"write      {root}/etc/systemd/system/{unit} (0644)" in body
    if HAS_SYSTEMCTL:
        assert body[-1] == f"run        systemctl --root={root} enable rig.target"
    assert out[-1] == "rigctl install: planned (dry run)"


def test_real_install_into_a_root_produces_the_tree_the_dry_run_announced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "root"
    assert rigctl("install", "--profile", PROFILE, "--root", root, "--dry-run") == 0
    planned = capsys.readouterr().out.splitlines()
    assert rigctl("install", "--profile", PROFILE, "--root", root) == 0
    done = capsys.readouterr().out.splitlines()
    assert done[:-1] == planned[1:-1]  # same steps, in the same order
    assert done[-1] == "rigctl install: done"

    got = tree(root)
    expected = {
        "etc/rig": "d0o755",
        "etc/rig/profile.toml": "f0o644",
        "var/lib/rig": "d0o750",
        "opt/rig": "d0o755",
        "opt/rig/share/doc": "d0o755",
        "etc/systemd/system": "d0o755",
        "etc/systemd/system/rig-daq.service": "f0o644",
        "etc/systemd/system/rig-estimator.service": "f0o644",
        "etc/systemd/system/rig.target": "f0o644",
        "etc/udev/rules.d": "d0o755",
        "etc/udev/rules.d/60-rig-cpu-latency.rules": "f0o644",
    }
    if (ROOT / "docs/operations.md").exists():
        expected["opt/rig/share/doc/operations.md"] = "f0o644"
    if HAS_SYSTEMCTL:
        expected["etc/systemd/system/multi-user.target.wants/rig.target"] = (
            "-> /etc/systemd/system/rig.target"
        )
    for path, kind in expected.items():
        assert got.get(path) == kind, path
    leftovers = {p for p in got if p not in expected}
    assert leftovers <= {
        "etc",
        "etc/systemd",
        "var",
        "var/lib",
        "opt",
        "opt/rig/share",
        "etc/systemd/system/multi-user.target.wants",
        "etc/udev",
    }, leftovers
    rule = (root / "etc/udev/rules.d/60-rig-cpu-latency.rules").read_text()
    assert 'KERNEL=="cpu_dma_latency", GROUP="rig", MODE="0660"' in rule
    assert (root / "etc/rig/profile.toml").read_bytes() == PROFILE.read_bytes()
    for unit in cmd_install.UNIT_NAMES:
        assert (root / "etc/systemd/system" / unit).read_text() == (
            ROOT / "systemd" / unit
        ).read_text()


def test_reinstall_is_idempotent_and_keeps_the_previous_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "root"
    assert rigctl("install", "--profile", PROFILE, "--root", root, "--no-enable") == 0
    capsys.readouterr()
    assert rigctl("install", "--profile", PROFILE, "--root", root, "--no-enable") == 0
    again = capsys.readouterr().out.splitlines()
    assert not any(line.startswith(("write", "mkdir", "backup")) for line in again), again
    # The profile, the three units, the udev rule and the manual.
    docs = int((ROOT / "docs/operations.md").exists())
    assert sum(line.startswith("unchanged") for line in again) == 5 + docs

    other = ROOT / "hw_profiles/sim-1dof.toml"
    assert rigctl("install", "--profile", other, "--root", root, "--no-enable") == 0
    out = capsys.readouterr().out
    conf = root / "etc/rig"
    assert f"backup     {conf}/profile.toml -> {conf}/profile.toml.prev" in out
    assert (conf / "profile.toml").read_bytes() == other.read_bytes()
    assert (conf / "profile.toml.prev").read_bytes() == PROFILE.read_bytes()


def test_prefix_and_user_are_rendered_into_the_units(tmp_path: Path) -> None:
    root = tmp_path / "root"
    assert (
        rigctl(
            "install",
            "--profile",
            PROFILE,
            "--root",
            root,
            "--prefix",
            "/srv/rig/",
            "--user",
            "rigop",
            "--no-enable",
        )
        == 0
    )
    daq = (root / "etc/systemd/system/rig-daq.service").read_text()
    assert "ExecStart=/srv/rig/venv/bin/rig-daq --profile /etc/rig/profile.toml\n" in daq
    assert "Documentation=file:/srv/rig/share/doc/operations.md\n" in daq
    assert "User=rigop\n" in daq and "Group=rigop\n" in daq
    assert "/opt/rig/" not in daq and "User=rig\n" not in daq
    assert (root / "srv/rig").is_dir()


def test_bad_profile_is_refused_before_anything_happens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(PROFILE.read_text().replace("loop_rate_hz = 1000.0", "loop_rate_hz = 5.0"))
    root = tmp_path / "root"
    assert rigctl("install", "--profile", bad, "--root", root) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "rig.loop_rate_hz" in err
    assert not root.exists()


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--user", "Rig Op", "not a valid user name"),
        ("--prefix", "opt/rig", "must be an absolute directory"),
        ("--prefix", "/", "must be an absolute directory"),
        ("--units", "/nonexistent", "unit template /nonexistent/rig-daq.service not found"),
    ],
)
def test_bad_options_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, message: str
) -> None:
    root = tmp_path / "root"
    assert rigctl("install", "--profile", PROFILE, "--root", root, option, value) == 2
    assert message in capsys.readouterr().err
    assert not root.exists()


def test_plan_on_the_live_system_creates_user_venv_and_reloads(tmp_path: Path) -> None:
    # Only the plan is computed for root=/ (nothing is executed): it must contain the steps
    # that a --root install skips.
    args = argparse.Namespace(
        profile=PROFILE,
        root=Path("/"),
        dry_run=True,
        user="rigtest_nouser",
        prefix=str(tmp_path),
        source=None,
        units=ROOT / "systemd",
        no_venv=False,
        no_enable=False,
    )
    lines = [s.line() for s in cmd_install.plan(args)]
    text = "\n".join(lines)
    assert any(
        line.startswith("run ") and "useradd --system" in line and line.endswith(" rigtest_nouser")
        for line in lines
    )
    assert "chown      rigtest_nouser:rigtest_nouser /var/lib/rig" in text
    assert f"-m venv {tmp_path}/venv" in text
    assert f"{tmp_path}/venv/bin/python -m pip install --upgrade {ROOT}" in text
    if HAS_SYSTEMCTL:
        assert lines[-2:] == [
            "run        systemctl daemon-reload",
            "run        systemctl enable rig.target",
        ]
    assert not any("skip " in line and "--root is not /" in line for line in lines)


def test_live_install_without_root_privileges_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []
    # Whatever the plan, nothing may run: stand-in steps record what would have been done.
    monkeypatch.setattr(
        cmd_install, "plan", lambda args: [cmd_install.Step("run", "x", lambda: ran.append("x"))]
    )
    monkeypatch.setattr(cmd_install.os, "geteuid", lambda: 1000)
    assert rigctl("install", "--profile", PROFILE) == 2
    assert "needs root" in capsys.readouterr().err
    assert ran == []
