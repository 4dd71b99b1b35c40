"""The pressure transducers' shunt relays on the NI card (`Channel.shunt`, docs/ni.md), asserted
at the driver boundary like the power lines: one on-demand DO task over the shunt lines, written
open at open(), each mask's pattern, open again first at close, low on watchdog expiry."""

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
from tests.ni.conftest import DO_HANDLE, SHUNT_HANDLE, WD_HANDLE, ni_channels

HYD = {"pump_line": "Dev1/port0/line0", "high_line": "Dev1/port0/line1", "low_pressure_pa": 2e6}
LINES = {"p_cap_1": "Dev1/port0/line2", "p_rod_2": "Dev1/port0/line3"}


def _with_shunts(profile: Profile, lines: dict[str, str] = LINES) -> Profile:
    data = profile.model_dump(exclude_none=True)
    data["hydraulics"] = HYD
    for c in data["channels"]:
        if c["name"] in lines:
            c["shunt"] = {"equivalent_pa": 5.0e6, "sigma": 0.001, "line": lines[c["name"]]}
    return Profile.model_validate(data)


def _record_writes(interpreter: Any) -> list[tuple[str, list[bool]]]:
    """Each DO write: which task ("power" or "shunt") and what it put on its lines."""
    out: list[tuple[str, list[bool]]] = []

    def write(handle: Any, *args: Any) -> int:
        task = {DO_HANDLE.value: "power", SHUNT_HANDLE.value: "shunt"}[handle.value]
        out.append((task, [bool(x) for x in np.asarray(args[-1]).ravel()]))
        return 1

    interpreter.write_digital_lines.side_effect = write
    return out


def _mask(backend: NiBackend, *names: str) -> np.ndarray:
    return np.array([c.name in names for c in backend.inputs])


def test_shunt_lines_follow_the_mask_and_open_first_at_close(
    interpreter: Any, fake_lib: Any, ni_profile: Profile
) -> None:
    profile = _with_shunts(ni_profile)
    writes = _record_writes(interpreter)
    backend = NiBackend(profile, *ni_channels(profile))
    backend.open()
    interpreter.create_task.assert_has_calls([mock.call("rig2dofni_shunt")])
    chans = [(c.args[0].value, c.args[1]) for c in interpreter.create_do_chan.call_args_list]
    assert [line for h, line in chans if h == SHUNT_HANDLE.value] == list(LINES.values())
    grouping = {c.args[3] for c in interpreter.create_do_chan.call_args_list}
    assert grouping == {LineGrouping.CHAN_PER_LINE.value}
    assert ("shunt", [False, False]) in writes  # open at open()
    # Relays open (and pump off) when the loop stops refreshing the card's watchdog.
    (handle, names, states), _ = interpreter.cfg_watchdog_do_expir_states.call_args
    assert handle is WD_HANDLE and names == "Dev1/port0/line0:3"
    np.testing.assert_array_equal(states, [Level.LOW.value] * 4)
    backend.start()
    del writes[:]
    assert backend.write_shunt(_mask(backend, "p_rod_2")) == BackendStatus.OK
    assert backend.write_shunt(_mask(backend, "p_rod_2", "p_cap_1")) == BackendStatus.OK
    assert backend.write_shunt(_mask(backend)) == BackendStatus.OK
    assert writes == [("shunt", [False, True]), ("shunt", [True, True]), ("shunt", [False, False])]
    # A channel without a relay cannot be shunted: ERROR, nothing written.
    assert backend.write_shunt(_mask(backend, "p_rod_1")) == BackendStatus.ERROR
    assert len(writes) == 3
    backend.write_shunt(_mask(backend, "p_cap_1"))
    backend.write_power(Power.LOW)
    del writes[:]
    backend.close()
    assert writes == [("shunt", [False, False]), ("power", [False, False])]  # relays first
    interpreter.clear_task.assert_any_call(SHUNT_HANDLE)


def test_a_failing_shunt_write_reports_error(
    interpreter: Any, fake_lib: Any, ni_profile: Profile
) -> None:
    profile = _with_shunts(ni_profile)
    backend = NiBackend(profile, *ni_channels(profile))
    backend.open()
    interpreter.write_digital_lines.side_effect = RuntimeError("DAQmx -200000")
    assert backend.write_shunt(_mask(backend, "p_cap_1")) == BackendStatus.ERROR
    interpreter.write_digital_lines.side_effect = None
    backend.close()


def test_a_shunt_line_that_is_not_a_digital_line_is_refused(ni_profile: Profile) -> None:
    profile = _with_shunts(ni_profile, {"p_cap_1": "Dev1/ao3"})
    with pytest.raises(BackendError, match=r"channel 'p_cap_1': shunt line 'Dev1/ao3'.*portN"):
        NiBackend(profile, *ni_channels(profile))


def test_without_shunts_there_is_no_shunt_task(
    interpreter: Any, fake_lib: Any, ni_profile: Profile
) -> None:
    backend = NiBackend(ni_profile, *ni_channels(ni_profile))
    backend.open()
    assert backend.write_shunt(np.zeros(backend.n_inputs, dtype=bool)) == BackendStatus.OK
    assert backend.write_shunt(_mask(backend, "p_cap_1")) == BackendStatus.ERROR
    interpreter.create_do_chan.assert_not_called()
    backend.close()
