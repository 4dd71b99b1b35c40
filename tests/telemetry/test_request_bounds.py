"""Everything a client sends is bounded before it is decoded: frame size, nesting depth, map and
array lengths, object count (exact error codes); a subscriber flooding (un)subscriptions is cut
off while the others keep receiving."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import zmq

from daq.commands import ClientIdentity, CommandServer
from daq.commands.bounds import MAX_ARRAY_LEN, MAX_DEPTH, MAX_ITEMS, MAX_MAP_LEN, check_shape
from daq.commands.errors import CommandError
from daq.commands.server import MAX_MESSAGE_BYTES
from daq.telemetry import TelemetrySubscriber
from daq.telemetry.subscriptions import SUBSCRIPTION_FLOOD_PER_S
from tests.telemetry.conftest import wait_until, write_rows

WAIT_S = 30.0


def _nested(depth: int) -> Any:
    obj: Any = 1
    for _ in range(depth):
        obj = [obj]
    return obj


def _request(**args: Any) -> bytes:
    return msgpack.packb({"cmd": "run", "args": args}, use_bin_type=True)


def _code(body: bytes) -> str | None:
    try:
        check_shape(body)
    except CommandError as e:
        return e.code
    return None


def test_the_scan_lets_ordinary_requests_through() -> None:
    exp = {"name": "x", "home_deg": [40.0, 30.0], "segments": [{"trajectory": {"kind": "sine",
           "amplitude_deg": [[1.0] * 20] * 2}, "controller": {"kind": "pid"}}]}  # fmt: skip
    assert _code(_request(experiment=exp)) is None
    assert _code(_request(text="x" * 300_000)) is None  # a long string is skipped, not scanned
    # Exactly at each bound (the request map and `args` are two of the levels).
    assert _code(_request(x=_nested(MAX_DEPTH - 2))) is None
    assert _code(_request(x={str(i): 0 for i in range(MAX_MAP_LEN)})) is None
    assert _code(_request(x=[0] * MAX_ARRAY_LEN)) is None
    assert _code(b"\x92\x01") is None  # truncated: left to the decoder


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (_request(x=_nested(MAX_DEPTH - 1)), "nested deeper"),
        (b"\x91" * 100_000, "nested deeper"),
        (_request(x={str(i): 0 for i in range(MAX_MAP_LEN + 1)}), "map of 1025"),
        (_request(x=[0] * (MAX_ARRAY_LEN + 1)), "array of 4097"),
        (b"\xdd\xff\xff\xff\xff", "array of 4294967295"),  # claims 4 G items, holds none
        (b"\xdf\x7f\xff\xff\xff", "map of 2147483647"),
        (_request(x=[[0] * 4000] * 5), f"more than {MAX_ITEMS}"),
    ],
)
def test_the_scan_refuses_past_each_bound(body: bytes, why: str) -> None:
    with pytest.raises(CommandError, match=why) as e:
        check_shape(body)
    assert e.value.code == "too_complex"


@pytest.fixture
def server() -> Iterator[tuple[CommandServer, zmq.Context, list[str]]]:
    ctx = zmq.Context()
    calls: list[str] = []

    def handler(cmd: str, args: dict[str, Any], who: ClientIdentity) -> dict[str, Any]:
        calls.append(cmd)
        return {"state": "IDLE"}

    srv = CommandServer(ctx, "tcp://127.0.0.1:*", handler)
    srv.start()
    yield srv, ctx, calls
    srv.stop()
    ctx.destroy(linger=0)


def _ask(ctx: zmq.Context, endpoint: str, body: bytes) -> dict[str, Any] | None:
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(endpoint)
    try:
        sock.send_multipart([b"", body])
        if not sock.poll(WAIT_S * 1000):
            return None
        reply: dict[str, Any] = msgpack.unpackb(sock.recv_multipart()[-1], raw=False)
        return reply
    finally:
        sock.close()


@pytest.mark.parametrize(
    ("body", "code"),
    [
        # ~500 kB of tiny map pairs: refused at the scan, never decoded.
        (_request(experiment={f"k{i}": i for i in range(60_000)}), "too_complex"),
        (_request(experiment=_nested(200)), "too_complex"),
        (_request(experiment={"a": [0] * 10_000}), "too_complex"),
        (b"\x81" * 1_100_000, "too_large"),
        (b"\xc1", "bad_msgpack"),
    ],
)
def test_the_server_refuses_with_the_exact_code(server, body: bytes, code: str) -> None:
    srv, ctx, calls = server
    reply = _ask(ctx, srv.endpoint, body)
    assert reply is not None and reply["ok"] is False and reply["error"] == code, reply
    assert calls == []


def test_a_message_beyond_the_transport_limit_is_dropped_and_the_server_goes_on(server) -> None:
    srv, ctx, calls = server
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    sock.connect(srv.endpoint)
    try:
        sock.send_multipart([b"", b"\x00" * (MAX_MESSAGE_BYTES + 1)])
        assert monitor.poll(WAIT_S * 1000), "libzmq kept a connection sending a huge message"
        assert not sock.poll(0) and calls == []
    finally:
        monitor.close()
        sock.close()
    ok = _ask(ctx, srv.endpoint, msgpack.packb({"cmd": "status"}))
    assert ok is not None and ok["ok"] is True and calls == ["status"]


def test_a_subscription_flooder_is_cut_off_and_the_others_keep_receiving(
    make_publisher, ctx
) -> None:
    pub, ring = make_publisher("tcp://127.0.0.1:*", batch=10)
    honest = TelemetrySubscriber(pub.endpoint, ctx=ctx)
    flooder = ctx.socket(zmq.SUB)
    flooder.linger = 0
    monitor = flooder.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    flooder.connect(pub.endpoint)
    try:
        assert honest.wait_meta(WAIT_S) is not None
        for i in range(20 * SUBSCRIPTION_FLOOD_PER_S):
            flooder.subscribe(b"x%d" % i)
            flooder.unsubscribe(b"x%d" % i)
        assert wait_until(lambda: pub.stats.flooders_cut_off >= 1, WAIT_S)
        assert monitor.poll(WAIT_S * 1000), "the flooder was never disconnected"
        write_rows(ring, 0, 30)
        got = 0
        while got < 30:
            msg = honest.recv(WAIT_S)
            assert msg is not None, "the honest subscriber stopped receiving"
            got += getattr(msg, "n", 0)
        assert honest.lost_rows == 0
    finally:
        monitor.close()
        flooder.close()
        honest.close()


def _sized(first: int, length_bytes: int, payload: bytes, extra: bytes = b"") -> bytes:
    """A str/bin/ext object with an explicit length header (even where msgpack would pick a
    shorter form), so every header width is scanned."""
    return bytes([first]) + len(payload).to_bytes(length_bytes, "big") + extra + payload


def _every_type() -> list[bytes]:
    """One encoded object of every msgpack type, each at the edges of its header byte range
    (fixint 127 / −32, fixmap and fixarray of 0 and 15, fixstr of 0 and 31) and of its length
    widths: a scan that skips any of them wrongly loses its place in what follows."""
    pk = lambda x, **kw: msgpack.packb(x, use_bin_type=True, **kw)  # noqa: E731
    objs: list[Any] = [0, 127, -1, -32, -33, 128, 255, 256, 65535, 65536, 2**32, 2**64 - 1]
    objs += [-128, -129, -32768, -32769, -(2**31) - 1, -(2**63), None, True, False, 1.5]
    objs += ["", "a" * 31, "a" * 32, "a" * 256, "a" * 65536, b"", b"x" * 256, b"x" * 65536]
    objs += [{}, {i: i for i in range(15)}, {i: i for i in range(16)}]
    objs += [[], list(range(15)), list(range(16))]
    objs += [msgpack.ExtType(1, b"x" * k) for k in (1, 2, 4, 8, 16, 3, 256, 65536)]
    out = [pk(x) for x in objs] + [pk(1.5, use_single_float=True)]
    out += [_sized(0xD9, 1, b"s"), _sized(0xDA, 2, b"st"), _sized(0xDB, 4, b"str")]
    out += [_sized(0xC4, 1, b"b"), _sized(0xC5, 2, b"bi"), _sized(0xC6, 4, b"bin")]
    out += [_sized(0xC7, 1, b"e", b"\x05"), _sized(0xC8, 2, b"ex", b"\x05")]
    out += [_sized(0xC9, 4, b"ext", b"\x05")]
    out += [b"\xdd\x00\x00\x00\x02\x01\x02", b"\xdf\x00\x00\x00\x01\x01\x02"]  # array32, map32
    out += [b"\xdc\x00\x01\x01", b"\xde\x00\x01\x01\x02"]  # array16, map16 of one
    return out


def _array(items: list[bytes]) -> bytes:
    return b"\xdc" + len(items).to_bytes(2, "big") + b"".join(items)


def test_the_scan_keeps_its_place_through_every_type() -> None:
    """After one object of every type, a container exactly at the depth bound passes and one
    level more is refused, as is one item past an array's bound: the scan followed each."""
    objs = _every_type()
    assert all(msgpack.unpackb(o, strict_map_key=False) is not None or o == b"\xc0" for o in objs)
    deepest = msgpack.packb(_nested(MAX_DEPTH - 1))  # inside one wrapping array
    assert _code(_array([*objs, deepest])) is None
    deeper = msgpack.packb(_nested(MAX_DEPTH))
    assert _code(_array([*objs, deeper])) == "too_complex"
    long = msgpack.packb([0] * (MAX_ARRAY_LEN + 1))
    assert _code(_array([*objs, long])) == "too_complex"
    assert _code(_array([*objs, msgpack.packb([0] * MAX_ARRAY_LEN)])) is None
    for obj in objs:  # each alone, before a container at the bound and one past it
        assert _code(_array([obj, deepest])) is None, obj[:8]
        assert _code(_array([obj, deeper])) == "too_complex", obj[:8]


def test_exactly_max_items_pass_and_one_more_is_refused() -> None:
    """The wrapper, 4 arrays and their items: exactly MAX_ITEMS objects, then one more."""
    sizes = [4095, 4095, 4095, MAX_ITEMS - 5 - 3 * 4095]
    assert 1 + len(sizes) + sum(sizes) == MAX_ITEMS
    ok = msgpack.packb([[0] * n for n in sizes])
    assert _code(ok) is None
    sizes[-1] += 1
    with pytest.raises(CommandError, match=f"more than {MAX_ITEMS} objects"):
        check_shape(msgpack.packb([[0] * n for n in sizes]))
