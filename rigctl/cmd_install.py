"""`rigctl install`: put the rig software on the rig PC (docs/operations.md, "Install").

Layout it produces (paths under `--root`, `/` on the rig PC):

    /etc/rig/profile.toml                 the chosen hardware profile (validated first)
    /etc/systemd/system/rig-daq.service   units from systemd/, with --prefix and --user applied
    /etc/systemd/system/rig-estimator.service
    /etc/systemd/system/rig.target        enabled: multi-user.target wants it
    /etc/udev/rules.d/60-rig-cpu-latency.rules   lets the user hold /dev/cpu_dma_latency
    /var/lib/rig/                         data: working directory of both services (runs/ …)
    <prefix>/venv/                        Python environment with the rig-daq/rig-estimator scripts
    <prefix>/share/doc/operations.md      the operations manual the units point to

The plan is computed first and printed line by line as it is carried out; `--dry-run` prints the
same plan and changes nothing. Steps that only make sense on the live system (user, venv,
ownership, `systemctl daemon-reload`) are printed as skipped when `--root` is not `/`.
"""

from __future__ import annotations

import argparse
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from daq.profile import ProfileError, load_profile

REPO = Path(__file__).resolve().parents[1]
UNIT_NAMES = ("rig-daq.service", "rig-estimator.service", "rig.target")
DEFAULT_PREFIX = "/opt/rig"
DEFAULT_USER = "rig"
DATA_DIR = "/var/lib/rig"
CONF_DIR = "/etc/rig"
UNIT_DIR = "/etc/systemd/system"
UDEV_RULE = "/etc/udev/rules.d/60-rig-cpu-latency.rules"
#: The loop process holds the PM QoS request ([realtime] cpu_latency_us, daq/loop/realtime.py);
#: the kernel makes the device root-only, the service runs as `User=`.
UDEV_RULE_TEXT = (
    "# rigctl install: the rig service's user may hold the CPU wake-up latency request\n"
    "# ([realtime] cpu_latency_us in the profile; docs/operations.md).\n"
    'KERNEL=="cpu_dma_latency", GROUP="{user}", MODE="0660"\n'
)
_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


class InstallError(RuntimeError):
    """A step of the installation failed; the message names the step."""


