"""One cycle on the NI backend: start order, wait (late cycles), read into counts, write."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from nidaqmx.constants import WDTTaskAction
from nidaqmx.errors import DaqReadError, DaqWriteError

from daq.backends import ni_waitclock
from daq.backends.base import BackendStatus
from daq.backends.ni import NiBackend
from daq.profile import Profile
from daq.scaling import counts_to_units, units_to_counts
from tests.ni.conftest import AI_HANDLE, AO_HANDLE, WD_HANDLE, ni_channels

RESET = WDTTaskAction.RESET_TIMER.value


@pytest.fixture
def started(interpreter: Any, composite_profile: Profile) -> Any:
    backend = NiBackend(composite_profile, *ni_channels(composite_profile))
    backend.open()
    backend.start()
    yield backend
    backend.close()


def _names(interpreter: Any) -> list[str]:
    return [c[0] for c in interpreter.mock_calls]


def test_start_writes_null_then_starts_ao_ai_watchdog(interpreter: Any, started: Any) -> None:
    calls = [
        c
        for c in interpreter.mock_calls
        if c[0] in ("write_analog_f64", "start_task", "control_watchdog_task")
    ]
    assert [c[0] for c in calls] == ["write_analog_f64", "start_task", "start_task", "start_task"]
    handle, n, auto_start, _timeout, _layout, data = calls[0].args
    assert (handle, n, auto_start) == (AO_HANDLE, 1, False)
    np.testing.assert_array_equal(data, [0.0, 0.0])
    assert [c.args[0] for c in calls[1:]] == [AO_HANDLE, AI_HANDLE, WD_HANDLE]


def test_read_fills_the_callers_array_with_converter_counts(
    interpreter: Any, started: NiBackend
) -> None:
    n = started.n_inputs
    volts = np.array([0.0, 2.5, -5.0, 5.0, 1.234567, -0.0001, 9.9999, -10.0, 3.3])
    assert len(volts) == n
    filled: list[int] = []

    def read(handle: Any, n_samp: int, timeout: float, fill: int, data: np.ndarray) -> int:
        assert handle is AI_HANDLE and n_samp == 1 and timeout == 0.05
        filled.append(id(data))
        data[:] = volts
        return 1

    interpreter.read_analog_f64.side_effect = read
    raw = np.full(n, -1.0)
    started.channel_fault[:] = 7
    assert started.read(0.0, raw) is BackendStatus.OK
    # Offset binary on each channel's converter: 0 V on ±5 V/16 bit is code 32768, +5 V the top
    # code (saturated), −5 V code 0; the rest as daq.scaling quantises them.
    assert raw[:4].tolist() == [32768.0, 49152.0, 0.0, 65535.0]
    expect = [units_to_counts(c.converter, v) for c, v in zip(started.inputs, volts, strict=True)]
    assert raw.tolist() == expect
    for c, k, v in zip(started.inputs, raw, volts, strict=True):
        lsb = (c.converter.max - c.converter.min) / 2**16
        if c.converter.min < v < c.converter.max - lsb:
            assert abs(counts_to_units(c.converter, k) - v) <= lsb / 2
    assert not started.channel_fault.any()
    # The driver fills the same preallocated buffer every cycle.
    started.read(0.001, raw)
    assert len(filled) == 2 and filled[0] == filled[1]


def test_a_failed_read_faults_every_channel_and_does_not_raise(
    interpreter: Any, started: NiBackend
) -> None:
    interpreter.read_analog_f64.side_effect = DaqReadError("device gone", -200279, 0)
    raw = np.zeros(started.n_inputs)
    assert started.read(0.0, raw) is BackendStatus.ERROR
    assert started.channel_fault.all()
    assert started.last_error_code == -200279
    interpreter.read_analog_f64.side_effect = None
    interpreter.read_analog_f64.return_value = 1
    assert started.read(0.001, raw) is BackendStatus.OK
    assert not started.channel_fault.any()


def test_write_sends_clipped_volts_and_refreshes_the_watchdog(
    interpreter: Any, started: NiBackend
) -> None:
    interpreter.reset_mock()
    assert started.write(0.0, np.array([1.5, -12.0])) is BackendStatus.OK
    assert _names(interpreter) == ["write_analog_f64", "control_watchdog_task"]
    handle, n, auto_start, timeout, _layout, data = interpreter.write_analog_f64.call_args.args
    assert (handle, n, auto_start, timeout) == (AO_HANDLE, 1, False, 0.05)
    np.testing.assert_array_equal(data, [1.5, -10.0])  # beyond the D/A range: clipped
    interpreter.control_watchdog_task.assert_called_once_with(WD_HANDLE, RESET)

    interpreter.write_analog_f64.side_effect = DaqWriteError("watchdog expired", -200716, 0)
    assert started.write(0.001, np.array([0.0, 0.0])) is BackendStatus.ERROR
    assert started.last_error_code == -200716
    assert interpreter.control_watchdog_task.call_count == 1  # not refreshed after a failure
    started.write_null()  # must not raise either


def test_wait_blocks_on_the_ai_sample_clock_and_counts_late_cycles(
    fake_lib: Any, started: NiBackend
) -> None:
    fake_lib.script.extend(
        [
            (0, False),
            (ni_waitclock.WARNING_MISSED_SAMPLE_CLOCK, True),  # late, reported as a warning
            (0, False),
            (ni_waitclock.ERROR_MISSED_3_OR_MORE_SAMPLE_CLOCKS, True),
        ]
    )
    missed = [started.wait_next_cycle() for _ in range(4)]
    assert missed[0] == 0 and missed[2] == 0
    assert missed[1] >= 1 and missed[3] >= 3
    assert started.late_cycles == 2
    assert started.missed_clocks == missed[1] + missed[3]
    assert fake_lib.waits == [(AI_HANDLE.value, 0.05)] * 4


def test_a_late_flag_alone_counts_as_a_missed_clock(fake_lib: Any, started: NiBackend) -> None:
    fake_lib.script.append((0, True))
    assert started.wait_next_cycle() >= 1
    assert started.late_cycles == 1


def test_a_failed_wait_surfaces_as_a_read_error(
    interpreter: Any, fake_lib: Any, started: NiBackend
) -> None:
    fake_lib.script.append((-200474, False))  # timeout waiting for the sample clock
    interpreter.read_analog_f64.return_value = 1
    assert started.wait_next_cycle() == 0
    assert started.last_error_code == -200474
    raw = np.zeros(started.n_inputs)
    assert started.read(0.0, raw) is BackendStatus.ERROR
    assert started.channel_fault.all()
    assert started.wait_next_cycle() == 0
    assert started.read(0.001, raw) is BackendStatus.OK
