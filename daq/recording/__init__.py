"""Lossless recording of the loop's sample rows: run file format, writer thread, reader, export.

`docs/recording.md` specifies the `.rigrun` format byte by byte.
"""

from daq.recording.export import FORMATS, export_run
from daq.recording.format import RunFileError
from daq.recording.reader import CorruptRecord, Run, read_run
from daq.recording.writer import Recorder, RecorderStats

__all__ = [
    "FORMATS",
    "CorruptRecord",
    "Recorder",
    "RecorderStats",
    "Run",
    "RunFileError",
    "export_run",
    "read_run",
]
