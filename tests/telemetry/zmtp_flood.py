"""A subscription flooder written from the wire protocol (ZMTP 3.0 over a plain TCP socket), as
an outside tester would: no libzmq on its side, so nothing throttles or reconnects for it.

    python -m tests.telemetry.zmtp_flood tcp://127.0.0.1:PORT SECONDS [MAX_CONNECTIONS]

floods subscribe/unsubscribe pairs (a new topic each time), reconnecting whenever the service
closes the connection, and prints one JSON line: connections opened, connections the service
closed, messages sent, and whether the last connection was still open when the time was up.
(The fastest flooder, a libzmq XSUB, is `bench/safety_flood_kill.py --flooder`.)
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass

#: ZMTP 3.0 greeting, NULL mechanism, as client (rfc.zeromq.org/spec/23).
GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" * 32


def _command(name: bytes, props: dict[bytes, bytes]) -> bytes:
    body = bytes([len(name)]) + name
    for k, v in props.items():
        body += bytes([len(k)]) + k + struct.pack(">I", len(v)) + v
    return bytes([0x04, len(body)]) + body


def _message(body: bytes) -> bytes:
    return bytes([0x00, len(body)]) + body


#: How long a connection that has flooded may stay open after the flood's end.
CLOSE_WAIT_S = 5.0

READY = _command(b"READY", {b"Socket-Type": b"XSUB"})


def _burst(start: int, pairs: int) -> bytes:
    out = bytearray()
    for i in range(start, start + pairs):
        topic = b"flood-%d" % i
        out += _message(b"\x01" + topic) + _message(b"\x00" + topic)
    return bytes(out)


def _handshake(conn: socket.socket) -> None:
    """Greeting, then READY once the service's greeting is in (as libzmq does)."""
    conn.settimeout(5.0)
    conn.sendall(GREETING)
    got = b""
    while len(got) < len(GREETING):
        chunk = conn.recv(len(GREETING) - len(got))
        if not chunk:
            raise ConnectionResetError("closed during the greeting")
        got += chunk
    conn.sendall(READY)
    conn.settimeout(0.05)


@dataclass
class FloodResult:
    connections: int = 0
    closed_by_service: int = 0
    sent: int = 0
    open_at_end: bool = False


def _closed(conn: socket.socket) -> bool:
    """True when the service has closed (or reset) the connection. Nothing to read is not a
    close: on a socket with a timeout Python waits that long for data first and then raises
    TimeoutError, which is an OSError too (taking it for a close had the flooder hang up by itself
    whenever a busy service took longer than the timeout to cut it off)."""
    try:
        data = conn.recv(65536, socket.MSG_DONTWAIT)
    except (BlockingIOError, TimeoutError):
        return False
    except OSError:
        return True
    return data == b""


def flood(endpoint: str, seconds: float, max_connections: int = 1_000_000) -> FloodResult:
    host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
    res = FloodResult()
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end and res.connections < max_connections:
        try:
            conn = socket.create_connection((host, int(port)), timeout=1.0)
        except OSError:
            time.sleep(0.01)
            continue
        res.connections += 1
        conn.settimeout(0.05)
        closed = False
        sent_here = 0
        # Bytes of the current burst not yet on the wire. A timed-out `sendall` would not say how
        # much of a burst it sent, and starting the next burst there would cut a frame in two:
        # libzmq would then close the connection for a protocol error, not the service's guard.
        pending = b""
        try:
            _handshake(conn)
            while time.monotonic() < end:
                if not pending:
                    pending = _burst(n, 500)
                    n += 500
                try:
                    pending = pending[conn.send(pending) :]
                    if not pending:
                        sent_here += 1000
                except TimeoutError:  # the service reads no more: has it closed us?
                    pass
                if _closed(conn):
                    closed = True
                    break
            # Time is up mid-flood: a connection that has flooded must be closed within
            # CLOSE_WAIT_S of its last message (one that just opened has not flooded yet).
            give_up = time.monotonic() + CLOSE_WAIT_S
            while not closed and sent_here >= 1000 and time.monotonic() < give_up:
                closed = _closed(conn)
                time.sleep(0.01)
        except OSError:
            closed = True
        res.sent += sent_here
        if closed:
            res.closed_by_service += 1
        elif sent_here >= 1000:
            res.open_at_end = True
        conn.close()
    return res


if __name__ == "__main__":
    cap = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
    print(json.dumps(asdict(flood(sys.argv[1], float(sys.argv[2]), cap))), flush=True)
