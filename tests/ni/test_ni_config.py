"""The exact DAQmx configuration the NI backend derives from hw_profiles/ni-*.toml."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest
from nidaqmx.constants import (
    AcquisitionType,
    Edge,
    TerminalConfiguration,
    VoltageUnits,
    WatchdogAOExpirState,
)

from daq.backends.base import BackendError
from daq.backends.ni import NiBackend
from daq.profile import Profile, load_profile, parse_profile
from tests.ni.conftest import AI_HANDLE, AO_HANDLE, PROFILES, WD_HANDLE, ni_channels

V = VoltageUnits.VOLTS.value
DIFF, RSE, NRSE = (TerminalConfiguration[t].value for t in ("DIFF", "RSE", "NRSE"))
HWTSP = AcquisitionType.HW_TIMED_SINGLE_POINT.value
RISING = Edge.RISING.value

#: hw_profiles/ni-serial-2dof.toml, read by eye: (physical, name, terminal, min, max).
COMPOSITE_AI = [
    ("Dev1/ai0", "p_cap_1", DIFF, -5.0, 5.0),
    ("Dev1/ai1", "p_rod_1", DIFF, -5.0, 5.0),
    ("Dev1/ai2", "p_cap_2", DIFF, -5.0, 5.0),
    ("Dev1/ai3", "p_rod_2", DIFF, -5.0, 5.0),
    ("Dev1/ai4", "spool_1", DIFF, -5.0, 5.0),
    ("Dev1/ai5", "spool_2", DIFF, -5.0, 5.0),
    ("Dev1/ai16", "piston_1", RSE, -10.0, 10.0),
    ("Dev1/ai17", "piston_2", RSE, -10.0, 10.0),
    ("Dev1/ai18", "oil_temp", NRSE, -10.0, 10.0),
]
AO = [("Dev1/ao0", "valve_1", -10.0, 10.0), ("Dev1/ao1", "valve_2", -10.0, 10.0)]


def _open(profile: Profile) -> NiBackend:
    backend = NiBackend(profile, *ni_channels(profile))
    backend.open()
    return backend


def test_composite_profile_task_configuration(
    interpreter: Any, fake_lib: Any, composite_profile: Profile
) -> None:
    backend = _open(composite_profile)
    interpreter.create_task.assert_has_calls([mock.call("rig2dof_ai"), mock.call("rig2dof_ao")])
    assert interpreter.create_ai_voltage_chan.call_args_list == [
        mock.call(AI_HANDLE, phys, name, term, lo, hi, V, "")
        for phys, name, term, lo, hi in COMPOSITE_AI
    ]
    assert interpreter.create_ao_voltage_chan.call_args_list == [
        mock.call(AO_HANDLE, phys, name, lo, hi, V, "") for phys, name, lo, hi in AO
    ]
    # Both tasks hardware-timed single point at the loop rate; AO on the AI sample clock.
    assert interpreter.cfg_samp_clk_timing.call_args_list == [
        mock.call(AI_HANDLE, 1000.0, "", RISING, HWTSP, 1000),
        mock.call(AO_HANDLE, 1000.0, "/Dev1/ai/SampleClock", RISING, HWTSP, 1000),
    ]
    # Watchdog on the card: 0.1 s, both valve lines to 0 V (voltage) on expiry.
    interpreter.create_watchdog_timer_task_ex.assert_called_once_with(
        "Dev1", "rig2dof_watchdog", 0.1
    )
    (handle, lines, states, kinds), _ = interpreter.cfg_watchdog_ao_expir_states.call_args
    assert handle is WD_HANDLE
    assert lines == "Dev1/ao0:1"  # nidaqmx flattens the list to a range
    np.testing.assert_array_equal(states, [0.0, 0.0])
    np.testing.assert_array_equal(kinds, [WatchdogAOExpirState.VOLTAGE.value] * 2)
    # Late sample clocks become warnings on the AI task (ctypes), so the loop can count them.
    assert fake_lib.conv_late == [(AI_HANDLE.value, 1)]
    interpreter.start_task.assert_not_called()  # open() configures; start() starts
    backend.close()


def test_ni_only_profile_reads_resolvers_on_ai(interpreter: Any, ni_profile: Profile) -> None:
    backend = _open(ni_profile)
    got = [c.args[1:6] for c in interpreter.create_ai_voltage_chan.call_args_list]
    # Profile order: the nine analog channels above, then the resolvers' DC outputs.
    q = [("Dev1/ai6", "q_1", DIFF, -10.0, 10.0), ("Dev1/ai7", "q_2", DIFF, -10.0, 10.0)]
    assert got == sorted(
        COMPOSITE_AI + q, key=lambda r: [c.name for c in ni_profile.inputs].index(r[1])
    )
    interpreter.create_task.assert_has_calls([mock.call("rig2dofni_ai"), mock.call("rig2dofni_ao")])
    backend.close()


def _variant(profile: Profile, **ni: Any) -> Profile:
    data = profile.model_dump(mode="python", exclude_none=True)
    data["backend"]["ni"].update(ni)
    return parse_profile(data)


def test_clock_source_and_watchdog_timeout_come_from_the_profile(
    interpreter: Any, composite_profile: Profile
) -> None:
    p = _variant(composite_profile, ao_clock_source="/Dev1/PFI3", watchdog_timeout_s=0.25)
    backend = _open(p)
    assert interpreter.cfg_samp_clk_timing.call_args_list[1] == mock.call(
        AO_HANDLE, 1000.0, "/Dev1/PFI3", RISING, HWTSP, 1000
    )
    interpreter.create_watchdog_timer_task_ex.assert_called_once_with(
        "Dev1", "rig2dof_watchdog", 0.25
    )
    backend.close()


def test_watchdog_expiry_state_is_each_valves_null(
    interpreter: Any, composite_profile: Profile
) -> None:
    data = composite_profile.model_dump(mode="python", exclude_none=True)
    for c in data["channels"]:
        if c["name"] == "valve_2":
            c["null_volts"] = 0.12  # a valve whose zero-flow point is off 0 V
    backend = _open(parse_profile(data))
    (_, _, states, _), _ = interpreter.cfg_watchdog_ao_expir_states.call_args
    np.testing.assert_array_equal(states, [0.0, 0.12])
    backend.close()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"watchdog_timeout_s": 0.004}, "under 5 loop periods"),
        ({"clock_timeout_s": 0.001}, "under 2 loop periods"),
        ({"device": "Dev2"}, "is not an AI line of NI device 'Dev2'"),
    ],
)
def test_bad_ni_settings_fail_when_the_backend_is_built(
    composite_profile: Profile, edit: dict[str, Any], message: str
) -> None:
    p = _variant(composite_profile, **edit)
    with pytest.raises(BackendError, match=message):
        NiBackend(p, *ni_channels(p))


def test_an_output_line_on_an_input_channel_is_refused(composite_profile: Profile) -> None:
    inputs, outputs = ni_channels(composite_profile)
    wrong = inputs[0].model_copy(update={"physical": "Dev1/ao3"})
    with pytest.raises(BackendError, match=r"'p_cap_1': physical 'Dev1/ao3' is not an AI line"):
        NiBackend(composite_profile, [wrong, *inputs[1:]], outputs)
    with pytest.raises(BackendError, match="at least one"):
        NiBackend(composite_profile, [], outputs)


@pytest.mark.parametrize("name", ["ni-serial-2dof.toml", "ni-2dof.toml"])
def test_profiles_wire_the_card_consistently(name: str) -> None:
    """Each AI line is used once, counting the second line of every differential pair
    (aiN+8 on an X Series card), and the AO lines exist on a PCIe-6353 (ao0…ao3)."""
    p = load_profile(PROFILES / name)
    used: dict[int, str] = {}
    for c in p.channels:
        if p.channel_device(c) != "ni" or c.is_output:
            continue
        n = int(c.physical.split("/ai")[1])
        lines = [n, n + 8] if c.terminal == "diff" else [n]
        for line in lines:
            assert line not in used, f"{c.name} reuses ai{line} of {used.get(line)}"
            used[line] = c.name
    assert max(used) < 32
    aos = [c.physical for c in p.outputs]
    assert set(aos) <= {f"Dev1/ao{i}" for i in range(4)} and len(set(aos)) == len(aos)
