"""The sensors' calibration uncertainty in the batch's σ (estimator.sensor_sigma): zero without
any, each channel's share equal to the change a brute-force refit shows, the total never below
the noise σ, calibration σ preferred over the datasheet class, identifiability judged on it."""

from __future__ import annotations

import numpy as np
import pytest

from daq.profile.plant import plant_params
from estimator.batch import identify_run
from estimator.sensor_sigma import ChannelUncertainty, channel_uncertainty


def _cols(layout, rows):
    return {n: rows[:, i] for i, n in enumerate(layout.names)}


def test_a_pressure_offset_reaches_the_parameters_as_a_refit_shows(sim1dof_run) -> None:
    profile, layout, rows = sim1dof_run
    cols = _cols(layout, rows)
    params = plant_params(profile)
    plain = identify_run(cols, params, profile=profile, refine=False)
    assert plain.sigma_pct_noise is None
    sigma_o = 20e3  # Pa: a pressure transducer's zero class
    unc = {"p_cap_1": ChannelUncertainty(sigma_o, 0.0, "datasheet")}
    counted = identify_run(cols, params, profile=profile, refine=False, sensor_uncertainty=unc)
    np.testing.assert_allclose(counted.theta, plain.theta)
    np.testing.assert_allclose(counted.sigma_pct_noise, plain.sigma_pct)
    assert np.all(counted.sigma_pct[counted.identifiable] >= plain.sigma_pct[counted.identifiable])
    # Brute force: the same run with the channel actually 20 kPa off.
    moved = dict(cols)
    moved["eng.p_cap_1"] = cols["eng.p_cap_1"] + sigma_o
    shifted = identify_run(moved, params, profile=profile, refine=False)
    change = np.abs(shifted.theta - plain.theta)
    sigma_cal = np.concatenate([f.sigma_cal for f in counted.fits])
    big = change > 1e-3 * np.abs(plain.theta)
    assert big.any()  # the offset matters to some parameter (gravity moment, flow gains)
    np.testing.assert_allclose(sigma_cal[big], change[big], rtol=0.05)


def test_calibration_sigma_replaces_the_datasheet_class() -> None:
    from daq.profile.loader import load_profile
    from tests.estimator.conftest import ROOT

    profile = load_profile(ROOT / "hw_profiles" / "sim-2dof-realistic.toml")
    datasheet = channel_uncertainty(profile, None)
    assert datasheet["p_cap_1"] == ChannelUncertainty(25e3, 0.005, "datasheet")
    cal = {"channels": {"p_cap_1": {"sigma_offset": 150.0, "sigma_gain": 0.0}}}
    after = channel_uncertainty(profile, cal)
    assert after["p_cap_1"] == ChannelUncertainty(150.0, 0.0, "calibration")
    assert after["p_rod_1"].source == "datasheet"
    assert "valve_1" not in after  # outputs carry none


def test_a_large_sensor_uncertainty_makes_a_parameter_unidentifiable(sim1dof_run) -> None:
    profile, layout, rows = sim1dof_run
    unc = {"p_cap_1": ChannelUncertainty(1.0e6, 0.0, "datasheet")}  # 1 MPa: hopeless
    res = identify_run(
        _cols(layout, rows), plant_params(profile), profile=profile, refine=False,
        sensor_uncertainty=unc,
    )  # fmt: skip
    assert not res.identifiable.all()
    assert any("calibration uncertainty" in w and "p_cap_1.offset" in w for w in res.warnings)
    pytest.importorskip("scipy")


