"""`bench/mutation.py`'s targets stay in step with the code they mutate: every module and test
file a target names exists, and its sentinel — the known-bad mutant whose kill makes a score
trusted — is found in its module (the run breaks its first occurrence). A refactor that moves
the sentinel's text otherwise leaves the target reporting an error and no score, found only at
the next run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _mutation() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_mutation", ROOT / "bench" / "mutation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


TARGETS = _mutation().TARGETS


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_a_targets_files_exist_and_its_sentinel_is_in_its_module(name: str) -> None:
    target = TARGETS[name]
    for rel in target.paths:
        assert (ROOT / rel).is_file(), (name, rel)
    for arg in target.tests:
        if arg.endswith(".py"):
            assert (ROOT / arg).is_file(), (name, arg)
    rel, old, new = target.sentinel
    assert rel in target.paths, (name, rel)
    text = (ROOT / rel).read_text(encoding="utf-8")
    assert old in text, (name, rel, old)
    assert new != old
