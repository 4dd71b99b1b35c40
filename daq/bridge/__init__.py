"""Telemetry as Foxglove channels: JSON schemas and messages (`channels`), the live WebSocket
bridge `rig-bridge` (`server`, `cli`), shared by `rigctl export --format mcap`."""
