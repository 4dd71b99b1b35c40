"""A cut-off connection that still sends is shut down again only while its descriptor number
still leads to the same peer: libzmq may have closed it and handed the number to a new connection
before the monitor says so (CI once saw three connections closed and two cut off)."""

from __future__ import annotations

import os
import socket
import time

import pytest

from daq.telemetry.subscriptions import SubscriptionGuard, _Connection


def _pair(listener: socket.socket) -> tuple[socket.socket, socket.socket]:
    client = socket.create_connection(listener.getsockname(), timeout=5.0)
    server, _ = listener.accept()
    return client, server


def _is_shut(client: socket.socket) -> bool:
    """The server side was shut down: the client reads end-of-file."""
    client.settimeout(0.5)
    try:
        return client.recv(1) == b""
    except TimeoutError:
        return False


@pytest.fixture
def listener():
    sock = socket.create_server(("127.0.0.1", 0))
    yield sock
    sock.close()


def test_a_recut_skips_a_new_connection_on_the_old_number(listener) -> None:
    guard = SubscriptionGuard(b"meta")
    old_client, old_server = _pair(listener)
    fd = old_server.fileno()
    conn = _Connection()
    guard._cut(fd, conn, time.monotonic(), "test")
    assert _is_shut(old_client), "the first cut must shut the flooder's connection down"
    assert guard.cut_off == 1
    # The old connection is gone and a new one gets its number (as libzmq's accept would).
    new_client, new_server = _pair(listener)
    os.dup2(new_server.fileno(), fd)
    try:
        guard._cut(fd, conn, time.monotonic() + 2.0, "still sending after being cut off")
        assert not _is_shut(new_client), "a re-cut shut down a connection nobody judged"
        assert guard.cut_off == 1
    finally:
        for s in (old_client, old_server, new_client, new_server):
            s.close()


def test_a_recut_of_the_same_peer_shuts_it_down_again(listener) -> None:
    guard = SubscriptionGuard(b"meta")
    client, server = _pair(listener)
    try:
        conn = _Connection()
        t = time.monotonic()
        guard._cut(server.fileno(), conn, t, "test")
        assert conn.peer == client.getsockname()
        # Shut down again (the first shutdown's end-of-file seen by the peer, it may have ignored
        # it): the same peer is still on the number, so the re-cut goes through.
        assert _is_shut(client)
        guard._cut(server.fileno(), conn, t + 2.0, "still sending after being cut off")
        with pytest.raises(OSError):
            server.send(b"x" * 65536 * 4)  # shut for writing: the re-cut reached the socket
        assert guard.cut_off == 1
    finally:
        client.close()
        server.close()
