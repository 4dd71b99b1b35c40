"""The station's hydraulic power lines on the NI card ([hydraulics], docs/ni.md), asserted at
the driver boundary like the analog lines: one on-demand DO task, written off at open, each
level's line pattern, off again (first) at close, and low on watchdog expiry."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest
from nidaqmx.constants import Level, LineGrouping

from daq.backends.base import BackendError, BackendStatus
from daq.backends.ni import NiBackend
from daq.profile import Profile
from daq.station.power import Power
from tests.ni.conftest import DO_HANDLE, WD_HANDLE, ni_channels

HYD = {
    "pump_line": "Dev1/port0/line0",
    "high_line": "Dev1/port0/line1",
    "low_pressure_pa": 2.0e6,
}


def _with_hydraulics(profile: Profile, **changes: Any) -> Profile:
    data = profile.model_dump(exclude_none=True)
    data["hydraulics"] = {**HYD, **changes}
    return Profile.model_validate(data)


def _record_writes(interpreter: Any) -> list[list[bool]]:
    """What each DO write put on the lines, copied at the call (the backend reuses its array)."""
    out: list[list[bool]] = []

    def write(handle: Any, *args: Any) -> int:
        assert handle is DO_HANDLE
        out.append([bool(x) for x in np.asarray(args[-1]).ravel()])
        return 1

    interpreter.write_digital_lines.side_effect = write
    return out


def test_power_lines_follow_the_level_and_go_off_at_close(
    interpreter: Any, fake_lib: Any, ni_profile: Profile
) -> None:
    profile = _with_hydraulics(ni_profile)
    writes = _record_writes(interpreter)
    backend = NiBackend(profile, *ni_channels(profile))
    backend.open()
    interpreter.create_task.assert_has_calls([mock.call("rig2dofni_power")])
    lines = [c.args[1] for c in interpreter.create_do_chan.call_args_list]
    assert lines == ["Dev1/port0/line0", "Dev1/port0/line1"]
    grouping = {c.args[3] for c in interpreter.create_do_chan.call_args_list}
    assert grouping == {LineGrouping.CHAN_PER_LINE.value}
    assert writes == [[False, False]]  # off at open
    # Pump off when the loop stops refreshing the card's watchdog.
    (handle, names, states), _ = interpreter.cfg_watchdog_do_expir_states.call_args
    assert handle is WD_HANDLE and names == "Dev1/port0/line0:1"
    np.testing.assert_array_equal(states, [Level.LOW.value] * 2)
    backend.start()
    for level in (Power.LOW, Power.HIGH, Power.OFF):
        assert backend.write_power(level) == BackendStatus.OK
    assert writes[1:] == [[True, False], [True, True], [False, False]]
    backend.write_power(Power.HIGH)
    del writes[:]
    backend.close()
    assert writes == [[False, False]]  # off first at close
    interpreter.clear_task.assert_any_call(DO_HANDLE)


def test_a_failing_power_write_reports_error(
    interpreter: Any, fake_lib: Any, ni_profile: Profile
) -> None:
    profile = _with_hydraulics(ni_profile, high_line="")
    backend = NiBackend(profile, *ni_channels(profile))
    backend.open()
    interpreter.write_digital_lines.side_effect = RuntimeError("DAQmx -200000")
    assert backend.write_power(Power.LOW) == BackendStatus.ERROR
    interpreter.write_digital_lines.side_effect = None
    backend.close()


def test_a_power_line_that_is_not_a_digital_line_is_refused(ni_profile: Profile) -> None:
    profile = _with_hydraulics(ni_profile, pump_line="Dev1/ao3")
    with pytest.raises(BackendError, match=r"power line 'Dev1/ao3'.*Dev1/portN/lineM"):
        NiBackend(profile, *ni_channels(profile))


def test_without_hydraulics_there_is_no_power_task(
    interpreter: Any, fake_lib: Any, ni_profile: Profile
) -> None:
    backend = NiBackend(ni_profile, *ni_channels(ni_profile))
    backend.open()
    assert backend.write_power(Power.HIGH) == BackendStatus.OK
    interpreter.create_do_chan.assert_not_called()
    backend.close()
