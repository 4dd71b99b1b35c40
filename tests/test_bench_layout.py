"""Benchmarks run from a fresh clone as `python bench/NAME.py`: the script's directory is then
first on `sys.path`, so a bench named like a package (`bench/controller.py`) shadows it for
every other import ("'controller' is not a package"), and a bench importing `tests` needs the
test tree on the path (issue 16, item 8)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHES = sorted((ROOT / "bench").glob("*.py"))
#: Top-level names a bench file must not take: the project's packages and what they import.
PACKAGES = {"daq", "controller", "estimator", "tests", "bench", "numpy", "scipy", "zmq"}


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_there_are_benches() -> None:
    assert len(BENCHES) >= 5


def test_no_bench_shadows_a_package() -> None:
    assert not {p.stem for p in BENCHES} & PACKAGES


def test_no_bench_imports_from_tests() -> None:
    offenders = {p.name for p in BENCHES if "tests" in _imported_roots(p)}
    assert not offenders, offenders