def test_an_lvdt_offset_moves_every_null_flow_of_its_joint_by_the_gain_times_the_offset() -> None:
    """Q0ₑ = Cfₑ (b₀ − …) with b₀ read in the LVDT's frame: the offset's share of Q0ₑ is at
    least |Cfₑ|·σ_offset, whatever the refit with the structure held found; a larger refit
    share stands; other parameters and the other joint's LVDT keep theirs."""
    from daq.profile.loader import load_profile
    from estimator.models_lin import EDGES
    from estimator.sensor_sigma import Propagated, null_position_shares
    from tests.estimator.conftest import ROOT

    profile = load_profile(ROOT / "hw_profiles" / "sim-2dof-realistic.toml")
    names = ["1/b", *(f"Cf{e}1" for e in EDGES), *(f"Q0{e}1" for e in EDGES), "Q0++2"]
    theta = np.array([1e-9, 2.0, -3.0, 4.0, 5.0, 0.01, 0.02, -0.5, 0.03, 0.7])
    refit = np.array([1e-12, 0.0, 0.0, 0.0, 0.0, 0.001, 0.002, 0.2, 0.0, 0.0])
    pressure = np.full(len(names), 0.004)
    prop = Propagated(np.hypot(refit, pressure), {"spool_1.offset": refit.copy(),
                                                  "p_cap_1.offset": pressure})  # fmt: skip
    unc = channel_uncertainty(profile, None)
    assert unc["spool_1"].offset == 0.01
    null_position_shares(prop, names, theta, profile, unc)
    share = prop.shares["spool_1.offset"]
    for k, e in enumerate(EDGES):
        expect = max(refit[5 + k], abs(theta[1 + k]) * 0.01)
        assert share[5 + k] == pytest.approx(expect), e
    assert share[7] == pytest.approx(0.2)  # the refit's larger share kept
    np.testing.assert_array_equal(share[:5], refit[:5])  # 1/b and the gains untouched
    assert share[9] == 0.0  # Q0++2 is joint 2's: spool_1 does not move it
    np.testing.assert_allclose(prop.sigma, np.hypot(share, pressure))
    assert "spool_2.offset" in prop.shares and prop.shares["spool_2.offset"][9] == 0.0


def test_a_parameter_whose_3_sigma_spans_zero_is_flagged_whatever_the_share() -> None:
    """combine: sensors pushing 3σ past 5 % of the size flag it (noise alone did not); 3σ past
    the value itself flags it even where the noise alone was already over 5 % (the batch had
    let it through); a noise-weak parameter whose interval keeps its sign stays as it was."""
    from types import SimpleNamespace

    from estimator.sensor_sigma import Propagated, combine

    names = ["a", "b", "c", "d"]
    theta = np.array([1.0, 1.0, 1.0, -1.0])
    noise_pct = np.array([1.0, 1.0, 10.0, 20.0])  # c, d: over 5 %/3 from noise alone
    cal = np.array([0.001, 0.05, 0.1, 0.3])  # b: sensors push it over; d: ±3σ spans zero
    fit = SimpleNamespace(names=names, theta=theta, sigma_pct=noise_pct.copy(),
                          identifiable=np.ones(4, dtype=bool))  # fmt: skip
    warnings = combine(fit, Propagated(cal, {"spool_1.offset": cal}))
    assert list(fit.identifiable) == [True, False, True, False]
    np.testing.assert_allclose(fit.sigma_pct, 100.0 * np.hypot(noise_pct / 100.0, cal))
    assert len(warnings) == 2
    assert warnings[0].startswith("b not identifiable once the sensors'")
    assert warnings[1].startswith("d not identifiable: ±3σ") and "spans zero" in warnings[1]
    assert "largest spool_1.offset" in warnings[1]


def _realistic():  # type: ignore[no-untyped-def]
    from daq.profile.loader import load_profile
    from tests.estimator.conftest import ROOT

    return load_profile(ROOT / "hw_profiles" / "sim-2dof-realistic.toml")


def test_channels_without_any_sigma_are_left_out_and_the_rest_still_listed() -> None:
    """A channel with no class and no calibration, or a calibration of zero σ, carries no
    uncertainty, and the channels after it still do; a σ on either term is enough."""
    from daq.profile import parse_profile

    data = _realistic().model_dump(mode="python", exclude_none=True)
    first = data["channels"][0]["name"]
    data["channels"][0].pop("accuracy", None)
    profile = parse_profile(data)
    cal = {"channels": {
        "p_rod_1": {"sigma_offset": 0.0, "sigma_gain": 0.0},
        "p_cap_2": {"sigma_offset": 0.0, "sigma_gain": 0.002},
        "p_rod_2": {"sigma_offset": 90.0, "sigma_gain": 0.0},
    }}  # fmt: skip
    unc = channel_uncertainty(profile, cal)
    assert first not in unc
    assert "p_rod_1" not in unc
    assert unc["p_cap_2"] == ChannelUncertainty(0.0, 0.002, "calibration")
    assert unc["p_rod_2"] == ChannelUncertainty(90.0, 0.0, "calibration")
    assert unc["q_2"].source == "datasheet"  # a channel after the first


