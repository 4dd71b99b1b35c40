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


def test_the_shunt_printout_names_each_step_against_its_certificate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    chan = {"offset": 29876.0, "sigma_offset": 120.0, "gain": 1.0046, "sigma_gain": 1.0e-3,
            "residual": 360.0, "accuracy_offset": 2.5e4, "ok": True, "problems": []}  # fmt: skip
    point = {"unshunted_before": 30012.0, "shunted": 5039876.0, "unshunted_after": 30020.0,
             "step": 5009860.0, "sigma_step": 150.0, "equivalent_pa": 4.987e6,
             "sigma_equivalent_rel": 0.001, "drift": 8.0}  # fmt: skip
    show({"procedure": "pressure_shunt", "oil_c": 22.0, "ok": True, "applied": False,
          "channels": {"p_cap_1": chan}, "shunt_points": {"p_cap_1": point}})  # fmt: skip
    out = capsys.readouterr().out
    assert "pressure_shunt: oil 22.0 °C" in out and "1.004600" in out
    assert (
        "shunt on p_cap_1: step 5.00986e+06 (σ 150) for the certificate's 4.987e+06 (σ 0.1 %)"
        in out
    )


def test_rigctl_calibrate_takes_the_procedure_by_either_name() -> None:
    from rigctl.main import build_parser

    for name in ("pressure-shunt", "pressure_shunt"):
        args = build_parser().parse_args(["calibrate", name, "--apply", "--window", "3"])
        assert args.procedure == "pressure-shunt" and args.apply and args.window == 3.0