@dataclass(frozen=True)
class Step:
    verb: str
    detail: str
    action: Callable[[], None] | None = None  # None: informational or skipped

    def line(self) -> str:
        return f"{self.verb:<10} {self.detail}"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "install",
        help="install the services, user, directories and a profile on the rig PC",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("--profile", required=True, type=Path, help="hardware profile to install")
    p.add_argument(
        "--root", type=Path, default=Path("/"), help="install into this root (default /)"
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--user", default=DEFAULT_USER, help="system user the services run as")
    p.add_argument("--prefix", default=DEFAULT_PREFIX, help="software prefix (holds venv/)")
    p.add_argument(
        "--source",
        type=Path,
        default=None,
        help="source checkout: pip-installed into <prefix>/venv; units and docs come from it "
        "(default: the checkout this rigctl runs from)",
    )
    p.add_argument(
        "--units",
        type=Path,
        default=None,
        help="directory of the unit templates (default: <source>/systemd)",
    )
    p.add_argument("--no-venv", action="store_true", help="leave <prefix>/venv alone")
    p.add_argument("--no-enable", action="store_true", help="do not enable rig.target")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        steps = plan(args)
    except (InstallError, ProfileError) as exc:
        print(f"rigctl install: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        print("rigctl install: dry run, nothing is changed")
    elif Path(args.root).resolve() == Path("/") and os.geteuid() != 0:
        print(
            "rigctl install: installing on / needs root (sudo), or use --dry-run or --root DIR",
            file=sys.stderr,
        )
        return 2
    for step in steps:
        print(step.line(), flush=True)
        if args.dry_run or step.action is None:
            continue
        try:
            step.action()
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"rigctl install: failed at '{step.line()}': {exc}", file=sys.stderr)
            return 1
    done = "planned (dry run)" if args.dry_run else "done"
    hint = (
        "; start with: systemctl start rig.target" if Path(args.root).resolve() == Path("/") else ""
    )
    print(f"rigctl install: {done}{hint}")
    return 0


# --------------------------------------------------------------------------- the plan


def plan(args: argparse.Namespace) -> list[Step]:
    """Every step, in order, computed from the arguments and the current state of the root."""
    root = Path(args.root).resolve()
    live = root == Path("/")
    user, prefix = args.user, args.prefix
    if not _USER_RE.match(user):
        raise InstallError(f"--user {user!r} is not a valid user name ([a-z_][a-z0-9_-]*)")
    if not prefix.startswith("/") or prefix.rstrip("/") in ("", "/"):
        raise InstallError(f"--prefix {prefix!r} must be an absolute directory other than /")
    prefix = prefix.rstrip("/")

    def at(path: str) -> Path:
        return root / path.lstrip("/")

    profile = load_profile(args.profile)
    steps = [
        Step(
            "check",
            f"{args.profile}: rig '{profile.rig.id}', backend "
            f"{profile.backend.kind}, {profile.rig.loop_rate_hz:g} Hz, valid",
        )
    ]
    rec = profile.recording.directory
    if rec.startswith("/") and not (rec + "/").startswith(DATA_DIR + "/"):
        steps.append(
            Step(
                "warning",
                f"recording.directory {rec!r} is outside {DATA_DIR}: "
                "ProtectSystem=strict makes it read-only for the service",
            )
        )
    if profile.realtime.cpu == 0:
        steps.append(
            Step(
                "warning",
                "[realtime] cpu = 0 shares the loop's CPU with the "
                "helper threads (units use CPUAffinity=0); use another CPU",
            )
        )

    steps += _user_steps(user, live)
    steps += _dir_steps(at, user, prefix, live)
    steps += _venv_steps(args, prefix, live)
    steps += _file_steps(Path(args.profile), at(CONF_DIR + "/profile.toml"), 0o644, backup=True)
    source = Path(args.source).resolve() if args.source is not None else REPO
    units = Path(args.units) if args.units is not None else source / "systemd"
    for name in UNIT_NAMES:
        src = units / name
        if not src.is_file():
            raise InstallError(
                f"unit template {src} not found (pass --source CHECKOUT or --units DIR)"
            )
        text = render_unit(src.read_text(encoding="utf-8"), user=user, prefix=prefix)
        steps += _write_steps(text, at(UNIT_DIR + "/" + name), 0o644)
    steps += _udev_steps(at, user, live)
    doc = source / "docs" / "operations.md"
    if doc.is_file():
        steps += _file_steps(doc, at(prefix + "/share/doc/operations.md"), 0o644)
    steps += _systemctl_steps(root, live, enable=not args.no_enable)
    return steps


def render_unit(text: str, *, user: str, prefix: str) -> str:
    """The unit templates name `/opt/rig` and the user `rig`; substitute the chosen ones."""
    out = []
    for line in text.splitlines(keepends=True):
        key = line.split("=", 1)[0]
        if key in ("User", "Group") and "=" in line:
            line = f"{key}={user}\n"
        elif prefix != DEFAULT_PREFIX:
            line = line.replace(DEFAULT_PREFIX + "/", prefix + "/")
        out.append(line)
    return "".join(out)


def _user_steps(user: str, live: bool) -> list[Step]:
    cmd = [
        "useradd",
        "--system",
        "--user-group",
        "--home-dir",
        DATA_DIR,
        "--no-create-home",
        "--shell",
        "/usr/sbin/nologin",
        "--comment",
        "hydraulic rig services",
    ]
    # No --groups dialout: the unit's SupplementaryGroups= gives the service the serial ports.
    cmd.append(user)
    shown = shlex.join(cmd)
    if not live:
        return [Step("skip", f"{shown} (--root is not /: create the user on the rig PC)")]
    if _user_exists(user):
        return [Step("exists", f"user {user}")]
    return [Step("run", shown, lambda: _check_call(cmd))]


def _dir_steps(at: Callable[[str], Path], user: str, prefix: str, live: bool) -> list[Step]:
    steps = []
    for path, mode in (
        (CONF_DIR, 0o755),
        (DATA_DIR, 0o750),
        (prefix, 0o755),
        (prefix + "/share/doc", 0o755),
        (UNIT_DIR, 0o755),
        (str(Path(UDEV_RULE).parent), 0o755),
    ):
        target = at(path)
        if target.is_dir():
            steps.append(Step("exists", str(target)))
        else:
            steps.append(Step("mkdir", f"{target} ({mode:04o})", _mkdir(target, mode)))
    data = at(DATA_DIR)
    if live:
        steps.append(
            Step(
                "chown", f"{user}:{user} {data}", lambda: shutil.chown(data, user=user, group=user)
            )
        )
    else:
        steps.append(
            Step(
                "skip",
                f"chown {user}:{user} {data} (--root is not /; "
                "StateDirectory= fixes it at the first start)",
            )
        )
    return steps


def _venv_steps(args: argparse.Namespace, prefix: str, live: bool) -> list[Step]:
    venv = Path(prefix) / "venv"
    source = Path(args.source).resolve() if args.source is not None else REPO
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--upgrade", str(source)]
    if args.no_venv:
        return [Step("skip", f"{venv} (--no-venv)")]
    if not live:
        return [
            Step(
                "skip",
                f"python -m venv {venv}; {shlex.join(pip)} (--root is not /: a venv "
                "holds absolute paths, build it on the rig PC)",
            )
        ]
    if not (Path(source) / "pyproject.toml").is_file():
        raise InstallError(f"--source {source} holds no pyproject.toml")
    steps = []
    if not (venv / "bin" / "python").exists():
        make = [sys.executable, "-m", "venv", str(venv)]
        steps.append(Step("run", shlex.join(make), lambda: _check_call(make)))
    steps.append(Step("run", shlex.join(pip), lambda: _check_call(pip)))
    return steps


def _file_steps(src: Path, dst: Path, mode: int, backup: bool = False) -> list[Step]:
    return _write_steps(src.read_bytes(), dst, mode, backup=backup, origin=str(src))


def _write_steps(
    content: str | bytes, dst: Path, mode: int, *, backup: bool = False, origin: str = ""
) -> list[Step]:
    data = content.encode("utf-8") if isinstance(content, str) else content
    what = f"{origin} -> {dst}" if origin else str(dst)
    if dst.is_file() and dst.read_bytes() == data:
        return [Step("unchanged", what)]
    steps = []
    if backup and dst.is_file():
        prev = dst.with_name(dst.name + ".prev")
        steps.append(Step("backup", f"{dst} -> {prev}", lambda: os.replace(dst, prev)))
    steps.append(Step("write", f"{what} ({mode:04o})", lambda: _write(dst, data, mode)))
    return steps


def _udev_steps(at: Callable[[str], Path], user: str, live: bool) -> list[Step]:
    steps = _write_steps(UDEV_RULE_TEXT.format(user=user), at(UDEV_RULE), 0o644)
    # The rule applies when the device node is made (boot); a live install re-applies it now.
    cmd = ["udevadm", "trigger", "--sysname-match=cpu_dma_latency"]
    if not live:
        return [*steps, Step("skip", f"{shlex.join(cmd)} (--root is not /; applies at boot)")]
    if shutil.which("udevadm") is None:
        return [*steps, Step("skip", f"{shlex.join(cmd)} (udevadm not found; applies at boot)")]
    reload = ["udevadm", "control", "--reload"]
    return [
        *steps,
        Step("run", shlex.join(reload), lambda: _check_call(reload)),
        Step("run", shlex.join(cmd), lambda: _check_call(cmd)),
    ]


def _systemctl_steps(root: Path, live: bool, *, enable: bool) -> list[Step]:
    steps = []
    if live:
        reload = ["systemctl", "daemon-reload"]
        steps.append(Step("run", shlex.join(reload), lambda: _check_call(reload)))
    if not enable:
        return [*steps, Step("skip", "systemctl enable rig.target (--no-enable)")]
    cmd = (
        ["systemctl", "enable", "rig.target"]
        if live
        else ["systemctl", f"--root={root}", "enable", "rig.target"]
    )
    if shutil.which("systemctl") is None:
        return [*steps, Step("skip", f"{shlex.join(cmd)} (systemctl not found)")]
    return [*steps, Step("run", shlex.join(cmd), lambda: _check_call(cmd))]


# --------------------------------------------------------------------------- actions


def _mkdir(path: Path, mode: int) -> Callable[[], None]:
    def make() -> None:
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(mode)  # mkdir's mode is filtered by the umask

    return make


def _write(dst: Path, data: bytes, mode: int) -> None:
    # Write beside and rename: a half-written unit or profile is never seen by systemd.
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    os.replace(tmp, dst)


def _check_call(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
