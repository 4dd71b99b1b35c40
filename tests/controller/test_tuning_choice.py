"""`rigctl tune`'s choice among gain sets that reach the bandwidth: the smallest ΔP gain, an
integral gain whose predicted step overshoot stays within bounds, and what that does to a 2°
step on the realistic plant (stiction, lap, leakage: nothing the linear model holds)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import signal

from controller import hydraulic_linear as hl
from controller import tuning
from daq.param_set import read_param_set
from daq.profile.plant import plant_params
from daq.sim_closed_loop import StepRunner
from tests.controller.simloop import ROOT, SimLoop, gains_limits, profile

HOME = np.radians([40.0, 30.0])
PARAMS = ROOT / "tests" / "params" / "data" / "sim2dofreal-lin-params.toml"


def _g(dp: float, p: float = 2.0) -> hl.LoopGains:
    return hl.LoopGains(p, 0.0, 0.0, dp, 1.0 if dp else 0.0)


def test_the_smallest_dp_gain_in_the_band_wins_else_the_closest_bandwidth() -> None:
    cands = [(_g(0.15), 3.0, 0.33), (_g(0.05), 2.6, 0.4), (_g(0.0), 1.2, 0.9), (_g(0.03), 4.0, 0.5)]
    g, bw = tuning._choose(cands, 3.0)
    assert (g.dp, bw) == (0.05, 2.6)  # 0.03 is outside the band (4.0 > 3 × 1.25), 0.0 too
    g, bw = tuning._choose([(_g(0.15), 10.0, 0.33), (_g(0.0), 1.0, 0.9)], 3.0)
    assert (g.dp, bw) == (0.0, 1.0)  # none in the band: |log(1/3)| < |log(10/3)|


def test_step_overshoot_agrees_with_an_independent_step_response() -> None:
    lin = hl.linearise(plant_params(profile("sim-2dof")), 0, HOME)
    for g in (hl.LoopGains(3.0, 4.0, 0.0, 0.05, 1.0), hl.LoopGains(2.0, 0.0, 0.0, 0.2, 1.0)):
        A, B0, _, C = hl.state_space(lin, g, 1e-3)
        t = np.arange(6001) * 1e-3
        _, y = signal.step(signal.StateSpace(A, B0[:, None], C[None, :], 0.0), T=t)
        assert hl.step_overshoot_pct(lin, g, 1e-3) == pytest.approx(100 * (y.max() - 1), abs=0.2)


@pytest.fixture(scope="module")
def realistic() -> tuple[object, object, list[tuning.JointTuning]]:
    prof = profile("sim-2dof-realistic")
    params = read_param_set(PARAMS, prof).params
    home = np.radians([j.home_deg for j in prof.joints])
    return prof, params, tuning.tune(params, home, prof.period, 3.0, 2.0)


def test_tuned_integral_keeps_the_predicted_overshoot_and_would_not_at_its_first_corner(
    realistic,
) -> None:
    prof, params, tuned = realistic
    home = np.radians([j.home_deg for j in prof.joints])
    for j, t in enumerate(tuned):
        assert t.gains.i > 0.0
        assert t.step_overshoot_pct <= tuning.MAX_STEP_OVERSHOOT_PCT
        # The corner a decade under the bandwidth alone overshoots more: the halving acted.
        lin = hl.linearise(params, j, home)
        first = hl.LoopGains(t.gains.p, 2 * t.gains.i, 0.0, t.gains.dp, t.gains.dp_hp_hz)
        assert hl.step_overshoot_pct(lin, first, prof.period) > tuning.MAX_STEP_OVERSHOOT_PCT


@pytest.mark.slow
def test_a_2deg_step_on_the_realistic_plant_with_tuned_gains_overshoots_little(realistic) -> None:
    """The bench's target is 10 %; with this parameter file the simulated step (deterministic)
    overshoots 9.9 % / 11.0 % (a count of the sensors' resolution is 1.1 % of 2°), and the
    largest ΔP gain in the band gave 18 % / 37 % before. The bound is the target plus two
    counts, so that the stick–slip regression fails it and a count's rounding does not."""
    prof, _, tuned = realistic
    gains, limits = gains_limits(prof)
    g = [
        base.replace(p=t.gains.p, i=t.gains.i, dp=t.gains.dp, dp_hp_hz=t.gains.dp_hp_hz, ff1=0.0)
        for base, t in zip(gains, tuned, strict=True)
    ]
    step, at = math.radians(2.0), 4.0
    _, ref, q = SimLoop(prof).run(StepRunner(g, limits, prof.period, step, at), at + 3.0)
    k = round(at / prof.period)
    rise = (q[k:] - q[k - 1]) / step
    overshoot = 100 * (rise.max(axis=0) - 1.0)
    assert np.all(overshoot <= 12.2), overshoot
    assert np.all(np.abs(np.degrees(ref[-1] - q[-1])) < 0.2)  # it gets there


def test_the_integral_is_halved_up_to_four_times_then_dropped(realistic, monkeypatch) -> None:
    prof, params, _ = realistic
    lin = hl.linearise(params, 0, np.radians([j.home_deg for j in prof.joints]))
    g, bw = tuning._choose(tuning._candidates(lin, prof.period, 2.0), 3.0)
    i0 = g.p * 2 * math.pi * bw / 10
    over = [
        hl.step_overshoot_pct(lin, hl.LoopGains(g.p, i0 / 2**k, 0.0, g.dp, g.dp_hp_hz), prof.period)
        for k in range(5)
    ]
    assert all(a > b for a, b in itertools.pairwise(over)), over
    # A bound only the fourth halving meets: the integral ends at i0/16.
    monkeypatch.setattr(tuning, "MAX_STEP_OVERSHOOT_PCT", 0.5 * (over[3] + over[4]))
    assert tuning._with_integral(lin, g, bw, prof.period, 2.0).i == pytest.approx(i0 / 16)
    # A bound no halving meets: no integral.
    monkeypatch.setattr(tuning, "MAX_STEP_OVERSHOOT_PCT", over[4] - 0.01)
    assert tuning._with_integral(lin, g, bw, prof.period, 2.0).i == 0.0


def test_the_predicted_response_covers_what_rigctl_tune_prints(realistic) -> None:
    _, _, tuned = realistic
    for t in tuned:
        assert np.all(np.diff(t.freqs_hz) > 0)
        assert t.freqs_hz[0] == pytest.approx(0.1) and t.freqs_hz[-1] >= 12.0


def test_the_margin_range_includes_its_ends_as_documented(realistic) -> None:
    """(1, 10]: a factor of 10 passes the range check (this model then cannot reach it, which
    is another refusal), 1 (no margin) and above 10 are refused as out of range."""
    prof, params, _ = realistic
    home = np.radians([j.home_deg for j in prof.joints])
    with pytest.raises(tuning.TuneError, match="no gains reach a gain margin of 10 "):
        tuning.tune(params, home, prof.period, 3.0, 10.0)
    for bad in (1.0, 10.01):
        with pytest.raises(tuning.TuneError, match=r"gain margin .* out of range \(1, 10\]"):
            tuning.tune(params, home, prof.period, 3.0, bad)
