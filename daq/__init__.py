"""The rig service: profiles, backends, the 1 kHz loop, safety, recording, telemetry, commands.

Importing `daq` never imports a vendor driver (nidaqmx, a serial port): backends are chosen from
the profile and imported lazily by `daq.backends.factory`.
"""