def test_the_channels_the_batch_reads_and_the_oil_one_only_with_an_oil_law() -> None:
    import dataclasses

    from daq.profile.plant import plant_params
    from estimator.sensor_sigma import used_channels

    profile = _realistic()
    params = plant_params(profile)
    assert params.oil is not None
    oil = profile.oil_temperature
    assert oil is not None
    with_law = used_channels(profile, params)
    roles = {c.name: c.role for c in profile.inputs}
    assert oil.name in with_law
    assert all(roles[n] != "supply" for n in with_law)
    without = used_channels(profile, dataclasses.replace(params, oil=None))
    assert without == [n for n in with_law if n != oil.name]
    # A supply transducer tied to a joint is still not a signal the batch reads.
    data = profile.model_dump(mode="python", exclude_none=True)
    for c in data["channels"]:
        if c["role"] == "supply":
            c["joint"] = data["joints"][0]["name"]
    from daq.profile import parse_profile

    assert used_channels(parse_profile(data), params) == with_law
    assert {roles[n] for n in without} == {
        "resolver", "potentiometer", "pressure_cap", "pressure_rod", "lvdt"
    }  # fmt: skip


def test_each_channel_is_moved_by_its_own_sigma_and_only_by_a_nonzero_one() -> None:
    from estimator.sensor_sigma import perturbed

    col = np.array([1.0, 2.0, -4.0])
    cols = {"eng.a": col, "eng.b": col, "eng.c": col, "t": col}
    unc = {
        "b": ChannelUncertainty(0.0, 0.01, "calibration"),
        "c": ChannelUncertainty(0.5, 0.0, "datasheet"),
    }
    out = dict(perturbed(cols, unc, ["a", "b", "c", "missing"]))
    assert list(out) == ["b.gain", "c.offset"]
    np.testing.assert_allclose(out["b.gain"]["eng.b"], col * 1.01)
    np.testing.assert_allclose(out["c.offset"]["eng.c"], col + 0.5)
    np.testing.assert_array_equal(out["b.gain"]["eng.c"], col)  # one channel at a time


def test_a_one_point_calibrations_gain_error_acts_around_its_pivot() -> None:
    """An offset measured at x₀ with the gain kept absorbs the gain's error there: the gain's
    σ moves a reading at x by σ·(x − x₀) (daq.station.calfile, "pivot"), so a temperature
    calibrated at 22 °C is not moved 0.22 °C at 22 °C by a 1 % class."""
    from estimator.sensor_sigma import perturbed

    profile = _realistic()
    oil = profile.oil_temperature
    assert oil is not None
    cal = {"channels": {oil.name: {"sigma_offset": 0.1, "sigma_gain": 0.01, "pivot": 22.0}}}
    unc = channel_uncertainty(profile, cal)[oil.name]
    assert unc == ChannelUncertainty(0.1, 0.01, "calibration", 22.0)
    col = np.array([22.0, 25.0, 32.0])
    out = dict(perturbed({f"eng.{oil.name}": col}, {oil.name: unc}, [oil.name]))
    np.testing.assert_allclose(out[f"{oil.name}.gain"][f"eng.{oil.name}"] - col, [0, 0.03, 0.1])
    # the datasheet's class has no pivot: its gain error acts on the whole reading
    assert channel_uncertainty(profile, None)[oil.name].pivot == 0.0


def test_a_failed_refit_is_skipped_and_the_others_still_counted() -> None:
    from estimator.sensor_sigma import propagate

    cols = {"eng.a": np.zeros(3), "eng.b": np.zeros(3)}
    unc = {n: ChannelUncertainty(1.0, 0.0, "datasheet") for n in ("a", "b")}

    def refit(c):  # type: ignore[no-untyped-def]
        if c["eng.a"][0] == 1.0:
            return None  # a's refit fails
        return np.array([10.0 + 3.0 * c["eng.b"][0], 5.0])

    prop = propagate(refit, cols, unc, ["a", "b"])
    assert prop is not None
    assert list(prop.shares) == ["b.offset"]
    np.testing.assert_allclose(prop.sigma, [3.0, 0.0])


