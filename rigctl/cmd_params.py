"""`rigctl params load FILE` / `rigctl params show`: the service's plant-parameter set.

    rigctl params load runs/identify-…/online-params.toml [--profile P]
    rigctl params show

`load` sends the file's text to the running service (`load_params`), which checks it against
its profile (rig id, joint count, the reference model's parameter names) and, in IDLE or ARMED
only, makes it the set model-based segments (`pid_ff`, `gravity_pd`) and the pre-run motion check
use from the next `run` on. With `--profile`, a profile on a user-written model also has the
file's parameter names checked against that model here (the service never imports the
estimator, so it cannot). `show` prints the set's source, load time, SHA-256 and values.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rigctl.common import UsageError, add_connection_options, add_json_option, call


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "params",
        help="load or show the service's plant-parameter set",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="params_command", metavar="ACTION", required=True)
    load = sub.add_parser("load", help="load a parameter file into the running service")
    load.add_argument("file", type=Path, help="parameter file (TOML)")
    add_connection_options(load)
    add_json_option(load)
    load.set_defaults(func=run_load)
    show = sub.add_parser("show", help="show the service's current parameter set")
    add_connection_options(show)
    add_json_option(show)
    show.set_defaults(func=run_show)


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such parameter file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it: {exc}") from None


def check_against_profile(text: str, profile_path: Path) -> None:
    """What the service checks, plus the parameter names of a user model (needs the
    estimator, which only rigctl may import)."""
    import tomllib

    from controller.paramfile import check_compatible, load_params
    from daq.param_set import profile_model
    from daq.profile import ProfileError, load_profile
    from daq.profile.plant import known_params

    try:
        profile = load_profile(profile_path)
        data = tomllib.loads(text)
        base = known_params(profile) if profile.plant is not None else None
        expected = None
        if base is not None:
            from estimator.models import load_models

            models = load_models(profile_model(profile), base, profile_dir=profile_path.parent)
            expected = {m.name: list(m.names) for m in models}
        check_compatible(data, profile.rig.id, base, expected)
        load_params(data, base)
    except (ProfileError, tomllib.TOMLDecodeError, ValueError, TypeError, AttributeError) as exc:
        raise UsageError(f"parameter file refused: {exc}") from None


def run_load(args: argparse.Namespace) -> int:
    text = read_text(args.file)
    if args.profile is not None:
        # The connection's --profile (its [network]) is also the profile the file must fit.
        check_against_profile(text, Path(args.profile))
    source = str(args.file.resolve())
    return call(args, "load_params", {"text": text, "source": source[-256:]}, show=_show_loaded)


def _show_loaded(reply: dict[str, Any]) -> None:
    p = reply.get("params") or {}
    print(
        f"params: loaded {p.get('source')} (sha256 {str(p.get('sha256', ''))[:16]}…, "
        f"rig {p.get('rig') or '?'}, models {', '.join(p.get('models') or []) or '-'})"
    )


def run_show(args: argparse.Namespace) -> int:
    return call(args, "params", show=_show_set)


def _show_set(reply: dict[str, Any]) -> None:
    p = reply.get("params")
    if not p:
        print("params: none loaded (model-based segments are refused; see docs/operations.md)")
        return
    for key in ("source", "loaded_utc", "sha256", "rig", "models"):
        if key in p:
            print(f"{key:>11}: {p[key]}")
    values = reply.get("values") or {}
    for key, v in (values.get("global") or {}).items():
        print(f"{key:>22} = {v:.6g}")
    for j, row in enumerate(values.get("joints") or []):
        print(f"joint {j + 1}:", file=sys.stdout)
        for key, v in row.items():
            text = ", ".join(f"{x:.4g}" for x in v) if isinstance(v, list) else f"{v:.6g}"
            print(f"{key:>22} = {text}")
