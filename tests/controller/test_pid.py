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
