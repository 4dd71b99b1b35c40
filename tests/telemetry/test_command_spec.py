"""The argument checks of daq/commands/spec.py at their exact boundaries, called directly
(the fuzz judges codes against the protocol's oracle; these pin each limit and each message)."""

from __future__ import annotations

from typing import Any

import pytest

from daq.commands import CommandError
from daq.commands.spec import COMMANDS, LANE, validate


def refusal(cmd: str, args: dict[str, Any]) -> str | None:
    try:
        validate(cmd, args)
    except CommandError as e:
        assert e.code in ("bad_args", "unknown_command")
        return e.message
    return None


PARAM = "str (a parameter file's TOML text, ≤ 262144 chars)"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "got 0 characters"),
        ("x", None),
        ("x" * 262_144, None),
        ("x" * 262_145, "got 262145 characters"),
        (b"x", "got bytes b'x'"),
    ],
)
def test_parameter_text_bounds(text: Any, why: str | None) -> None:
    got = refusal("load_params", {"text": text})
    assert got == (None if why is None else f"load_params: argument 'text' must be {PARAM}; {why}")


@pytest.mark.parametrize(
    ("reason", "why"),
    [("x" * 256, None), ("x" * 257, "got 257 characters"), (None, "got NoneType None")],
)
def test_short_string_bound(reason: Any, why: str | None) -> None:
    got = refusal("estop", {"reason": reason})
    assert got == (
        None if why is None else f"estop: argument 'reason' must be str (≤ 256 chars); {why}"
    )


def test_a_shown_value_is_cut_at_sixty_characters() -> None:
    fits = "y" * 58  # repr: 60 characters with its quotes
    cut = "y" * 59
    assert refusal("jog", {"joint": "j", "target_deg": fits}).endswith(f"got str '{fits}'")
    assert refusal("jog", {"joint": "j", "target_deg": cut}).endswith("got str '" + "y" * 58 + "…")


@pytest.mark.parametrize(
    ("value", "ok"),
    [(1, True), (-2.5, True), (float("inf"), False), (float("nan"), False), (True, False),
     ("1", False)],
)  # fmt: skip
def test_finite_numbers(value: Any, ok: bool) -> None:
    assert (refusal("jog", {"joint": "j", "target_deg": value}) is None) == ok


@pytest.mark.parametrize(("level", "ok"), [("off", True), ("low", True), ("high", True),
                                           ("max", False), ("", False)])  # fmt: skip
def test_power_levels(level: str, ok: bool) -> None:
    assert (refusal("power", {"level": level}) is None) == ok


@pytest.mark.parametrize(
    ("args", "ok"),
    [({"state": "on"}, True), ({"state": "off", "channels": ["p_cap_1"]}, True),
     ({"state": "open"}, False), ({}, False), ({"state": "on", "channels": []}, False),
     ({"state": "on", "channels": "p_cap_1"}, False), ({"state": "on", "channels": [3]}, False),
     ({"state": "on", "channels": ["x"] * 64}, True),
     ({"state": "on", "channels": ["x"] * 65}, False)],
)  # fmt: skip
def test_shunt_arguments(args: dict[str, Any], ok: bool) -> None:
    assert (refusal("shunt", args) is None) == ok


def test_bools_maps_and_gains() -> None:
    assert refusal("calibrate", {"procedure": "position", "apply": True}) is None
    assert refusal("calibrate", {"procedure": "position", "apply": 1}).endswith("got int 1")
    assert refusal("run", {"experiment": {}}) is None
    assert refusal("run", {"experiment": {1: 2}}).endswith("got a map with non-string keys")
    assert refusal("set_gains", {"joint": "j", "gains": {"q": 1.0}}).endswith(
        "got unknown gain 'q'"
    )
    assert refusal("set_gains", {"joint": "j", "gains": {"p": 1.0, "i": 0.5}}) is None
    assert refusal("set_gains", {"joint": "j", "gains": {"p": 1.0, "i": "0"}}).endswith(
        "got gains.i = '0'"
    )
    assert refusal("set_gains", {"joint": "j", "gains": [1]}).endswith("got list [1]")


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("a" * 64, None),
        ("a" * 65, "65 characters"),
        ("a/" + "b" * 70, "72 characters"),  # too long is said first
        ("", "empty"),
        ("a b", "character ' ' at position 1"),
        (".a", "starts with '.'"),
        ("-a", "starts with '-'"),
    ],
)
def test_run_names_say_the_first_thing_wrong(name: str, why: str | None) -> None:
    got = refusal("record_start", {"name": name})
    if why is None:
        assert got is None
    else:
        assert got is not None and got.endswith(f"({why})"), got


def test_arguments_missing_unknown_and_optional() -> None:
    assert refusal("record_start", {}) is None  # both optional
    assert refusal("set_gains", {"gains": {"p": 1.0}}) == (
        "set_gains: missing argument 'joint' (str (≤ 256 chars))"
    )
    assert refusal("jog", {"joint": "j", "target_deg": 1.0, "speed": 1}) == (
        "jog: unknown argument 'speed' (allowed: joint, target_deg, velocity_deg_s)"
    )
    assert refusal("arm", {"now": 1}) == "arm: unknown argument 'now' (allowed: none)"
    long = "z" * 100
    got = refusal(long, {})
    assert got is not None and got.startswith(f"unknown command '{'z' * 64}'; known: status, ")
    assert got.endswith(", ".join(COMMANDS).split(", ")[-1])


def test_the_safety_lane_is_estop_stop_and_status() -> None:
    assert LANE == {"estop", "stop", "status"}


def test_an_argument_after_a_missing_optional_one_is_still_checked() -> None:
    # record_start's `name` is optional and comes first: its absence must not end the checks.
    assert refusal("record_start", {"note": 5}) == (
        "record_start: argument 'note' must be str (≤ 256 chars); got int 5"
    )
    assert refusal("calibrate", {"procedure": "position", "push_s": "2"}) is not None


def test_the_command_table_cannot_be_changed_at_run_time() -> None:
    # The roles (read_only, safety_stop) decide what a monitor key may send: a handler or a
    # plug-in that flips one by mistake must fail, not widen the monitor's rights.
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        COMMANDS["arm"].read_only = True  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        COMMANDS["estop"].args["reason"].required = True  # type: ignore[misc]
