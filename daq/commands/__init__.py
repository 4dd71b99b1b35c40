"""Command socket: msgpack request/reply over ZeroMQ (docs/protocol.md, "Command socket")."""

from daq.commands.client import CommandClient, ProtocolError, ServiceUnreachable
from daq.commands.errors import ERROR_CODES, CommandError
from daq.commands.server import ClientIdentity, CommandServer
from daq.commands.spec import COMMANDS, validate

__all__ = [
    "COMMANDS",
    "ERROR_CODES",
    "ClientIdentity",
    "CommandClient",
    "CommandError",
    "CommandServer",
    "ProtocolError",
    "ServiceUnreachable",
    "validate",
]
