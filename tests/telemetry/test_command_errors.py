"""The protocol's error codes: the set the service may raise is exactly the documented table,
and an undocumented code is refused where it is raised (scripts switch on the code)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from daq.commands import ERROR_CODES, CommandError

PROTOCOL = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def documented_codes() -> list[str]:
    text = PROTOCOL.read_text()
    table = text[text.index("### Error codes") :]
    table = table[: table.index("\n\n", table.index("| --- |"))]  # the table alone
    return re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.MULTILINE)


def test_the_codes_are_the_documented_table() -> None:
    assert sorted(ERROR_CODES) == sorted(documented_codes())


@pytest.mark.parametrize("code", ["internal", "bad_frame", "recorder_error"])
def test_a_documented_code_makes_its_reply(code: str) -> None:
    e = CommandError(code, "why it failed")
    assert e.code == code and e.message == "why it failed"
    assert str(e) == f"{code}: why it failed"
    assert e.reply() == {"ok": False, "error": code, "message": "why it failed"}


@pytest.mark.parametrize("code", ["no_such_code", "", "Internal"])
def test_an_undocumented_code_is_refused_naming_the_allowed_ones(code: str) -> None:
    with pytest.raises(ValueError, match=f"unknown command error code '{code}'; use one of") as e:
        CommandError(code, "x")
    assert "'bad_frame'" in str(e.value) and "'internal'" in str(e.value)
