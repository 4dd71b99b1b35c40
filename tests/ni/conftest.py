"""The NI backend's driver boundary, faked.

As in nidaqmx-python's own unit tests, the one thing replaced is the interpreter (the stateless
translator under `nidaqmx.Task`, `WatchdogTask` and the stream readers/writers), autospecced
from `nidaqmx._base_interpreter.BaseInterpreter`: every nidaqmx class above it runs for real,
and the test asserts the exact calls that reach it. The ctypes side (`daq.backends.ni_waitclock`)
gets a fake C library made of real `CFUNCTYPE` callbacks, so the pointer to `isLate` is written
through ctypes exactly as the driver would.
"""

from __future__ import annotations

import ctypes
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from nidaqmx._base_interpreter import BaseInterpreter

from daq.backends import ni_waitclock
from daq.profile import Profile, load_profile

PROFILES = Path(__file__).resolve().parents[2] / "hw_profiles"

AI_HANDLE = ctypes.c_void_p(0xA1)
AO_HANDLE = ctypes.c_void_p(0xA0)
WD_HANDLE = ctypes.c_void_p(0xD0)
DO_HANDLE = ctypes.c_void_p(0xD1)
SHUNT_HANDLE = ctypes.c_void_p(0xD2)


@dataclass
class FakeDaqmxLib:
    """The two C functions `ni_waitclock` calls, as C-callable function pointers."""

    #: (status code, isLate) returned by successive waits; (0, False) once exhausted.
    script: deque[tuple[int, bool]] = field(default_factory=deque)
    waits: list[tuple[int, float]] = field(default_factory=list)
    conv_late: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        wait_t = ctypes.CFUNCTYPE(
            ctypes.c_int32, ctypes.c_void_p, ctypes.c_double, ctypes.POINTER(ctypes.c_uint32)
        )
        set_t = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_uint32)

        def wait(handle: int, timeout: float, is_late: Any) -> int:
            self.waits.append((handle, timeout))
            code, late = self.script.popleft() if self.script else (0, False)
            is_late[0] = int(late)
            return code

        def conv(handle: int, value: int) -> int:
            self.conv_late.append((handle, value))
            return 0

        # Keep the callbacks referenced: ctypes frees a CFUNCTYPE object with its last reference.
        self.DAQmxWaitForNextSampleClock = wait_t(wait)
        self.DAQmxSetRealTimeConvLateErrorsToWarnings = set_t(conv)


@pytest.fixture
def fake_lib() -> Any:
    lib = FakeDaqmxLib()
    with mock.patch.object(ni_waitclock, "_library", return_value=lib):
        yield lib


@pytest.fixture
def interpreter(fake_lib: FakeDaqmxLib) -> Any:
    """An autospecced interpreter behind every nidaqmx object, with just enough state for
    nidaqmx's own bookkeeping (task names, channel counts)."""
    interp = mock.create_autospec(BaseInterpreter, instance=True)
    handles = {"_ai": AI_HANDLE, "_ao": AO_HANDLE, "_power": DO_HANDLE, "_shunt": SHUNT_HANDLE}
    names: dict[int | None, str] = {}
    chans: dict[int | None, int] = {}

    def create_task(name: str) -> tuple[Any, bool]:
        h = next(v for k, v in handles.items() if name.endswith(k))
        names[h.value] = name
        chans[h.value] = 0
        return h, True

    def add_chan(handle: Any, *args: Any) -> None:
        chans[handle.value] += 1

    def create_wd(device: str, name: str, timeout: float) -> tuple[Any, bool]:
        names[WD_HANDLE.value] = name
        return WD_HANDLE, True

    interp.create_task.side_effect = create_task
    interp.create_ai_voltage_chan.side_effect = add_chan
    interp.create_ao_voltage_chan.side_effect = add_chan
    interp.create_do_chan.side_effect = add_chan
    interp.create_watchdog_timer_task_ex.side_effect = create_wd
    interp.get_task_attribute_string.side_effect = lambda h, attr: names[h.value]
    interp.get_task_attribute_uint32.side_effect = lambda h, attr: chans[h.value]
    interp.internal_get_last_created_chan.side_effect = NotImplementedError
    with mock.patch("nidaqmx.utils._select_interpreter", autospec=True, return_value=interp):
        yield interp


@pytest.fixture
def composite_profile() -> Profile:
    return load_profile(PROFILES / "ni-serial-2dof.toml")


@pytest.fixture
def ni_profile() -> Profile:
    return load_profile(PROFILES / "ni-2dof.toml")


def ni_channels(profile: Profile) -> tuple[list[Any], list[Any]]:
    """The channels a composite gives the NI backend: the NI ones, in profile order."""
    mine = [c for c in profile.channels if profile.channel_device(c) == "ni"]
    return [c for c in mine if not c.is_output], [c for c in mine if c.is_output]