def test_the_largest_share_in_words_and_none_without_a_sigma() -> None:
    from estimator.sensor_sigma import Propagated

    prop = Propagated(np.array([5.0, 0.0]), {"x.offset": np.array([3.0, 0.0]),
                                              "y.gain": np.array([4.0, 0.0])})  # fmt: skip
    assert prop.largest(0, ["p", "q"]) == "y.gain 64 %"
    assert prop.largest(1, ["p", "q"]) == ""
    assert Propagated(np.array([1.0]), {}).largest(0, ["p"]) == ""


def test_an_lvdt_gain_sigma_alone_adds_no_null_flow_share() -> None:
    from estimator.sensor_sigma import Propagated, null_position_shares

    profile = _realistic()
    names = ["Cf++1", "Q0++1"]
    prop = Propagated(np.zeros(2), {})
    unc = {"spool_1": ChannelUncertainty(0.0, 0.01, "calibration")}
    null_position_shares(prop, names, np.array([2.0, 0.01]), profile, unc)
    assert "spool_1.offset" not in prop.shares
    np.testing.assert_array_equal(prop.sigma, 0.0)


def test_the_warnings_give_each_sigma_as_a_percentage_of_the_value() -> None:
    from types import SimpleNamespace

    from estimator.sensor_sigma import Propagated, combine

    theta = np.array([2.0, -4.0])
    cal = np.array([0.1, 2.0])  # 5 % of a (sensors push 3σ over 5 %); 50 % of b (spans zero)
    fit = SimpleNamespace(names=["a", "b"], theta=theta, sigma_pct=np.array([0.0, 0.0]),
                          identifiable=np.ones(2, dtype=bool))  # fmt: skip
    warnings = combine(fit, Propagated(cal, {"p.offset": cal}))
    assert "a: σ 5.0 % of which sensors 5.0 % (largest p.offset 100 %)" in warnings[0]
    assert "b: σ 50.0 % of which sensors 50.0 %" in warnings[1]


@pytest.mark.parametrize("unit", [1e-9, 1.0, 1e6])
def test_the_verdicts_are_relative_to_each_parameters_size(unit: float) -> None:
    """combine's 5 % rule is a fraction of each parameter's size: a bulk compliance of
    1e-9 1/Pa and a mass of 1e3 kg are judged alike. The same fit in other units gives the
    same verdicts (b pushed over 5 % by its sensors, d spanning zero)."""
    from types import SimpleNamespace

    from estimator.sensor_sigma import Propagated, combine

    theta = unit * np.array([1.0, 1.0, 1.0, -1.0])
    cal = unit * np.array([0.001, 0.05, 0.1, 0.3])
    fit = SimpleNamespace(names=["a", "b", "c", "d"], theta=theta,
                          sigma_pct=np.array([1.0, 1.0, 10.0, 20.0]),
                          identifiable=np.ones(4, dtype=bool))  # fmt: skip
    combine(fit, Propagated(cal, {"spool_1.offset": cal}))
    assert list(fit.identifiable) == [True, False, True, False]


def test_a_joint_without_an_lvdt_uncertainty_is_skipped_and_the_next_still_widened() -> None:
    from daq.profile.loader import load_profile
    from estimator.sensor_sigma import Propagated, null_position_shares
    from tests.estimator.conftest import ROOT

    profile = load_profile(ROOT / "hw_profiles" / "sim-2dof-realistic.toml")
    names = ["Cf++1", "Q0++1", "Cf++2", "Q0++2"]
    theta = np.array([2.0, 0.01, 3.0, 0.02])
    prop = Propagated(np.zeros(4), {})
    unc = {k: v for k, v in channel_uncertainty(profile, None).items() if k != "spool_1"}
    assert unc["spool_2"].offset > 0
    null_position_shares(prop, names, theta, profile, unc)
    assert "spool_1.offset" not in prop.shares
    share = prop.shares["spool_2.offset"]
    assert share[3] == pytest.approx(3.0 * unc["spool_2"].offset)
    assert share[1] == 0.0
