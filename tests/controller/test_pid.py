"""The PID behaves as LinuxCNC's `pid` component documents (scenario tests; the pseudo-code
in its src/hal/components/pid.c)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.pid import Pid, PidParams

DT = 1e-3


def make(**kw: float) -> Pid:
    pid = Pid(PidParams(**kw), DT)
    pid.enable(0.0, 0.0)
    return pid


def test_proportional_and_bias() -> None:
    pid = make(p=2.0, bias=0.5)
    assert pid.update(0.3, 0.1) == pytest.approx(0.5 + 2.0 * 0.2)
    assert pid.error == pytest.approx(0.2)


def test_deadband_ignores_small_errors_and_shrinks_large_ones() -> None:
    pid = make(p=1.0, deadband=0.1)
    assert pid.update(0.05, 0.0) == 0.0
    assert pid.update(-0.09, 0.0) == 0.0
    assert pid.update(0.3, 0.0) == pytest.approx(0.2)
    assert pid.update(-0.3, 0.0) == pytest.approx(-0.2)


def test_max_error_limits_the_error_before_the_deadband() -> None:
    pid = make(p=1.0, max_error=0.5, deadband=0.1)
    assert pid.update(3.0, 0.0) == pytest.approx(0.4)
    assert pid.error == pytest.approx(3.0)  # the exported error is the raw one


def test_integrator_accumulates_error_times_period_and_is_limited() -> None:
    pid = make(i=10.0, max_error_i=0.05)
    for _ in range(20):
        pid.update(1.0, 0.0)
    assert pid.error_i == pytest.approx(0.02)
    for _ in range(100):
        pid.update(1.0, 0.0)
    assert pid.error_i == pytest.approx(0.05)
    assert pid.output == pytest.approx(0.5)


def test_max_i_limits_the_integral_contribution() -> None:
    pid = make(i=100.0, max_i=0.3)
    for _ in range(100):
        pid.update(1.0, 0.0)
    assert pid.error_i == pytest.approx(0.1)
    assert pid.output == pytest.approx(0.3)


def test_integrator_frozen_while_output_saturated_in_the_error_direction() -> None:
    pid = make(p=10.0, i=5.0, max_output=1.0)
    for _ in range(200):
        pid.update(1.0, 0.0)  # P alone saturates
    assert pid.saturated
    # Only the first cycle (before the limit was seen) integrated.
    assert pid.error_i == pytest.approx(1.0 * DT)
    frozen = pid.error_i
    pid.update(-0.01, 0.0)  # error reverses: integration resumes, unwinding
    assert pid.error_i < frozen


def test_saturation_flag_time_and_count() -> None:
    pid = make(p=10.0, max_output=1.0)
    for _ in range(5):
        assert pid.update(1.0, 0.0) == 1.0
    assert pid.saturated and pid.saturated_count == 5
    assert pid.saturated_s == pytest.approx(5 * DT)
    assert pid.update(-1.0, 0.0) == -1.0
    assert pid.limit_state == -1.0 and pid.saturated_count == 6
    pid.update(0.01, 0.0)
    assert not pid.saturated and pid.saturated_count == 0 and pid.saturated_s == 0.0


def test_feed_forward_terms() -> None:
    pid = make(ff0=2.0, ff1=0.5, ff2=0.01)
    out = [pid.update(0.1 * k * DT, 0.1 * k * DT) for k in range(1, 6)]  # ramp, zero error
    # ff0·cmd + ff1·slope (cmdD = 0.1); cmdDD = 0 after the first cycle.
    assert out[-1] == pytest.approx(2.0 * 0.1 * 5 * DT + 0.5 * 0.1)
    pid2 = make(ff2=1.0)
    for k in range(1, 6):
        pid2.update(0.5 * (k * DT) ** 2, 0.0)  # constant second derivative 1.0
    assert pid2.cmd_dd == pytest.approx(1.0, rel=1e-6)
    assert pid2.output == pytest.approx(1.0, rel=1e-6)


def test_max_cmd_d_limits_the_command_derivative() -> None:
    pid = make(ff1=1.0, max_cmd_d=0.2)
    pid.update(1.0, 1.0)  # a step: raw derivative 1000
    assert pid.cmd_d == pytest.approx(0.2)


def test_derivative_on_measurement_no_kick_on_command_step() -> None:
    pid = make(p=0.0, d=1.0)
    assert pid.update(1.0, 0.0) == 0.0  # command step: nothing from D
    out = pid.update(1.0, 0.001)  # feedback moves 1 mrad in one period: 1 rad/s
    assert out == pytest.approx(-1.0)


def test_derivative_limit_and_filter() -> None:
    pid = make(d=1.0, max_error_d=0.5)
    assert pid.update(0.0, 0.001) == pytest.approx(-0.5)
    filt = make(d=1.0, d_filter_hz=10.0)
    first = filt.update(0.0, 0.001)
    alpha = 1.0 - math.exp(-2 * math.pi * 10.0 * DT)
    assert first == pytest.approx(-alpha)
    for _ in range(2000):  # feedback keeps moving at 1 rad/s: the filter converges
        filt.update(0.0, filt._prev_fb + 0.001)
    assert filt.output == pytest.approx(-1.0, rel=1e-3)


def test_disable_forces_zero_and_resets_the_integrator() -> None:
    pid = make(p=1.0, i=1.0, bias=0.3)
    for _ in range(10):
        pid.update(1.0, 0.0)
    pid.disable()
    assert pid.error_i == 0.0
    assert pid.update(1.0, 0.0) == 0.0
    assert pid.error_i == 0.0


def test_bumpless_enable_starts_from_the_measured_position() -> None:
    pid = Pid(PidParams(p=5.0, d=2.0, ff1=1.0, ff2=0.1), DT)
    pid.enable(0.0, 0.0)
    pid.update(0.0, 0.0)
    pid.disable()
    # Far away now; enable with command = measured position: no P, D or FF kick.
    pid.enable(1.2, 1.2)
    assert pid.update(1.2, 1.2) == 0.0


def test_set_params_keeps_state() -> None:
    pid = make(i=1.0)
    for _ in range(10):
        pid.update(1.0, 0.0)
    pid.set_params(PidParams(i=2.0))
    assert pid.error_i == pytest.approx(10 * DT)


def test_params_validation() -> None:
    with pytest.raises(ValueError, match="p must be >= 0"):
        PidParams(p=-1.0)
    with pytest.raises(ValueError, match="finite"):
        PidParams(ff1=float("nan"))
    with pytest.raises(ValueError, match="unknown PID parameter"):
        PidParams.from_mapping({"pgain": 1.0})
    with pytest.raises(ValueError, match="unknown"):
        PidParams().replace(kp=1.0)
    with pytest.raises(ValueError, match="period"):
        Pid(PidParams(), 0.0)


def test_from_profile_gains() -> None:
    from daq.profile.schema import PidGains

    g = PidGains(p=3.0, ff1=0.2, max_output=6.0, d_filter_hz=50.0)
    assert PidParams.from_mapping(g) == PidParams(p=3.0, ff1=0.2, max_output=6.0, d_filter_hz=50.0)
    assert {f for f in PidGains.model_fields} == set(PidParams.__dataclass_fields__)


finite = st.floats(-10, 10, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    p=st.floats(0, 100),
    i=st.floats(0, 100),
    d=st.floats(0, 1),
    lim=st.floats(0.1, 10),
    seq=st.lists(st.tuples(finite, finite), min_size=1, max_size=40),
)
def test_output_never_exceeds_max_output(
    p: float, i: float, d: float, lim: float, seq: list[tuple[float, float]]
) -> None:
    pid = make(p=p, i=i, d=d, ff1=0.3, bias=0.1, max_output=lim)
    for cmd, fb in seq:
        out = pid.update(cmd, fb)
        assert abs(out) <= lim
        assert pid.saturated == (pid.limit_state != 0.0)


# ------------------------------------------------------------ each limit, on both sides


def test_max_error_clamps_both_signs_and_passes_what_is_inside() -> None:
    pid = make(p=1.0, max_error=0.1)
    assert pid.update(0.5, 0.0) == pytest.approx(0.1)
    assert pid.update(-0.5, 0.0) == pytest.approx(-0.1)
    assert pid.update(0.05, 0.0) == pytest.approx(0.05)
    assert pid.update(-0.05, 0.0) == pytest.approx(-0.05)


def test_max_error_i_bounds_the_integral_on_both_sides() -> None:
    pid = make(i=1.0, max_error_i=0.01)
    for _ in range(100):
        pid.update(1.0, 0.0)
    assert pid.error_i == pytest.approx(0.01) and pid.output == pytest.approx(0.01)
    for _ in range(300):
        pid.update(-1.0, 0.0)
    assert pid.error_i == pytest.approx(-0.01) and pid.output == pytest.approx(-0.01)
    pid.update(0.5, 0.0)  # inside: it integrates again
    assert pid.error_i == pytest.approx(-0.01 + 0.5 * DT)


def test_max_error_d_clamps_the_measured_rate_on_both_sides() -> None:
    pid = make(d=1.0, max_error_d=2.0)
    pid.update(0.0, 0.01)  # feedback +0.01 in one cycle: error rate −10 rad/s
    assert pid.error_d == pytest.approx(-2.0)
    pid.update(0.0, -0.01)
    assert pid.error_d == pytest.approx(2.0)
    pid.update(0.0, -0.0105)  # −0.5 rad/s of feedback: +0.5 inside the bound
    assert pid.error_d == pytest.approx(0.5)
    pid.update(0.0, -0.01)
    assert pid.error_d == pytest.approx(-0.5)


def test_max_cmd_d_clamps_the_command_rate_on_both_sides() -> None:
    pid = make(ff1=1.0, max_cmd_d=3.0)
    pid.update(0.01, 0.0)
    assert pid.cmd_d == pytest.approx(3.0)
    pid.update(-0.01, 0.0)
    assert pid.cmd_d == pytest.approx(-3.0)
    pid.update(-0.0095, 0.0)
    assert pid.cmd_d == pytest.approx(0.5)
    pid.update(-0.01, 0.0)
    assert pid.cmd_d == pytest.approx(-0.5)


def test_max_i_clamps_the_integral_term_on_both_sides() -> None:
    pid = make(i=1000.0, max_i=0.2)
    for _ in range(10):
        pid.update(1.0, 0.0)  # error_i 0.01 → i term 10 V
    assert pid.output == pytest.approx(0.2)
    for _ in range(30):
        pid.update(-1.0, 0.0)
    assert pid.output == pytest.approx(-0.2)
    pid = make(i=1000.0, max_i=0.2)
    pid.update(0.1, 0.0)  # i term 0.1 V: inside
    assert pid.output == pytest.approx(0.1)


def test_saturation_starts_beyond_the_output_limit_not_at_it() -> None:
    pid = make(p=2.0, max_output=1.0)
    assert not pid.saturated and pid.saturated_count == 0
    assert pid.update(0.5, 0.0) == 1.0  # exactly at the limit: not clamped
    assert pid.limit_state == 0.0 and not pid.saturated
    assert pid.update(0.75, 0.0) == 1.0
    assert pid.limit_state == 1.0 and pid.saturated and pid.saturated_count == 1
    assert pid.update(-0.75, 0.0) == -1.0
    assert pid.limit_state == -1.0 and pid.saturated_count == 2
    assert pid.update(-0.5, 0.0) == -1.0  # exactly at the negative limit: not clamped
    assert pid.limit_state == 0.0 and pid.saturated_count == 0
    pid.update(-0.75, 0.0)
    pid.saturated_count = 2_147_483_647  # the counter stops at int32's maximum
    pid.update(-0.75, 0.0)
    assert pid.saturated_count == 2_147_483_647


def test_parameters_are_immutable() -> None:
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        PidParams().p = 1.0  # type: ignore[misc]
    from controller.pid import GainRange

    with pytest.raises(dataclasses.FrozenInstanceError):  # the documented ranges are shared
        GainRange(0.0, 1.0, "V", "x").hi = 2.0  # type: ignore[misc]


def test_gain_ranges_are_the_documented_bounds() -> None:
    from controller.limits import JointLimits
    from controller.pid import FULL_SCALE_MULTIPLE, gain_problems, gain_ranges

    lim = JointLimits(
        position_min=-0.2, position_max=0.6, max_velocity=0.5, max_acceleration=4.0,
        valve_max_v=8.0,
    )  # fmt: skip
    r = gain_ranges(lim, DT)
    top = FULL_SCALE_MULTIPLE * 8.0
    assert (r["p"].lo, r["p"].hi) == (0.0, pytest.approx(top / 0.8))
    assert (r["d"].lo, r["d"].hi) == (0.0, pytest.approx(top / 0.5))
    assert (r["ff0"].lo, r["ff0"].hi) == (pytest.approx(-top / 0.6), pytest.approx(top / 0.6))
    assert (r["ff1"].lo, r["ff1"].hi) == (pytest.approx(-top / 0.5), pytest.approx(top / 0.5))
    assert (r["ff2"].lo, r["ff2"].hi) == (pytest.approx(-top / 4.0), pytest.approx(top / 4.0))
    assert (r["bias"].lo, r["bias"].hi) == (-8.0, 8.0)
    assert r["d_filter_hz"].hi == pytest.approx(500.0)
    assert r["p"].problem("p", r["p"].hi) is None  # closed interval: the bound itself is in
    assert r["bias"].problem("bias", -8.0) is None
    assert r["p"].problem("p", 0.0) is None and r["p"].problem("p", -1e-12) is not None
    for bad in (math.nan, math.inf, r["p"].hi * 1.0001, -1.0, True, "1"):
        assert r["p"].problem("p", bad) is not None, bad
    assert r["max_output"].problem("max_output", 1e300) is None
    assert r["max_output"].problem("max_output", math.inf) is not None  # finite only
    assert gain_problems({"p": 1.0, "bias": 9.0}, r) == [r["bias"].problem("bias", 9.0)]


def test_a_new_pid_is_disabled_and_unsaturated_and_disable_clears_saturation() -> None:
    pid = Pid(PidParams(p=2.0, max_output=1.0), DT)
    assert not pid.enabled and not pid.saturated
    assert pid.update(1.0, 0.0) == 0.0  # not enabled: no output
    pid.enable(0.0, 0.0)
    pid.update(1.0, 0.0)
    assert pid.saturated
    pid.disable()
    assert not pid.saturated and pid.saturated_s == 0.0


@pytest.mark.parametrize("bad", [True, math.nan, math.inf, "1", None])
def test_parameters_must_be_finite_numbers(bad: object) -> None:
    with pytest.raises(ValueError, match=r"PidParams\.p must be a finite number"):
        PidParams(p=bad)  # type: ignore[arg-type]
