"""Load-pressure (ΔP) feedback: the per-cycle functions, their effect on the hydraulic
resonance in closed loop, and the refusals where the pressures are not measured."""

from __future__ import annotations

import math
import tomllib

import numpy as np
import pytest

from controller import pressure_feedback as pf
from controller.laws import PidLaw
from controller.runner import HoldRunner
from daq.profile.loader import ProfileError, parse_profile
from tests.controller.simloop import ROOT, SimLoop, gains_limits, profile


def test_highpass_removes_a_constant_load_and_passes_a_fast_one() -> None:
    st = pf.new_state(1)
    a = pf.highpass_coefficient(1.0, 1e-3)
    out = [pf.dp_feedback_step(st, 0, 500.0, 1e-3, a) for _ in range(5000)]
    assert out[0] == 0.0  # bumpless first sample
    assert abs(out[-1]) < 1e-9  # a held gravity load gives no command
    # A 10 Hz force ripple passes (|H| = 1/√(1 + (1/10)²) ≈ 0.995 at a 1 Hz corner).
    t = np.arange(3000) * 1e-3
    y = [
        pf.dp_feedback_step(st, 0, 500.0 + 100.0 * math.sin(2 * math.pi * 10 * x), 1.0, a)
        for x in t
    ]
    assert np.ptp(y[1000:]) == pytest.approx(200.0, rel=0.03)
    # A NaN pressure keeps the filter and outputs nothing.
    assert pf.dp_feedback_step(st, 0, math.nan, 1.0, a) == 0.0
    # Unfiltered (α = 1): the raw force times the gain, sign opposing it.
    assert pf.dp_feedback_step(st, 0, 300.0, 2e-3, 1.0) == pytest.approx(-0.6)


def test_per_cycle_functions_compile_with_numba() -> None:
    numba = pytest.importorskip("numba")
    step = numba.njit(pf.dp_feedback_step)
    force = numba.njit(pf.load_force)
    s1, s2 = pf.new_state(2), pf.new_state(2)
    for k in range(200):
        f = force(3e6 + 1e4 * math.sin(k / 7), 2e6, 7e-4, 5.4e-4)
        assert step(s1, 1, f, 1e-3, 0.99) == pytest.approx(
            pf.dp_feedback_step(s2, 1, f, 1e-3, 0.99)
        )


def _hold_spread_deg(name: str, p: float, dp: float) -> np.ndarray:
    prof = profile(name)
    gains, limits = gains_limits(prof)
    gg = [g.replace(p=p, dp=dp, dp_hp_hz=1.0) for g in gains]
    _, _, q = SimLoop(prof).run(HoldRunner(gg, limits, prof.period), 3.0)
    return np.degrees(np.std(q[1000:] - q[1000:].mean(axis=0), axis=0))


def test_dp_feedback_damps_the_resonance_a_high_position_gain_excites() -> None:
    # p = 8 V/rad on the reference rig holds in a ~7.5 Hz limit cycle (±1°); ΔP feedback damps
    # the oil column and the same gain holds to the sensor noise.
    assert _hold_spread_deg("sim-2dof", 8.0, 0.0).min() > 0.3
    assert _hold_spread_deg("sim-2dof", 8.0, 1.0).max() < 0.05


def test_dp_feedback_refused_without_pressure_measurements() -> None:
    gains, limits = gains_limits(profile("sim-2dof"))
    bare = [type(lim)(*[getattr(lim, f) for f in ("position_min", "position_max",
            "max_velocity", "max_acceleration", "valve_max_v")]) for lim in limits]  # fmt: skip
    with pytest.raises(ValueError, match="needs the joint's cap and rod pressure"):
        PidLaw([g.replace(dp=1.0) for g in gains], bare, 1e-3)
    PidLaw([g.replace(dp=1.0) for g in gains], limits, 1e-3)  # with pressures: accepted
    # Every profile measures both pressures of a joint (required roles); what a profile can lack
    # is the piston areas: a real rig's profile may have no [plant] section.
    with open(ROOT / "hw_profiles" / "ni-2dof.toml", "rb") as f:
        d = tomllib.load(f)
    del d["plant"]
    parse_profile(d)
    d["joints"][0].setdefault("pid", {})["dp"] = 1.0
    with pytest.raises(ProfileError, match=r"pid.dp = 1.0: ΔP feedback needs the piston areas"):
        parse_profile(d)
    d["joints"][0]["pid"]["dp"] = 0.0
    d["joints"][0]["pid"]["hold_dp"] = 0.05  # the hold's own ΔP: the same need
    with pytest.raises(ProfileError, match=r"pid.hold_dp = 0.05: ΔP feedback needs the piston"):
        parse_profile(d)


def test_dp_leaves_no_limit_cycle_after_a_valve_sine_on_softer_oil() -> None:
    # The validation run's 3 Hz valve sine on a 30 % softer oil leaves the profile's p = 2 V/rad
    # hold in a ±1.7° limit cycle at ~7 Hz (then `rigctl identify` exits 4); ΔP feedback
    # (dp = 0.15 V/kN, 1 Hz high-pass) damps it. (The reference profile leaves dp at 0: its
    # pressure noise fed into the valve command costs the nominal identification accuracy.)
    import json

    from controller.experiment import Experiment
    from controller.runner import ExperimentRunner

    with open(ROOT / "hw_profiles" / "sim-2dof.toml", "rb") as f:
        d = tomllib.load(f)
    d["backend"]["sim"]["plant"]["bulk_modulus_pa"] *= 0.7
    prof = parse_profile(d)
    with open(ROOT / "experiments" / "validation-2dof.toml", "rb") as f:
        e = tomllib.load(f)
    e["segments"] = [s for s in e["segments"] if s["name"] == "valve-sine-3hz"]
    e.pop("pid", None)
    gains, limits = gains_limits(prof)
    with_dp = [g.replace(dp=0.15, dp_hp_hz=1.0) for g in gains]
    spread = {}
    for label, gg in (("dp", with_dp), ("no_dp", [g.replace(dp=0.0) for g in gains])):
        loop = SimLoop(prof)
        r = ExperimentRunner(Experiment.from_dict(json.loads(json.dumps(e))), gg, limits,
                             prof.period, None)  # fmt: skip
        loop.run(r, r.total_duration + 0.01)
        _, _, q = loop.run(HoldRunner(gg, limits, prof.period), 3.0)
        spread[label] = np.degrees(np.abs(q[1000:] - q[1000:].mean(axis=0)).max(axis=0))
    assert spread["no_dp"].max() > 0.5
    assert spread["dp"].max() < 0.2
