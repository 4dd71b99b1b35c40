"""CURVE security for the telemetry and command sockets.

Both sockets bind to loopback unless the profile names a CURVE keys directory; binding anywhere
else without CURVE is refused (`check_bind`). With CURVE, a ZAP handler (pyzmq's
`ThreadAuthenticator`, one per context) admits only the public keys listed in the keys
directory, and tags each connection with a User-Id `"<role>:<name>"`: the command server reads it
from the request frame to decide what the client may do. Unknown keys fail the handshake, so
they get neither telemetry nor replies.

Keys directory (service side)::

    server.key, server.key_secret      the service's own key pair
    clients/<name>.key                 allow-listed client public keys, role in the metadata

Client side: `<name>.key_secret` (the client's pair, written by `rigctl keys generate`) plus the
service's `server.key`.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

log = logging.getLogger(__name__)

Role = Literal["controller", "monitor"]
ROLES: tuple[Role, ...] = ("controller", "monitor")
#: ZAP domain the service's server sockets use.
ZAP_DOMAIN = "rig"
SERVER_NAME = "server"
CLIENTS_DIR = "clients"


class SecurityError(RuntimeError):
    """Keys missing or malformed, or an endpoint that would expose the rig without CURVE."""


@dataclass(frozen=True)
class ClientKey:
    name: str
    role: Role


@dataclass(frozen=True)
class CurveConfig:
    """Server side: the service's key pair and the allow-list {z85 public key: ClientKey}."""

    server_public: bytes
    server_secret: bytes
    clients: dict[bytes, ClientKey] = field(default_factory=dict)

    @classmethod
    def from_keys_dir(cls, keys_dir: str | Path) -> CurveConfig:
        d = Path(keys_dir)
        secret_file = d / f"{SERVER_NAME}.key_secret"
        if not secret_file.is_file():
            raise SecurityError(
                f"{secret_file}: no server key pair (create one with "
                f"`rigctl keys generate NAME --role controller --dir {d}`)"
            )
        public, secret = zmq.auth.load_certificate(secret_file)
        if secret is None:
            raise SecurityError(f"{secret_file}: holds no secret key")
        clients: dict[bytes, ClientKey] = {}
        cdir = d / CLIENTS_DIR
        for f in sorted(cdir.glob("*.key")) if cdir.is_dir() else []:
            pub, _ = zmq.auth.load_certificate(f)
            clients[pub] = ClientKey(f.stem, read_role(f))
        if not clients:
            log.warning("%s: no client keys listed; every client will be refused", cdir)
        return cls(public, secret, clients)

    def apply_server(self, sock: zmq.Socket) -> None:
        """Make `sock` a CURVE server in the service's ZAP domain (call before bind)."""
        sock.curve_secretkey = self.server_secret
        sock.curve_publickey = self.server_public
        sock.curve_server = True
        sock.zap_domain = ZAP_DOMAIN.encode()


@dataclass(frozen=True)
class ClientKeys:
    """Client side: its own pair and the service's public key."""

    public: bytes
    secret: bytes
    server_public: bytes

    @classmethod
    def load(cls, key: str | Path, keys_dir: str | Path | None = None) -> ClientKeys:
        """`key`: a `.key_secret` file, or a key NAME looked up in `keys_dir`. The server's
        public key is `server.key` next to the client key (or in `keys_dir`)."""
        path = Path(key)
        if not path.is_file() and keys_dir is not None:
            path = Path(keys_dir) / f"{key}.key_secret"
        if not path.is_file():
            raise SecurityError(f"client key '{key}' not found (looked for {path})")
        public, secret = zmq.auth.load_certificate(path)
        if secret is None:
            raise SecurityError(f"{path}: holds no secret key (use the .key_secret file)")
        server = Path(keys_dir) if keys_dir is not None else path.parent
        server_file = server / f"{SERVER_NAME}.key"
        if not server_file.is_file():
            raise SecurityError(f"{server_file}: the service's public key is missing")
        server_public, _ = zmq.auth.load_certificate(server_file)
        return cls(public, secret, server_public)

    def apply(self, sock: zmq.Socket) -> None:
        sock.curve_secretkey = self.secret
        sock.curve_publickey = self.public
        sock.curve_serverkey = self.server_public


def read_role(path: Path) -> Role:
    """The `role = "..."` line of a key file's metadata section."""
    for line in path.read_text(encoding="utf-8").splitlines():
        key, _, value = line.strip().partition("=")
        if key.strip() == "role":
            role = value.strip().strip('"')
            if role in ROLES:
                return role
            raise SecurityError(f"{path}: role '{role}' is not one of {list(ROLES)}")
    raise SecurityError(f"{path}: no role in the key's metadata")


