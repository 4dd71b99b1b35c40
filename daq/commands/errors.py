"""Error codes of the command socket (`{ok: false, error: <code>, message: <text>}`).

The codes are part of the protocol (docs/protocol.md lists them); scripts switch on them, so a
handler may only raise the codes listed here.
"""

from __future__ import annotations

#: code → when it is used. Codes up to `forbidden` come from the server itself (the request never
#: reaches the handler); the rest come from the service's handler.
ERROR_CODES: dict[str, str] = {
    "bad_frame": "the message is not one request frame (empty, or more than one body frame)",
    "too_large": "the request frame exceeds the size limit",
    "bad_msgpack": "the request frame is not exactly one valid msgpack object",
    "too_complex": "the request nests too deep, holds too long a map or array, or too many objects",
    "bad_request": "the request is not a map {cmd: str, args: map} (optionally id)",
    "unknown_command": "cmd is not a command of this protocol version",
    "bad_args": "an argument is missing, unknown, of the wrong type or out of range",
    "busy": "too many requests are waiting for the service's worker; try again (the safety "
    "lane — estop, stop, status — is never busy)",
    "forbidden": "the client's key is a monitor key; the command needs a controller key",
    "invalid_state": "the command is not valid in the service's current state",
    "rejected": "the request is well formed but its content was refused (e.g. limits)",
    "recorder_error": "the recorder could not start or stop (disk, quota, already recording)",
    "internal": "the service failed while handling the command (a bug; see its log)",
}


class CommandError(Exception):
    """A refusal with a protocol error code; the command server turns it into the reply."""

    def __init__(self, code: str, message: str) -> None:
        if code not in ERROR_CODES:
            raise ValueError(f"unknown command error code '{code}'; use one of {list(ERROR_CODES)}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def reply(self) -> dict[str, object]:
        return {"ok": False, "error": self.code, "message": self.message}
