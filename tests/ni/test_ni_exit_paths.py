"""Every way out of the NI backend nulls the valves first, then clears every task it made."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from nidaqmx.constants import SampleTimingType
from nidaqmx.errors import DaqError, DaqReadError

from daq.backends.base import BackendError, BackendStatus
from daq.backends.ni import NiBackend
from daq.profile import Profile, load_profile
from tests.ni.conftest import AI_HANDLE, AO_HANDLE, PROFILES, WD_HANDLE, ni_channels

ON_DEMAND = SampleTimingType.ON_DEMAND.value
SAMP_TIMING_TYPE = 0x1347


def assert_nulled_then_closed(interpreter: Any, handles: list[Any]) -> None:
    """The AO task is switched to on-demand timing and written 0 V (taking effect at once,
    clock or no clock) before the first task is cleared, and each handle is cleared once."""
    calls = interpreter.mock_calls
    names = [c[0] for c in calls]
    clears = [i for i, n in enumerate(names) if n == "clear_task"]
    assert [calls[i].args[0] for i in clears] == handles
    if AO_HANDLE in handles:
        on_demand = [
            i
            for i, c in enumerate(calls)
            if c[0] == "set_timing_attribute_int32"
            and c.args == (AO_HANDLE, SAMP_TIMING_TYPE, ON_DEMAND)
        ]
        nulls = [
            i
            for i, c in enumerate(calls)
            if c[0] == "write_analog_f64"
            and c.args[0] is AO_HANDLE
            and c.args[2] is True  # auto-start: an immediate, on-demand write
            and np.array_equal(c.args[5], [0.0, 0.0])
        ]
        assert len(on_demand) == 1 and len(nulls) == 1
        assert on_demand[0] < nulls[0] < clears[0]
        stops = [i for i, n in enumerate(names) if n == "stop_task"]
        assert all(s < nulls[0] for s in stops)


def _backend(profile: Profile) -> NiBackend:
    return NiBackend(profile, *ni_channels(profile))


def test_normal_close_after_running(interpreter: Any, composite_profile: Profile) -> None:
    b = _backend(composite_profile)
    b.open()
    b.start()
    interpreter.read_analog_f64.return_value = 1
    b.wait_next_cycle()
    b.read(0.0, np.zeros(b.n_inputs))
    b.write(0.0, np.array([2.0, -3.0]))
    interpreter.reset_mock()
    b.close()
    # First the hardware-timed null (lands on the next clock edge while the clock runs) ...
    first = interpreter.mock_calls[0]
    assert first[0] == "write_analog_f64" and first.args[2] is False
    np.testing.assert_array_equal(first.args[5], [0.0, 0.0])
    # ... then stop AI (the clock) and AO, the on-demand null, and clear AI, AO, watchdog.
    stops = [c.args[0] for c in interpreter.mock_calls if c[0] == "stop_task"]
    assert stops == [AI_HANDLE, AO_HANDLE]
    assert_nulled_then_closed(interpreter, [AI_HANDLE, AO_HANDLE, WD_HANDLE])


def test_close_is_idempotent(interpreter: Any, composite_profile: Profile) -> None:
    b = _backend(composite_profile)
    b.open()
    b.start()
    b.close()
    interpreter.reset_mock()
    b.close()
    assert interpreter.mock_calls == []
    assert b.read(0.0, np.zeros(b.n_inputs)) is BackendStatus.ERROR
    assert b.write(0.0, np.zeros(2)) is BackendStatus.ERROR
    b.write_null()


def test_close_without_start(interpreter: Any, composite_profile: Profile) -> None:
    b = _backend(composite_profile)
    b.open()
    b.close()
    assert_nulled_then_closed(interpreter, [AI_HANDLE, AO_HANDLE, WD_HANDLE])


def test_error_in_open_nulls_closes_and_names_the_step(
    interpreter: Any, composite_profile: Profile
) -> None:
    interpreter.create_ao_voltage_chan.side_effect = [
        None,
        DaqError("Physical channel specified does not exist on this device.", -200170),
    ]
    b = _backend(composite_profile)
    with pytest.raises(BackendError) as err:
        b.open()
    msg = str(err.value)
    assert "NI device 'Dev1'" in msg and "add AO channel Dev1/ao1 ('valve_2')" in msg
    assert "DAQmx error -200170" in msg and "does not exist" in msg
    # The watchdog was never created; the AI and AO tasks that were are nulled and cleared.
    assert_nulled_then_closed(interpreter, [AI_HANDLE, AO_HANDLE])


def test_error_in_start_nulls_and_closes(interpreter: Any, composite_profile: Profile) -> None:
    def start(handle: Any) -> None:
        if handle is AI_HANDLE:
            raise DaqError("Onboard device memory overflow.", -200361)

    interpreter.start_task.side_effect = start
    b = _backend(composite_profile)
    b.open()
    with pytest.raises(BackendError, match=r"cannot start the AI task: DAQmx error -200361"):
        b.start()
    assert_nulled_then_closed(interpreter, [AI_HANDLE, AO_HANDLE, WD_HANDLE])
    interpreter.reset_mock()
    b.close()  # the owner's `finally` closes again: nothing left to do
    assert interpreter.mock_calls == []


def test_keyboard_interrupt_in_open_propagates_after_cleanup(
    interpreter: Any, composite_profile: Profile
) -> None:
    interpreter.create_watchdog_timer_task_ex.side_effect = KeyboardInterrupt
    b = _backend(composite_profile)
    with pytest.raises(KeyboardInterrupt):
        b.open()
    assert_nulled_then_closed(interpreter, [AI_HANDLE, AO_HANDLE])


def test_keyboard_interrupt_in_the_loop_then_close(
    interpreter: Any, composite_profile: Profile
) -> None:
    """Ctrl-C inside a driver call is not swallowed by read(); the owner's finally: close()."""
    interpreter.read_analog_f64.side_effect = KeyboardInterrupt
    b = _backend(composite_profile)
    b.open()
    b.start()
    with pytest.raises(KeyboardInterrupt):
        try:
            b.read(0.0, np.zeros(b.n_inputs))
        finally:
            b.close()
    assert_nulled_then_closed(interpreter, [AI_HANDLE, AO_HANDLE, WD_HANDLE])


