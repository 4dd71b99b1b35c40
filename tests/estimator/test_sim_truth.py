"""The simulator's truth for every family's parameters (estimator.sim_truth): what `rigctl
identify` prints beside the real-rig family's estimates. Checked against the profile's own
[backend.sim.plant] values: the valve's null offset at the declared oil law's reference
temperature and its shift per kelvin, or (no oil law) at the run's true oil temperature."""

from __future__ import annotations

import math

import numpy as np
import pytest

from daq.profile import load_profile
from daq.profile.plant import sim_plant
from estimator.datause import STATE_RUNNING
from estimator.models_lin import EDGES, lin_fluid_names, lin_mech_names, valve_coefficients
from estimator.sim_truth import family_truth, true_mean_oil_c, true_oil_c
from rigctl.identify_table import rows_from
from tests.conftest import PROFILES

REALISTIC = PROFILES / "sim-2dof-realistic.toml"


def _columns(profile: object, true_c: np.ndarray) -> dict[str, np.ndarray]:
    """A run whose oil channel reads `true_c` through the channel's simulated error."""
    ch = profile.oil_temperature  # type: ignore[attr-defined]
    err = ch.sim_error
    t = np.arange(true_c.size) * 1e-3
    reading = (1.0 + err.gain_error) * true_c + err.offset + err.drift_per_hour * t / 3600.0
    state = np.full(true_c.size, STATE_RUNNING, dtype=float)
    state[:10] = 0.0  # idle rows: not averaged
    return {"t": t, "state": state, f"eng.{ch.name}": reading}


def test_the_oil_reading_loses_its_simulated_error() -> None:
    prof = load_profile(REALISTIC)
    true_c = np.linspace(24.0, 27.0, 1000)
    true_c[:10] = 90.0  # an idle stretch that must not count
    expected = float(np.mean(true_c[10:]))
    assert true_mean_oil_c(_columns(prof, true_c), prof) == pytest.approx(expected, abs=1e-9)


def test_a_calibrated_runs_oil_reading_is_undone_before_its_simulated_error() -> None:
    """The recorded reading carries the run's calibration (the loop applies it); the truth
    takes it out first, else a calibrated run's true oil is the sensor error off twice."""
    prof = load_profile(REALISTIC)
    true_c = np.linspace(24.0, 27.0, 1000)
    cols = _columns(prof, true_c)
    name = f"eng.{prof.oil_temperature.name}"  # type: ignore[union-attr]
    gain, offset = 1.004, 0.62  # a calibration's correction: eng = (declared − offset) / gain
    cols[name] = (cols[name] - offset) / gain
    cal = {"channels": {prof.oil_temperature.name: {"gain": gain, "offset": offset}}}  # type: ignore[union-attr]
    expected = float(np.mean(true_c[10:]))
    assert true_mean_oil_c(cols, prof, cal) == pytest.approx(expected, abs=1e-9)
    assert abs(true_mean_oil_c(cols, prof) - expected) > 0.5  # type: ignore[operator]
    assert true_oil_c(cols, prof, 500, None, cal) == pytest.approx(true_c[500], abs=1e-9)


def test_every_real_rig_parameter_has_the_simulators_value() -> None:
    prof = load_profile(REALISTIC)
    true, eff = sim_plant(prof)
    truth = family_truth(prof, _columns(prof, np.full(1000, 30.0)))
    n = true.n
    # The family's joint viscous Fv± have no single true value: the simulator's viscous
    # friction acts at the piston, in proportion to the moment arm squared (lin_plant).
    viscous = {f"Fv{s}{i}" for s in "+-" for i in range(1, n + 1)}
    for name in lin_mech_names(n) + lin_fluid_names(n, null_shift=True):
        assert (name in truth and math.isfinite(truth[name])) == (name not in viscous), name
    for i, j in enumerate(eff.joints, 1):
        assert truth[f"Fc+{i}"] == j.coulomb_pos and truth[f"Fc-{i}"] == j.coulomb_neg
        assert truth[f"dFs+{i}"] == pytest.approx(j.stiction_pos - j.coulomb_pos)
        assert truth[f"dFs-{i}"] == pytest.approx(j.stiction_neg - j.coulomb_neg)
        assert truth[f"Cint{i}"] == j.leak_internal
        assert truth[f"Cext{i}"] == j.leak_external
        # The profile declares an oil law: the null offsets at its 40 °C, the shift per K.
        cf = true.flow_gains[i - 1]
        q0, _ = valve_coefficients(cf, j.null_bias, j.lap, j.null_leak_opening)
        for e, v, t in zip(EDGES, q0, cf * j.null_shift_per_k, strict=True):
            assert truth[f"Q0{e}{i}"] == pytest.approx(v, rel=1e-12, abs=0.0)
            assert truth[f"Qt{e}{i}"] == pytest.approx(t, rel=1e-12, abs=0.0)
    assert truth["air"] == eff.air_content


def test_without_an_oil_law_the_null_offsets_are_the_runs() -> None:
    """No [plant.oil]: no null-shift columns, and the null offsets' truth is the valve's bias
    moved by its shift per K to the run's true 30 °C."""
    prof = load_profile(REALISTIC)
    prof = prof.model_copy(update={"plant": prof.plant.model_copy(update={"oil": None})})
    true, eff = sim_plant(prof)
    truth = family_truth(prof, _columns(prof, np.full(1000, 30.0)))
    assert not any(k.startswith("Qt") for k in truth)
    for i, j in enumerate(eff.joints, 1):
        b0 = j.null_bias + j.null_shift_per_k * (30.0 - eff.reference_c)
        q0, _ = valve_coefficients(true.flow_gains[i - 1], b0, j.lap, j.null_leak_opening)
        for e, v in zip(EDGES, q0, strict=True):
            assert truth[f"Q0{e}{i}"] == pytest.approx(v, rel=1e-12, abs=0.0)


def test_no_truth_off_the_simulator() -> None:
    prof = load_profile(PROFILES / "ni-serial-2dof.toml")
    assert family_truth(prof, {}) == {}


def test_a_parameter_without_a_truth_has_no_error_column() -> None:
    rows = rows_from(["a", "b"], None, np.array([1.0, 2.0]), np.ones(2), np.array([1.1, np.nan]))
    assert rows[0].truth == 1.1 and rows[1].truth is None
    assert rows[1].error_pct(2.0) is None and rows[0].error_pct(1.0) is not None
