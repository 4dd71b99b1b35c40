"""The station around the test: hydraulic power levels and transducer calibration files.

Plain data and pure functions that the loop (`daq.loop.station`), the service and `rigctl`
share; no I/O here but reading and writing calibration files (`daq.station.calfile`).
"""
