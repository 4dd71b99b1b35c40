"""`rigctl calibrate`'s printout of a procedure's result: every channel found, and for the
valve null the command and the hydraulic null, said to be reported and not applied."""

from __future__ import annotations

import pytest

from rigctl.cmd_calibrate_procedures import show


def test_the_valve_null_printout_names_the_hydraulic_null_as_not_applied(
    capsys: pytest.CaptureFixture[str],
) -> None:
    chan = {"offset": 0.005, "sigma_offset": 1e-5, "gain": 1.01, "sigma_gain": 1e-4,
            "residual": 2e-5, "accuracy_offset": 0.01, "ok": True, "problems": []}  # fmt: skip
    result = {
        "procedure": "valve_null", "oil_c": 35.0, "ok": True, "applied": False,
        "channels": {"spool_1": chan},
        "valve_null_v": {"j1": 0.028},
        "hydraulic_null": {"spool_1": {"reading": -0.00207, "spool": -0.0070, "sigma": 4e-4,
                                       "residual": 1e-4, "problems": []}},
    }  # fmt: skip
    show(result)
    out = capsys.readouterr().out
    assert "spool_1" in out and "0.005" in out
    assert "valve command at the balance: j1 +28.00 mV" in out
    assert "hydraulic null on spool_1: -7.00 mV of spool (reading -2.07 mV, σ 0.40 mV)" in out
    assert "reported, not applied: ok" in out