def test_keyboard_interrupt_during_close_still_nulls_and_clears(
    interpreter: Any, composite_profile: Profile
) -> None:
    b = _backend(composite_profile)
    b.open()
    b.start()

    def stop(handle: Any) -> None:
        if handle is AI_HANDLE:
            raise KeyboardInterrupt

    interpreter.stop_task.side_effect = stop
    with pytest.raises(KeyboardInterrupt):
        b.close()
    assert_nulled_then_closed(interpreter, [AI_HANDLE, AO_HANDLE, WD_HANDLE])


def test_error_in_read_then_close(interpreter: Any, composite_profile: Profile) -> None:
    interpreter.read_analog_f64.side_effect = DaqReadError("gone", -200279, 0)
    interpreter.stop_task.side_effect = DaqError("device removed", -88709)
    b = _backend(composite_profile)
    b.open()
    b.start()
    assert b.read(0.0, np.zeros(b.n_inputs)) is BackendStatus.ERROR
    b.close()  # the stop errors are logged, the remaining steps still run
    assert_nulled_then_closed(interpreter, [AI_HANDLE, AO_HANDLE, WD_HANDLE])


def test_input_only_ni_backend_has_no_ao_task_or_watchdog(
    interpreter: Any, composite_profile: Profile
) -> None:
    inputs, _ = ni_channels(composite_profile)
    b = NiBackend(composite_profile, inputs, [])
    b.open()
    b.start()
    assert b.write(0.0, np.zeros(0)) is BackendStatus.OK
    b.close()
    interpreter.create_watchdog_timer_task_ex.assert_not_called()
    assert_nulled_then_closed(interpreter, [AI_HANDLE])


# ------------------------------------------------------------------ no NI driver on this machine


def test_without_the_ni_driver_open_fails_with_a_clear_message(composite_profile: Profile) -> None:
    """The real nidaqmx package, no NI-DAQmx C library (as on this CI machine)."""
    import nidaqmx.errors
    from nidaqmx._lib import lib_importer

    try:
        lib_importer.windll  # noqa: B018 - probing whether the driver is installed
    except nidaqmx.errors.DaqNotFoundError:
        pass
    else:  # pragma: no cover - a rig PC
        pytest.skip("the NI-DAQmx driver is installed here")
    b = _backend(composite_profile)
    with pytest.raises(BackendError) as err:
        b.open()
    msg = str(err.value)
    assert msg.startswith("NI device 'Dev1': cannot create the AI task:")
    assert "NI-DAQmx driver" in msg and "not installed" in msg and "backend kind 'sim'" in msg
    b.close()


def test_importing_daq_and_the_ni_modules_does_not_import_nidaqmx() -> None:
    root = Path(__file__).resolve().parents[2]
    code = (
        "import sys, daq, daq.backends.ni, daq.backends.ni_waitclock\n"
        "assert 'nidaqmx' not in sys.modules, 'nidaqmx imported at import time'\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert PROFILES.is_dir()


def test_factory_on_this_machine_fails_at_open_with_the_clear_message(ni_profile: Profile) -> None:
    """Loading the NI-only profile and building its backend through the factory works anywhere;
    opening it without the NI-DAQmx driver is the start-up failure the operator sees."""
    from nidaqmx._lib import lib_importer

    from daq.backends.factory import make_backend, make_device_backend

    try:
        lib_importer.windll  # noqa: B018 - probing whether the driver is installed
    except Exception:
        pass
    else:  # pragma: no cover - a rig PC
        pytest.skip("the NI-DAQmx driver is installed here")
    backend = make_backend(ni_profile)
    assert isinstance(backend, NiBackend) and backend.paced_by_hardware
    assert (backend.n_inputs, backend.n_outputs) == (11, 2)
    with pytest.raises(BackendError, match=r"^NI device 'Dev1': .*NI-DAQmx driver .*not installed"):
        backend.open()
    backend.close()
    # The NI share of the composite rig, as the composite backend will build it.
    comp = load_profile(PROFILES / "ni-serial-2dof.toml")
    part = make_device_backend(comp, "ni", *ni_channels(comp))
    assert isinstance(part, NiBackend) and (part.n_inputs, part.n_outputs) == (9, 2)
    with pytest.raises(BackendError, match="not installed"):
        part.open()
