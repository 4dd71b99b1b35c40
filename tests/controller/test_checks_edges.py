"""The limit check's edges (controller.checks): what it must still see after a refused segment,
a valve sine's offset and held joints, a harmonic sum whose speed is fine but whose
acceleration is not, the tolerance at a limit, incommensurate valve-sine frequencies, the
predicted excursion's dependence on the sine's frequency, a hold the valve cannot hold, a valve
sine exactly one sample period long, and the chunking of a period that is not a whole number of
samples."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

from controller.checks import (
    MAX_SEGMENT_DURATION_S,
    _predict_valve_sine,
    check_cost,
    check_experiment,
)
from controller.experiment import Experiment
from controller.feedforward import PlantModel
from controller.plant.dynamics import cylinder, inverse_dynamics
from daq.profile import load_profile
from daq.service.control_api import joint_limits
from tests.conftest import PROFILES
from tests.params.test_valve_sine_check import _guess_params

HOME = [40.0, 30.0]
PID = {"kind": "pid"}


def _limits() -> list[Any]:
    return joint_limits(load_profile(PROFILES / "sim-2dof.toml"))


def _exp(*segments: dict[str, Any]) -> Experiment:
    return Experiment.from_dict({"name": "e", "home_deg": HOME, "segments": list(segments)})


def _hold(duration: float, position_deg: list[float] | None = None) -> dict[str, Any]:
    traj: dict[str, Any] = {"kind": "hold"}
    if position_deg is not None:
        traj["position_deg"] = position_deg
    return {"name": "hold", "duration_s": duration, "trajectory": traj, "controller": PID}


def _sine(amplitude_deg: float, frequency_hz: float, name: str = "sine") -> dict[str, Any]:
    return {
        "name": name,
        "duration_s": 2.0,
        "controller": PID,
        "trajectory": {
            "kind": "sine",
            "amplitude_deg": [amplitude_deg, 0.0],
            "frequency_hz": [frequency_hz, 1.0],
        },
    }


def _valve_sine(amp: list[float], freq: list[float], offset: list[float] | None = None) -> dict:
    ctrl: dict[str, Any] = {
        "kind": "valve_sine",
        "amplitude_v": amp,
        "frequency_hz": freq,
        "centering_v_per_rad": [1.0, 1.0],
    }
    if offset is not None:
        ctrl["offset_v"] = offset
    return {"name": "vs", "duration_s": 2.0, "trajectory": {"kind": "hold"}, "controller": ctrl}


def test_a_segment_after_one_refused_for_its_length_is_still_checked() -> None:
    exp = _exp(_hold(MAX_SEGMENT_DURATION_S + 1.0), _sine(1.0, 5.0))
    got = {(v.segment, v.limit) for v in check_experiment(exp, _limits())}
    assert (0, "duration_s") in got and (1, "acceleration") in got


def test_a_harmonic_sum_within_its_speed_but_beyond_its_acceleration_is_refused() -> None:
    """1° at 5 Hz: 31 °/s (limit 60) but 990 °/s² (limit 600). The envelope that proves a
    harmonic sum safe without sampling must bound the acceleration by Σ ω² A."""
    lim = _limits()
    bad = [v for v in check_experiment(_exp(_sine(1.0, 5.0)), lim) if v.joint == 0]
    assert [v.limit for v in bad] == ["acceleration"]
    a = math.radians(1.0) * (2 * math.pi * 5.0) ** 2
    assert bad[0].value == pytest.approx(a, rel=0.01) and bad[0].value > lim[0].max_acceleration
    assert check_experiment(_exp(_sine(0.5, 5.0)), lim) == []  # 495 °/s²


def test_the_valve_voltage_is_the_amplitude_plus_the_offset() -> None:
    lim = _limits()
    vmax = lim[0].valve_max_v
    exp = _exp(_valve_sine([0.6 * vmax, 0.0], [1.0, 1.0], [0.6 * vmax, 0.0]))
    volts = [v for v in check_experiment(exp, lim) if v.limit == "valve_voltage"]
    assert [(v.joint, v.value) for v in volts] == [(0, pytest.approx(1.2 * vmax))]


def test_a_held_joint_does_not_hide_the_next_joints_band() -> None:
    """Without parameters: joint 1 held (amplitude 0), joint 2 driven out of its band — the
    band of joint 2 is still reported."""
    lim = _limits()
    exp = _exp(_valve_sine([0.0, 1.0], [1.0, 1.0]))
    bands = [v for v in check_experiment(exp, lim) if v.limit == "valve_sine_band"]
    assert [v.joint for v in bands] == [1]


def test_a_value_at_its_limit_within_float_noise_is_allowed_and_beyond_it_refused() -> None:
    """The tolerance is 1e-9 of the bound (at least 1e-9 absolute): a hold at exactly the
    position limit, or a relative 5e-10 beyond it on a limit of 2 rad, is allowed; 3e-9
    beyond is not."""
    lim = list(_limits())
    lim[0] = dataclasses.replace(lim[0], position_max=2.0)
    at = math.degrees(2.0)
    assert check_experiment(_exp(_hold(1.0, [at, 30.0])), lim) == []
    near = math.degrees(2.0 * (1.0 + 5e-10))
    assert check_experiment(_exp(_hold(1.0, [near, 30.0])), lim) == []
    beyond = math.degrees(2.0 * (1.0 + 3e-9))
    got = check_experiment(_exp(_hold(1.0, [beyond, 30.0])), lim)
    assert [(v.joint, v.limit) for v in got] == [(0, "position_max")]


def test_incommensurate_valve_sine_frequencies_are_predicted_without_a_period() -> None:
    """1 Hz and √2 Hz have no common period: the prediction runs the whole segment (no
    steady-state shortcut) and finds it inside the limits."""
    exp = _exp(_valve_sine([0.05, 0.05], [1.0, math.sqrt(2.0)]))
    assert check_experiment(exp, _limits(), _guess_params()) == []


def test_the_predicted_excursion_shrinks_as_the_valve_sine_speeds_up() -> None:
    """Open loop the piston integrates the flow, pulled back by the centring gain: the
    excursion about the hold goes as A/√(ω² + ω_c²) — four times the frequency, less than half
    the swing (2.15× on these guesses)."""
    lim = _limits()
    model = PlantModel(_guess_params())

    def swing(freq: float) -> float:
        seg = _exp(_valve_sine([0.1, 0.0], [freq, 1.0])).segments[0]
        q = np.vstack([c[1] for c in _predict_valve_sine(seg, lim, model, 500.0, 256)])
        return float(np.ptp(q[:, 0]))

    slow, fast = swing(0.5), swing(2.0)
    assert 1.8 < slow / fast < 4.0, (slow, fast)


def test_the_predicted_acceleration_is_the_predicted_speeds_derivative_across_chunks() -> None:
    """The valve sine's acceleration check rests on q̈ = Δq̇/Δt of the prediction, row after
    row and across the chunks it is made in; at steady state |q̈|max ≈ ω |q̇|max."""
    lim = _limits()
    model = PlantModel(_guess_params())
    # incommensurate frequencies: no whole period to chunk by, so 64-row chunks
    seg = _exp(_valve_sine([0.1, 0.05], [2.0, 2.0 * math.sqrt(2.0)])).segments[0]
    rate = 500.0
    chunks = list(_predict_valve_sine(seg, lim, model, rate, 64))
    assert len(chunks) > 4
    qd = np.vstack([c[2] for c in chunks])
    qdd = np.vstack([c[3] for c in chunks])
    np.testing.assert_allclose(qdd[1:], np.diff(qd, axis=0) * rate, rtol=1e-9, atol=1e-12)
    omega = 2 * math.pi * 2.0
    ratio = np.abs(qdd[:, 0]).max() / (omega * np.abs(qd[:, 0]).max())
    assert 0.7 < ratio < 1.5, ratio


def test_a_hold_against_a_load_the_cap_side_cannot_hold_is_refused_for_valve_capacity() -> None:
    """At rest (ṡ = 0 exactly: a hold) the need is |ṡ| / the extending speed at full spool, and
    a load beyond A⁺·p_s leaves no extending speed: the need is infinite, the valve cannot hold
    the arm. At 8 bar supply j1's gravity (731 N on its piston at 40°) exceeds A⁺·p_s = 560 N
    while j2's (392 N) does not; at the profile's 70 bar both are held. (Rest counts as
    extending: taken as retracting, the rod side's ample speed would pass the hold, need 0.)"""
    lim = _limits()
    weak = dataclasses.replace(_guess_params(), supply_pressure=0.8e6)
    q = np.radians([HOME])
    _, r = cylinder(weak, q)
    force = (inverse_dynamics(weak, q, np.zeros_like(q), np.zeros_like(q)) / r)[0]
    cap = weak.area_cap * weak.supply_pressure
    assert force[0] > cap[0] and 0.0 < force[1] < cap[1]  # what the docstring says
    got = check_experiment(_exp(_hold(1.0)), lim, weak)
    assert [(v.joint, v.limit, v.time, v.value) for v in got] == [
        (0, "valve_capacity", 0.0, math.inf)
    ]
    assert check_experiment(_exp(_hold(1.0)), lim, _guess_params()) == []


def test_a_valve_sine_exactly_one_sample_period_long_is_predicted_over_both_its_samples() -> None:
    """1/500 s at 500 Hz holds two samples, t = 0 and t = 1/500 s (as `check_cost` counts
    them): the prediction runs, and a 1 V offset's predicted speed (≈ 4 rad/s, limit 1.05) is
    refused, as on any longer segment. Only a segment shorter than one sample period has the
    start alone to check (its reference: a hold)."""
    lim = _limits()
    params = _guess_params()

    def check(duration: float) -> tuple[list[tuple[int, str]], list[tuple[int, int]]]:
        seg = {**_valve_sine([0.1, 0.0], [1.0, 1.0], [1.0, 0.0]), "duration_s": duration}
        exp = _exp(seg)
        calls: list[tuple[int, int]] = []
        got = check_experiment(exp, lim, params, progress=lambda d, t: calls.append((d, t)))
        assert calls[-1][1] == check_cost(exp, lim, params)
        return [(v.joint, v.limit) for v in got], calls

    assert 500.0 * (1.0 / 500.0) == 1.0  # exactly one sample period, no rounding either way
    found, calls = check(1.0 / 500.0)
    assert found == [(0, "velocity"), (0, "acceleration")] and calls == [(2, 2)]
    assert check(0.0019) == ([], [(1, 1)])


def test_a_period_not_a_whole_number_of_samples_is_predicted_in_the_asked_chunks() -> None:
    """The prediction is chunked by whole periods (and may stop at a periodic steady state) only
    when a period is a whole number of samples: 2.5 Hz at 500 Hz is 200 samples, chunks of 200.
    3 Hz is 166⅔ samples: no chunk of samples is one period, so the asked 64-row chunks are
    kept and every sample is evaluated (progress steps of 64 to the total)."""
    lim = _limits()
    params = _guess_params()

    def steps(freq: float) -> list[int]:
        calls: list[tuple[int, int]] = []
        exp = _exp(_valve_sine([0.1, 0.0], [freq, 1.0]))
        assert (
            check_experiment(exp, lim, params, chunk=64, progress=lambda d, t: calls.append((d, t)))
            == []
        )
        assert calls[-1] == (1001, 1001)
        done = [d for d, _ in calls]
        return [b - a for a, b in zip([0, *done], done, strict=False)]

    assert steps(2.5) == [200] * 5 + [1]
    assert steps(3.0) == [64] * 15 + [41]


def test_a_hold_against_a_pull_the_rod_side_cannot_hold_is_refused_for_valve_capacity() -> None:
    """The hold's other side: a load pulling the piston out beyond A⁻·p_s leaves no retracting
    speed, and the valve cannot hold it either. Gravity reversed (the arm hung from the rig's
    ceiling) turns j1's 731 N push at 8 bar into a pull beyond A⁻·p_s = 432 N, j2's 392 N into
    one within it: j1 alone is refused, as for the push; at 70 bar both are held."""
    lim = _limits()
    hung = dataclasses.replace(_guess_params(), gravity=-9.81, supply_pressure=0.8e6)
    q = np.radians([HOME])
    _, r = cylinder(hung, q)
    force = (inverse_dynamics(hung, q, np.zeros_like(q), np.zeros_like(q)) / r)[0]
    pull = hung.area_rod * hung.supply_pressure
    assert -force[0] > pull[0] and 0.0 < -force[1] < pull[1]  # what the docstring says
    got = check_experiment(_exp(_hold(1.0)), lim, hung)
    assert [(v.joint, v.limit, v.time, v.value) for v in got] == [
        (0, "valve_capacity", 0.0, math.inf)
    ]
    strong = dataclasses.replace(hung, supply_pressure=_guess_params().supply_pressure)
    assert check_experiment(_exp(_hold(1.0)), lim, strong) == []


def test_a_joint_after_one_without_a_centring_gain_still_has_its_band_checked() -> None:
    """Without plant parameters: j1 has no centring gain (`parameters_needed`), and j2 after it
    is still bounded by its own band — 2 V over 1 V/rad leaves its soft-limit window."""
    seg = _valve_sine([0.1, 2.0], [1.0, 1.0])
    seg["controller"]["centering_v_per_rad"] = [0.0, 1.0]
    got = [(v.joint, v.limit) for v in check_experiment(_exp(seg), _limits())]
    assert got == [(0, "parameters_needed"), (1, "valve_sine_band")]
