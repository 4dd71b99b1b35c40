"""The ctypes shim: prototypes set once, isLate written through the pointer, flag reset per call."""

from __future__ import annotations

import ctypes
import threading
from types import SimpleNamespace
from typing import Any

from daq.backends import ni_waitclock
from tests.ni.conftest import FakeDaqmxLib


def test_argtypes_are_set_once_like_nidaqmx_does() -> None:
    fn = SimpleNamespace(argtypes=None, restype=None, arg_lock=threading.Lock())
    lib = SimpleNamespace(DAQmxWaitForNextSampleClock=fn)
    got = ni_waitclock._function(lib, "DAQmxWaitForNextSampleClock", [ctypes.c_void_p])
    assert got is fn and fn.argtypes == [ctypes.c_void_p] and fn.restype is ctypes.c_int32
    ni_waitclock._function(lib, "DAQmxWaitForNextSampleClock", [ctypes.c_double])
    assert fn.argtypes == [ctypes.c_void_p]  # already prototyped: left alone


def test_waiter_passes_handle_and_timeout_and_reads_is_late() -> None:
    lib: Any = FakeDaqmxLib()
    lib.script.extend([(0, True), (0, False), (ni_waitclock.WARNING_MISSED_SAMPLE_CLOCK, True)])
    handle = ctypes.c_void_p(0x1234)
    w = ni_waitclock.SampleClockWaiter(handle, library=lib)
    assert (w.wait(0.02), w.is_late) == (0, True)
    assert (w.wait(0.02), w.is_late) == (0, False)  # the flag is cleared before each call
    assert (w.wait(0.5), w.is_late) == (209802, True)
    assert lib.waits == [(0x1234, 0.02), (0x1234, 0.02), (0x1234, 0.5)]
    assert ni_waitclock.convert_late_errors_to_warnings(handle, library=lib) == 0
    assert lib.conv_late == [(0x1234, 1)]
