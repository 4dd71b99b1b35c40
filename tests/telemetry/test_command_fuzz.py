"""Random bytes and random msgpack at the command server: every message gets a well-formed
error reply, the server stays up, and nothing invalid reaches the handler.

Validity is judged by an oracle written here from docs/protocol.md ("Request", "Commands"), not
by the server's own `validate()`: a schema bug shared by both could not show otherwise."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daq.commands import COMMANDS, ERROR_CODES, ClientIdentity, CommandError, CommandServer

SETTINGS = settings(
    max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck), database=None
)
# Recursive strategies are slow to generate; the seeded fuzz below adds thousands more.
FEW = settings(SETTINGS, max_examples=250)


# ------------------------------------------------------------------ the oracle (docs only)

GAINS = (
    "p i d ff0 ff1 ff2 bias deadband max_output max_error max_error_i max_error_d max_cmd_d "
    "max_i d_filter_hz dp dp_hp_hz"
).split()


def _str256(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= 256


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _gains(v: Any) -> bool:
    return isinstance(v, dict) and bool(v) and all(k in GAINS and _number(x) for k, x in v.items())


def _run_name(v: Any) -> bool:
    return isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}", v) is not None


def _param_text(v: Any) -> bool:
    return isinstance(v, str) and 0 < len(v) <= 262144


def _str_map(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) for k in v)


#: cmd → {argument: (required, check)}, as the protocol's command table states it.
DOC_COMMANDS: dict[str, dict[str, tuple[bool, Callable[[Any], bool]]]] = {
    "status": {},
    "describe": {},
    "arm": {},
    "disarm": {},
    "run": {"experiment": (True, _str_map)},
    "stop": {},
    "estop": {"reason": (False, _str256)},
    "reset": {},
    "set_gains": {"joint": (True, _str256), "gains": (True, _gains)},
    "record_start": {"name": (False, _run_name), "note": (False, _str256)},
    "record_stop": {},
    "load_params": {"text": (True, _param_text), "source": (False, _str256)},
    "params": {},
    "power": {"level": (True, lambda v: v in ("off", "low", "high"))},
    "shunt": {
        "state": (True, lambda v: v in ("on", "off")),
        "channels": (
            False,
            lambda v: isinstance(v, list) and 0 < len(v) <= 64 and all(_str256(x) for x in v),
        ),
    },
    "jog": {
        "joint": (True, _str256),
        "target_deg": (True, _number),
        "velocity_deg_s": (False, _number),
    },
    "calibration": {},
    "calibration_apply": {"text": (True, _param_text), "source": (False, _str256)},
    "calibration_revert": {},
    "calibrate": {
        "procedure": (True, _str256),
        "apply": (False, lambda v: isinstance(v, bool)),
        "drain_s": (False, _number),
        "window_s": (False, _number),
        "settle_s": (False, _number),
        "valve_volts": (False, _number),
        "push_s": (False, _number),
        "reference_pa": (False, _number),
        "reference_sigma_pa": (False, _number),
        "reference_c": (False, _number),
        "reference_sigma_c": (False, _number),
    },
    "calibrate_status": {},
}


def expected_code(cmd: Any, args: Any) -> str | None:
    """The error code the protocol prescribes for `{cmd, args}`, or None if it is valid."""
    if cmd not in DOC_COMMANDS:
        return "unknown_command"
    spec = DOC_COMMANDS[cmd]
    if any(k not in spec for k in args):
        return "bad_args"
    for name, (needed, check) in spec.items():
        if name not in args:
            if needed:
                return "bad_args"
        elif not check(args[name]):
            return "bad_args"
    return None


def expected_request_code(obj: Any) -> str | None:
    """The same for a whole decoded request object (the "Request" section)."""
    if not isinstance(obj, dict) or any(k not in ("cmd", "args", "id") for k in obj):
        return "bad_request"
    if not isinstance(obj.get("cmd"), str):
        return "bad_request"
    args = obj.get("args", {})
    if not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
        return "bad_request"
    rid = obj.get("id")
    int_id = isinstance(rid, int) and not isinstance(rid, bool) and -(2**63) <= rid < 2**64
    if rid is not None and not (int_id or (isinstance(rid, str) and len(rid) <= 64)):
        return "bad_request"
    return expected_code(obj["cmd"], args)


def test_the_oracle_knows_every_command_of_the_spec() -> None:
    assert set(DOC_COMMANDS) == set(COMMANDS)
    for cmd, spec in COMMANDS.items():
        assert {k: a.required for k, a in spec.args.items()} == {
            k: needed for k, (needed, _) in DOC_COMMANDS[cmd].items()
        }


class RecordingHandler:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], ClientIdentity]] = []

    def __call__(self, cmd: str, args: dict[str, Any], who: ClientIdentity) -> dict[str, Any]:
        self.calls.append((cmd, args, who))
        if cmd == "arm":
            raise CommandError("invalid_state", "cannot arm in FAULT")
        return {"state": "IDLE"}


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[CommandServer, RecordingHandler, zmq.Context]]:
    ctx = zmq.Context()
    handler = RecordingHandler()
    srv = CommandServer(ctx, "inproc://commands-fuzz", handler)
    srv.start()
    yield srv, handler, ctx
    srv.stop()
    ctx.destroy(linger=0)


@pytest.fixture(scope="module")
def dealer(server) -> Iterator[zmq.Socket]:
    sock = server[2].socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(server[0].endpoint)
    yield sock
    sock.close()


def roundtrip(sock: zmq.Socket, frames: list[bytes]) -> dict[str, Any]:
    sock.send_multipart(frames)
    assert sock.poll(5000), "the command server did not answer"
    reply_frames = sock.recv_multipart()
    # The envelope (an empty delimiter frame, REQ style) comes back before the reply.
    n_delim = 1 if frames[0] == b"" else 0
    assert reply_frames[:-1] == [b""] * n_delim
    reply = msgpack.unpackb(reply_frames[-1], raw=False)
    assert isinstance(reply, dict) and isinstance(reply["ok"], bool)
    if not reply["ok"]:
        assert reply["error"] in ERROR_CODES and isinstance(reply["message"], str)
        assert reply["message"]
    return reply


def assert_error(reply: dict[str, Any]) -> None:
    assert reply["ok"] is False, reply


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=8) | st.integers(-(2**63), 2**63 - 1), inner, max_size=5)
    ),
    max_leaves=20,
)


@SETTINGS
@given(data=st.binary(max_size=200))
def test_random_bytes_get_an_error_reply(server, dealer, data: bytes) -> None:
    handler = server[1]
    before = len(handler.calls)
    reply = roundtrip(dealer, [data])
    assert_error(reply)
    assert len(handler.calls) == before


@FEW
@given(obj=msgpack_values)
def test_random_msgpack_gets_an_error_reply(server, dealer, obj: Any) -> None:
    handler = server[1]
    before = len(handler.calls)
    assert_error(roundtrip(dealer, [msgpack.packb(obj, use_bin_type=True)]))
    assert len(handler.calls) == before


@FEW
@given(
    cmd=st.sampled_from([*COMMANDS, "Arm", "shutdown", ""]),
    args=st.dictionaries(
        st.sampled_from(["experiment", "joint", "gains", "reason", "name", "note", "x"]),
        msgpack_values,
        max_size=3,
    ),
)
def test_near_miss_requests_reach_the_handler_only_when_valid(server, dealer, cmd, args) -> None:
    handler = server[1]
    before = len(handler.calls)
    code = expected_code(cmd, args)
    reply = roundtrip(dealer, [msgpack.packb({"cmd": cmd, "args": args}, use_bin_type=True)])
    assert len(handler.calls) == before + (code is None)
    if code is None:
        assert handler.calls[-1][:2] == (cmd, args)
        assert reply["ok"] is (cmd != "arm")
    else:
        assert reply["error"] == code, (cmd, args, reply)


def _random_obj(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.randrange(-(2**63), 2**64)
    if kind == 3:
        return rng.uniform(-1e300, 1e300)
    if kind == 4:
        return "".join(rng.choice("cmdargsstatusarm\x00é") for _ in range(rng.randrange(12)))
    if kind == 5:
        return rng.randbytes(rng.randrange(12))
    if kind == 6:
        return [_random_obj(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["cmd", "args", "id", "joint", "gains", "experiment", "x"]
    return {rng.choice(keys): _random_obj(rng, depth + 1) for _ in range(rng.randrange(4))}


def test_seeded_fuzz_thousands_of_messages(server, dealer) -> None:
    rng = random.Random(4)
    handler = server[1]
    for i in range(5000):
        obj = _random_obj(rng)
        body = msgpack.packb(obj, use_bin_type=True)
        if i % 3 == 0:  # truncated or corrupted msgpack
            body = body[: rng.randrange(len(body) + 1)] + rng.randbytes(rng.randrange(3))
        before = len(handler.calls)
        reply = roundtrip(dealer, [body])
        if len(handler.calls) > before:  # only a request the protocol calls valid gets through
            cmd, args, _ = handler.calls[-1]
            assert expected_code(cmd, args) is None, (cmd, args)
        else:
            assert_error(reply)
        if i % 3:  # an intact message: the exact code is known
            code = expected_request_code(obj)
            if code is None:
                assert len(handler.calls) == before + 1
                assert reply["ok"] is (obj["cmd"] != "arm")  # the handler refuses `arm`
            else:
                assert reply["error"] == code, (obj, reply)


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        ([b""], "bad_frame"),
        ([b"a", b"b"], "bad_frame"),
        ([msgpack.packb({"cmd": "status"}) + b"\x00"], "bad_msgpack"),
        ([b"\x92" * 3], "bad_msgpack"),
        ([b"\x81" * 1_100_000], "too_large"),
        ([msgpack.packb([1, 2])], "bad_request"),
        ([msgpack.packb({"cmd": 3, "args": {}})], "bad_request"),
        ([msgpack.packb({"cmd": "status", "args": []})], "bad_request"),
        ([msgpack.packb({"cmd": "status", "extra": 1})], "bad_request"),
        ([msgpack.packb({"cmd": "status", "id": 1.5})], "bad_request"),
        ([msgpack.packb({"cmd": "launch", "args": {}})], "unknown_command"),
        ([msgpack.packb({"cmd": "status", "args": {"x": 1}})], "bad_args"),
        ([msgpack.packb({"cmd": "set_gains", "args": {"joint": "j1"}})], "bad_args"),
        (
            [msgpack.packb({"cmd": "set_gains", "args": {"joint": "j1", "gains": {"q": 1}}})],
            "bad_args",
        ),
        (
            [msgpack.packb({"cmd": "set_gains", "args": {"joint": "j1", "gains": {"p": True}}})],
            "bad_args",
        ),
        (
            [
                msgpack.packb(
                    {"cmd": "set_gains", "args": {"joint": "j1", "gains": {"p": float("nan")}}}
                )
            ],
            "bad_args",
        ),
        ([msgpack.packb({"cmd": "run", "args": {"experiment": "file.toml"}})], "bad_args"),
        ([msgpack.packb({"cmd": "run", "args": {"experiment": {1: 2}}})], "bad_args"),
        ([msgpack.packb({"cmd": "status", "args": {1: 2}})], "bad_request"),
        ([msgpack.packb({"cmd": "status", "id": "x" * 65})], "bad_request"),
        ([b"\x82\xa3cmd\xa6status\xa3cmd\xa3arm"], "bad_request"),  # duplicate key
        ([msgpack.packb({"cmd": "record_start", "args": {"name": "a\nb"}})], "bad_args"),
        ([msgpack.packb({"cmd": "record_start", "args": {"name": "a/b"}})], "bad_args"),
        ([msgpack.packb({"cmd": "record_start", "args": {"name": "x" * 65}})], "bad_args"),
        ([msgpack.packb({"cmd": "estop", "args": {"reason": "x" * 257}})], "bad_args"),
        (
            [msgpack.packb({"cmd": "set_gains", "args": {"joint": "j1", "gains": {}}})],
            "bad_args",
        ),
        (
            [msgpack.packb({"cmd": "set_gains", "args": {"joint": "j1", "gains": {"p": 1e999}}})],
            "bad_args",
        ),
        ([msgpack.packb({"cmd": "arm", "args": {}})], "invalid_state"),
    ],
)
def test_named_malformations(server, dealer, frames, code) -> None:
    reply = roundtrip(dealer, frames)
    assert reply["ok"] is False and reply["error"] == code, reply


def test_server_still_serves_a_req_client_after_the_fuzz(server) -> None:
    sock = server[2].socket(zmq.REQ)
    sock.linger = 0
    sock.connect(server[0].endpoint)
    sock.send(msgpack.packb({"cmd": "status", "args": {}, "id": "x1"}))
    assert sock.poll(5000)
    reply = msgpack.unpackb(sock.recv())
    assert reply == {"ok": True, "state": "IDLE", "id": "x1"}
    assert server[1].calls[-1][2].role == "controller"  # loopback, no CURVE: local controller
    sock.close()


@FEW
@given(name=st.text(max_size=70) | st.from_regex(r"[A-Za-z0-9_.\-]{0,70}", fullmatch=True))
def test_record_start_names_against_the_oracle(server, dealer, name: str) -> None:
    handler = server[1]
    before = len(handler.calls)
    args = {"name": name}
    reply = roundtrip(dealer, [msgpack.packb({"cmd": "record_start", "args": args})])
    code = expected_code("record_start", args)
    assert len(handler.calls) == before + (code is None)
    assert reply["ok"] is (code is None)
    if code is not None:
        assert reply["error"] == code and repr(name)[:20] in reply["message"]