def generate_client_key(keys_dir: str | Path, name: str, role: Role) -> tuple[Path, Path]:
    """Create `name`'s key pair in `keys_dir` and list its public key with `role`.

    Creates the server pair on first use. Returns (listed public key, client secret file).
    """
    if role not in ROLES:
        raise SecurityError(f"role must be one of {list(ROLES)}, got '{role}'")
    if not name.isidentifier() or name == SERVER_NAME:
        raise SecurityError(f"key name '{name}' must be an identifier other than 'server'")
    d = Path(keys_dir)
    cdir = d / CLIENTS_DIR
    cdir.mkdir(parents=True, exist_ok=True)
    if not (d / f"{SERVER_NAME}.key_secret").exists():
        _write_pair(d / SERVER_NAME, d / SERVER_NAME, "server")
    listed = cdir / f"{name}.key"
    if listed.exists() or (d / f"{name}.key_secret").exists():
        raise SecurityError(f"a key named '{name}' already exists in {d}")
    _write_pair(listed.with_suffix(""), d / name, role)
    return listed, d / f"{name}.key_secret"


def _write_pair(public_stem: Path, secret_stem: Path, role: str) -> None:
    """Write `<public_stem>.key` and `<secret_stem>.key_secret` in zmq's certificate format
    (readable by `zmq.auth.load_certificate`), with the role in the metadata section."""
    public, secret = zmq.curve_keypair()
    head = f'metadata\n    role = "{role}"\ncurve\n    public-key = "{public.decode()}"\n'
    public_stem.with_suffix(".key").write_text(
        "#   ZeroMQ CURVE public certificate (rig service allow-list)\n" + head
    )
    sec = secret_stem.with_suffix(".key_secret")
    fd = os.open(sec, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("#   ZeroMQ CURVE secret certificate: keep private\n" + head)
        f.write(f'    secret-key = "{secret.decode()}"\n')


# --------------------------------------------------------------------------- ZAP handler


class _RoleAuthenticator(ThreadAuthenticator):
    """Admits listed keys only; the User-Id it hands to the sockets is "<role>:<name>"."""

    def __init__(self, ctx: zmq.Context, cfg: CurveConfig) -> None:
        super().__init__(ctx, log=logging.getLogger(__name__ + ".zap"))
        self.cfg = cfg

    def curve_user_id(self, client_public_key: bytes) -> str:
        key = self.cfg.clients[z85.encode(client_public_key)]
        return f"{key.role}:{key.name}"

    def callback(self, domain: str, key: bytes) -> bool:
        allowed = domain == ZAP_DOMAIN and key in self.cfg.clients
        if not allowed:
            log.warning("refused CURVE client %s (not in the allow-list)", key.decode())
        return allowed


_auth_lock = threading.Lock()
_auth: dict[int, tuple[_RoleAuthenticator, int]] = {}


def acquire_authenticator(ctx: zmq.Context, cfg: CurveConfig) -> None:
    """Start the context's ZAP handler (once; reference counted by the sockets using it)."""
    with _auth_lock:
        entry = _auth.get(id(ctx))
        if entry is not None:
            if entry[0].cfg != cfg:
                raise SecurityError("two different CURVE configurations on one zmq context")
            _auth[id(ctx)] = (entry[0], entry[1] + 1)
            return
        auth = _RoleAuthenticator(ctx, cfg)
        auth.start()
        auth.configure_curve_callback(ZAP_DOMAIN, credentials_provider=auth)
        _auth[id(ctx)] = (auth, 1)


def release_authenticator(ctx: zmq.Context) -> None:
    with _auth_lock:
        entry = _auth.get(id(ctx))
        if entry is None:
            return
        if entry[1] > 1:
            _auth[id(ctx)] = (entry[0], entry[1] - 1)
            return
        del _auth[id(ctx)]
    entry[0].stop()


# --------------------------------------------------------------------------- endpoints


def is_local_endpoint(endpoint: str) -> bool:
    """True for inproc://, ipc:// and tcp:// on a loopback address (127.0.0.0/8, ::1, localhost)."""
    scheme, sep, rest = endpoint.partition("://")
    if not sep:
        raise SecurityError(f"endpoint '{endpoint}' has no transport (expected tcp://host:port)")
    if scheme in ("inproc", "ipc"):
        return True
    if scheme != "tcp":
        return False
    host = rest.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # an interface name or '*': reachable from outside


def connect_endpoint(endpoint: str) -> str:
    """The address a client on this machine connects to for a bind address: a wildcard host
    (`*`, `0.0.0.0`, `::`) becomes loopback; anything else is returned unchanged."""
    scheme, sep, rest = endpoint.partition("://")
    if scheme != "tcp" or not sep:
        return endpoint
    host, _, port = rest.rpartition(":")
    wild = {"*": "127.0.0.1", "0.0.0.0": "127.0.0.1", "[::]": "[::1]", "[*]": "[::1]"}
    return f"tcp://{wild[host]}:{port}" if host in wild else endpoint


def check_bind(endpoint: str, auth: CurveConfig | None, what: str) -> None:
    """Refuse to expose a socket beyond this machine without CURVE."""
    if auth is None and not is_local_endpoint(endpoint):
        raise SecurityError(
            f"{what}: refusing to bind {endpoint} without CURVE: only loopback "
            f"(tcp://127.0.0.1:PORT) is allowed unauthenticated; set network.keys_dir in the "
            f"profile (keys from `rigctl keys generate`) to bind elsewhere"
        )
