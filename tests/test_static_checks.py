"""The project's own static checks run with the tests: lint, import layering, types."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    found = BIN / name
    if found.exists():
        return str(found)
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[dev]'")
    return path


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_lint_is_clean() -> None:
    r = _run(_tool("ruff"), "check", ".")
    assert r.returncode == 0, r.stdout + r.stderr


def test_import_layers_hold() -> None:
    """Layering: controller is pure, daq imports no estimator, nothing imports rigctl."""
    r = _run(_tool("lint-imports"))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_mypy_is_clean() -> None:
    r = _run(_tool("mypy"))
    assert r.returncode == 0, r.stdout + r.stderr
