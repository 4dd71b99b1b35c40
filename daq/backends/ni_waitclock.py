"""DAQmxWaitForNextSampleClock, called through the C library that `nidaqmx` has already loaded.

nidaqmx-python (1.x) wraps neither `DAQmxWaitForNextSampleClock` nor the Real-Time task
attributes in its library interpreter (only its gRPC stubs know them), yet hardware-timed
single-point control needs both: the wait is what paces the loop and its `isLate` flag is how a
late cycle is detected. This module is the ONLY place in the project that calls the NI C API
directly. It borrows nidaqmx's own library handle (`nidaqmx._lib.lib_importer.windll`, the same
`nicaiu.dll` / `libnidaqmx.so` every `nidaqmx.Task` call goes through, so there is one copy of
the driver in the process) and follows nidaqmx's convention of setting `argtypes` once, under
the function's `arg_lock`.

C prototypes (NIDAQmx.h):

    int32 DAQmxWaitForNextSampleClock(TaskHandle taskHandle, float64 timeout, bool32 *isLate);
    int32 DAQmxSetRealTimeConvLateErrorsToWarnings(TaskHandle taskHandle, bool32 data);

`TaskHandle` is `void*`, `bool32` is `uInt32`; a negative return is an error, a positive one a
warning, 0 success. `nidaqmx` is imported lazily (inside `_library`) so that importing this
module never needs the NI driver.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

#: DAQmx status codes a late wait can return. With "convert late errors to warnings" on, a
#: missed clock comes back as the positive warning; otherwise as one of the two errors.
WARNING_MISSED_SAMPLE_CLOCK = 209802
ERROR_MISSED_SAMPLE_CLOCK = -209802
ERROR_MISSED_3_OR_MORE_SAMPLE_CLOCKS = -209803
LATE_CODES = frozenset(
    {WARNING_MISSED_SAMPLE_CLOCK, ERROR_MISSED_SAMPLE_CLOCK, ERROR_MISSED_3_OR_MORE_SAMPLE_CLOCKS}
)

_bool32 = ctypes.c_uint32
_TaskHandle = ctypes.c_void_p
_argtypes_lock = threading.Lock()


def _library() -> Any:
    """nidaqmx's handle on the NI-DAQmx C library (raises nidaqmx's DaqNotFoundError if absent)."""
    from nidaqmx._lib import lib_importer

    return lib_importer.windll


def _function(library: Any, name: str, argtypes: list[Any]) -> Any:
    fn = getattr(library, name)  # nidaqmx raises DaqFunctionNotSupportedError if missing
    if fn.argtypes is None:
        with getattr(fn, "arg_lock", _argtypes_lock):
            if fn.argtypes is None:
                fn.argtypes = argtypes
                fn.restype = ctypes.c_int32
    return fn


class SampleClockWaiter:
    """Blocks on the next sample clock of one running hardware-timed single-point task.

    `wait` allocates nothing the caller keeps: the `isLate` flag lives in a preallocated
    `c_uint32` that the driver writes through a preallocated pointer.
    """

    def __init__(self, task_handle: Any, library: Any = None) -> None:
        lib = _library() if library is None else library
        self._fn = _function(
            lib,
            "DAQmxWaitForNextSampleClock",
            [_TaskHandle, ctypes.c_double, ctypes.POINTER(_bool32)],
        )
        self._handle = task_handle
        self._is_late = _bool32(0)
        self._is_late_ptr = ctypes.pointer(self._is_late)

    def wait(self, timeout_s: float) -> int:
        """Wait for the next sample clock; return the DAQmx status code (0 = on time).

        Read `is_late` afterwards: true when the clock had already ticked before the call,
        i.e. the previous cycle overran its period.
        """
        self._is_late.value = 0
        return int(self._fn(self._handle, timeout_s, self._is_late_ptr))

    @property
    def is_late(self) -> bool:
        return bool(self._is_late.value)


def convert_late_errors_to_warnings(task_handle: Any, library: Any = None) -> int:
    """Ask DAQmx to report a missed sample clock as a warning instead of stopping the task with
    an error: the loop counts overruns itself (and trips its overrun interlock), so one late
    cycle must not kill acquisition. Returns the DAQmx status code (0 = done)."""
    lib = _library() if library is None else library
    fn = _function(lib, "DAQmxSetRealTimeConvLateErrorsToWarnings", [_TaskHandle, _bool32])
    return int(fn(task_handle, 1))
