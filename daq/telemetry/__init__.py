"""Telemetry: ZeroMQ PUB of sample batches, meta, events and status (docs/protocol.md)."""

from daq.telemetry.publisher import TelemetryPublisher, TelemetryStats
from daq.telemetry.subscriber import TelemetrySubscriber
from daq.telemetry.wire import (
    SCHEMA_VERSION,
    TOPICS,
    Event,
    Message,
    Meta,
    SampleBatch,
    Status,
    WireError,
    decode,
    layout_id,
)

__all__ = [
    "SCHEMA_VERSION",
    "TOPICS",
    "Event",
    "Message",
    "Meta",
    "SampleBatch",
    "Status",
    "TelemetryPublisher",
    "TelemetryStats",
    "TelemetrySubscriber",
    "WireError",
    "decode",
    "layout_id",
]
