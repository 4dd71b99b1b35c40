"""Who may open the bridge's WebSocket: tokens bound to CURVE roles, Origin, bind address.

The service admits a command or telemetry client by its CURVE key; a browser cannot hold one,
so the bridge admits a WebSocket client by a token that stands for a listed key: a token is
made for a key NAME already listed in the keys directory (`clients/NAME.key`, which carries its
role), and only its SHA-256 is stored (`clients/NAME.wstoken`, mode 0600), so reading the keys
directory does not reveal it. Removing `clients/NAME.key` revokes the key and its token.

    rig-bridge --profile P --make-token NAME          # prints NAME.<secret> once

A client presents it in the URL (`ws://HOST:PORT/?token=NAME.<secret>`; browsers cannot set
WebSocket headers) or as `Authorization: Bearer NAME.<secret>`. The check runs on the HTTP
upgrade request, before any WebSocket frame: a client without a valid token gets HTTP 401 and
no byte of data.

Origin: a browser page on any site can open a WebSocket to 127.0.0.1 (cross-site WebSocket
hijacking), so a request that carries an `Origin` header must name an allowed origin (the
Foxglove app by default); clients that send none (native programs, the Foxglove desktop app's
native socket) are not browsers acting for a third-party page.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from daq.security import CLIENTS_DIR, SecurityError, read_role

TOKEN_SUFFIX = ".wstoken"
#: Origins a browser page may connect from unless `--allow-origin` says otherwise.
DEFAULT_ORIGINS: tuple[str, ...] = ("https://app.foxglove.dev", "https://studio.foxglove.dev")


@dataclass(frozen=True)
class Access:
    """An admitted WebSocket client: the key NAME its token stands for, and that key's role."""

    name: str
    role: str


#: Without CURVE the bridge, like the service, serves loopback only and asks for no token; such
#: clients get what a monitor key gets (the command socket's own role check applies on top).
LOCAL = Access("local", "monitor")


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def make_token(keys_dir: str | Path, name: str) -> str:
    """Create (or replace) the WebSocket token of the listed key NAME; return it (shown once)."""
    cdir = Path(keys_dir) / CLIENTS_DIR
    listed = cdir / f"{name}.key"
    if not name.isidentifier() or not listed.is_file():
        raise SecurityError(
            f"no listed key '{name}' in {cdir} (a token stands for a key: create it first with "
            f"`rigctl keys generate {name} --role monitor|controller`)"
        )
    read_role(listed)  # the key must carry a valid role
    secret = secrets.token_urlsafe(32)
    path = cdir / f"{name}{TOKEN_SUFFIX}"
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f'sha256 = "{_digest(secret)}"\n')
    tmp.replace(path)
    return f"{name}.{secret}"


class TokenStore:
    """The tokens of a keys directory: NAME → (stored digest, role of the listed key)."""

    def __init__(self, keys_dir: str | Path) -> None:
        self.keys_dir = Path(keys_dir)
        self._tokens: dict[str, tuple[str, str]] = {}
        cdir = self.keys_dir / CLIENTS_DIR
        for f in sorted(cdir.glob(f"*{TOKEN_SUFFIX}")) if cdir.is_dir() else []:
            name = f.name[: -len(TOKEN_SUFFIX)]
            listed = cdir / f"{name}.key"
            if not listed.is_file():
                continue  # the key was revoked: so is its token
            digest = f.read_text().partition('"')[2].partition('"')[0]
            if len(digest) == 64:
                self._tokens[name] = (digest, read_role(listed))

    def __len__(self) -> int:
        return len(self._tokens)

    def check(self, token: str | None) -> Access | None:
        """The client a token admits, or None (wrong, unknown, revoked or missing)."""
        if not token:
            return None
        name, _, secret = token.partition(".")
        entry = self._tokens.get(name)
        if entry is None or not secret:
            return None
        if not hmac.compare_digest(entry[0], _digest(secret)):
            return None
        return Access(name, entry[1])


def request_token(path: str, authorization: str | None) -> str | None:
    """The token of an upgrade request: `?token=` in the URL, else `Authorization: Bearer`."""
    query = parse_qs(urlsplit(path).query)
    if query.get("token"):
        return query["token"][0]
    if authorization and authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return None


def origin_allowed(origin: str | None, allowed: tuple[str, ...]) -> bool:
    """No Origin (not a browser) or one of `allowed` (exact, or `*` for any)."""
    if origin is None:
        return True
    return "*" in allowed or origin.rstrip("/") in {a.rstrip("/") for a in allowed}


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, authenticated: bool) -> None:
    """Refuse a bind beyond loopback without authentication, as the service refuses one
    without CURVE (daq.security.check_bind)."""
    if not authenticated and not is_loopback_host(host):
        raise SecurityError(
            f"refusing to serve on {host} without authentication: only loopback (127.0.0.1) "
            f"is allowed unauthenticated; run with CURVE keys (--profile with network.keys_dir, "
            f"--key NAME) so WebSocket clients need a token (rig-bridge --make-token NAME)"
        )
