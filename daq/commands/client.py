"""Client side of the command socket (used by `rigctl`; any REQ or DEALER client will do)."""

from __future__ import annotations

import itertools
import logging
from typing import Any

import msgpack
import zmq

from daq.security import ClientKeys

log = logging.getLogger(__name__)


class ServiceUnreachable(ConnectionError):
    """No reply within the timeout: service down, wrong endpoint, or our key is not listed."""


class ProtocolError(RuntimeError):
    """The reply is not a well-formed `{ok: ...}` map."""


class CommandClient:
    """Synchronous request/reply with a timeout.

    Uses a REQ socket; after a timeout the socket is discarded (a REQ socket that missed its
    reply cannot send again) and a fresh one is made for the next request.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        timeout: float = 2.0,
        keys: ClientKeys | None = None,
        ctx: zmq.Context | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.keys = keys
        self._own_ctx = ctx is None
        self.ctx = ctx if ctx is not None else zmq.Context()
        self._sock: zmq.Socket | None = None
        self._ids = itertools.count(1)

    def _socket(self) -> zmq.Socket:
        if self._sock is None:
            sock = self.ctx.socket(zmq.REQ)
            sock.linger = 0
            if self.keys is not None:
                self.keys.apply(sock)
            sock.connect(self.endpoint)
            self._sock = sock
        return self._sock

    def request(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send `{cmd, args, id}`; return the reply map (`ok` true or false).

        Raises `ServiceUnreachable` on timeout and `ProtocolError` on a malformed reply.
        """
        rid = next(self._ids)
        body = msgpack.packb({"cmd": cmd, "args": args or {}, "id": rid}, use_bin_type=True)
        sock = self._socket()
        sock.send(body)
        if not sock.poll(int(self.timeout * 1000)):
            sock.close(linger=0)
            self._sock = None
            raise ServiceUnreachable(
                f"no reply from {self.endpoint} within {self.timeout:g} s (is the service "
                f"running? with CURVE: is this client's key listed, is the server key right?)"
            )
        raw = sock.recv()
        try:
            reply = msgpack.unpackb(raw, raw=False)
        except Exception as e:
            raise ProtocolError(f"reply from {self.endpoint} is not msgpack: {e}") from e
        if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
            raise ProtocolError(f"reply from {self.endpoint} is not an {{ok: ...}} map: {reply!r}")
        if reply.get("id", rid) != rid:
            raise ProtocolError(f"reply id {reply.get('id')!r} does not match request id {rid}")
        return reply

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None
        if self._own_ctx:
            self.ctx.term()

    def __enter__(self) -> CommandClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
