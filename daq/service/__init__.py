"""`rig-daq`, the service around the loop: `cli` (command line, signals, exit codes),
`rig_service` (the `Service` object wiring backend, loop, recorder, telemetry, command socket and
systemd notification), `control_api` (what each command does), `housekeeping` (events to the
recorder and telemetry, overrun logs, garbage collection outside the loop; optional parts).
"""

from daq.service.cli import Service, build_parser, main

__all__ = ["Service", "build_parser", "main"]
