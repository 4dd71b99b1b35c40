"""Amplitude–phase compensation (controller.amplitude_phase): the measured motion converges to
the desired sine's amplitude, phase and mean on plants that scale, delay, offset and distort
it; the command stays inside its bounds; bad tables are refused naming the key and range."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest

from controller.amplitude_phase import AmplitudePhase, CompensationError, common_period
from controller.experiment import Experiment, ExperimentError
from controller.limits import JointLimits
from controller.trajectories import multisine, sine

PERIOD = 1e-3
WIDE = JointLimits(-3.0, 3.0, 50.0, 5000.0, 10.0)


class LagPlant:
    """A servo loop's response to its reference: gain `k`, first-order lag `tau`, a pure delay
    of `delay` samples, a constant offset, and a cubic distortion about the centre."""

    def __init__(
        self,
        n: int,
        k: float = 0.7,
        tau: float = 0.05,
        delay: int = 20,
        offset: float = 0.0,
        cubic: float = 0.0,
        center: float = 0.0,
    ) -> None:
        self.k, self.a = k, math.exp(-PERIOD / tau)
        self.buf = [np.full(n, center) for _ in range(delay + 1)]
        self.x = np.full(n, center)
        self.offset, self.cubic, self.center = offset, cubic, center

    def step(self, ref: np.ndarray) -> np.ndarray:
        self.buf.append(ref.copy())
        r = self.buf.pop(0)
        target = self.center + self.k * (r - self.center)
        self.x = self.a * self.x + (1 - self.a) * target
        dev = self.x - self.center
        return self.x + self.offset + self.cubic * dev**3


def run(
    apc: Any, plant: LagPlant, seconds: float, n: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Drive `apc` (or any trajectory) through `plant`; (t, command, measured) histories."""
    q, qd, qdd = np.zeros(n), np.zeros(n), np.zeros(n)
    steps = round(seconds / PERIOD)
    ts, cmd, meas = np.zeros(steps), np.zeros((steps, n)), np.zeros((steps, n))
    y = plant.x.copy()
    for i in range(steps):
        t = i * PERIOD
        apc.eval(t, q, qd, qdd)
        if hasattr(apc, "observe"):
            apc.observe(t, y)  # measured at the instant the command is evaluated
        ts[i], cmd[i], meas[i] = t, q, y
        y = plant.step(q)
    return ts, cmd, meas


def tail_error(desired: Any, ts: np.ndarray, meas: np.ndarray, seconds: float = 2.0) -> float:
    k = round(seconds / PERIOD)
    want, _, _ = desired.sample(ts[-k:])
    return float(np.sqrt(np.mean((meas[-k:] - want) ** 2)) / np.sqrt(np.mean(
        (want - want.mean(axis=0)) ** 2
    )))  # fmt: skip


def test_a_scaled_and_delayed_sine_converges_to_the_desired_one() -> None:
    want = sine([0.2], [0.1], [1.0])
    ts, _, raw = run(want, LagPlant(1, center=0.2), 12.0)
    uncompensated = tail_error(want, ts, raw)
    assert uncompensated > 0.3  # gain 0.7 with ~70 ms of lag and delay at 1 Hz
    apc = AmplitudePhase(want, [WIDE], PERIOD, gain=0.5)
    ts, cmd, meas = run(apc, LagPlant(1, center=0.2), 12.0)
    assert tail_error(want, ts, meas) < 2e-3
    assert apc.updates >= 9 and apc.error[0] < 2e-3
    assert apc.limited == [0] and apc.backed_off == [0]  # nothing near a bound
    # The command is what converged: larger than the desired by about 1/|H| (1/0.7 × lag).
    assert 1.4 < apc.amplitude_ratio()[0] < 1.7
    assert np.abs(cmd[-1000:]).max() > 0.2 + 0.1 * 1.4


def test_the_mean_level_follows_a_constant_offset() -> None:
    want = sine([0.2], [0.1], [1.0])
    apc = AmplitudePhase(want, [WIDE], PERIOD, gain=0.8)  # the mean shrinks 1 − 0.8·0.7 a window
    # The plant's gain of 0.7 about 0 also shifts the mean: 0.14 + offset for a centre of 0.2.
    ts, cmd, meas = run(apc, LagPlant(1, offset=-0.03), 16.0)
    # Each new command is blended in, never stepped (a step in the reference is a spike in a
    # velocity feed-forward): the first update alone moves the centre by ~0.07 rad.
    assert apc.updates >= 10
    assert np.abs(np.diff(cmd[:, 0])).max() < 0.02  # blended over 20 ms: ~0.01 a cycle
    assert abs(apc.offset[0]) < 1e-4
    assert abs(meas[-2000:, 0].mean() - 0.2) < 1e-4
    assert tail_error(want, ts, meas) < 5e-3


def test_harmonics_cancel_the_distortion_the_fundamental_cannot() -> None:
    want = sine([0.0], [0.2], [1.0])
    errs = {}
    for h in (0, 3):
        apc = AmplitudePhase(want, [WIDE], PERIOD, gain=0.5, harmonics=h)
        ts, _, meas = run(apc, LagPlant(1, cubic=2.0), 16.0)
        errs[h] = tail_error(want, ts, meas)
    assert errs[0] > 0.01  # the cubic's third harmonic stays
    assert errs[3] < errs[0] / 3  # measured 4.3× (1.7 % → 0.40 %; 9× before the 20-ms blend)


class ResonantPlant(LagPlant):
    """A lightly damped second-order loop (1.5 Hz, ζ 0.1) with a cubic distortion: between f
    and 2f its phase swings by ~150°, so the delay model of H(kf) is over 90° wrong at 2f and
    3f and only the secant's measurement of H there makes the harmonic rows converge."""

    def __init__(self) -> None:
        super().__init__(1, cubic=2.0)
        self.wn, self.zeta = 2 * math.pi * 1.5, 0.1
        self.v = np.zeros(1)

    def step(self, ref: np.ndarray) -> np.ndarray:
        acc = self.wn**2 * (ref - self.x) - 2 * self.zeta * self.wn * self.v
        self.v = self.v + PERIOD * acc
        self.x = self.x + PERIOD * self.v
        return self.x + self.cubic * self.x**3


def test_the_secant_finds_the_response_the_delay_model_gets_wrong() -> None:
    want = sine([0.0], [0.2], [1.0])
    errs = {}
    for h in (0, 3):
        apc = AmplitudePhase(want, [WIDE], PERIOD, gain=0.5, harmonics=h)
        ts, _, meas = run(apc, ResonantPlant(), 30.0)
        errs[h] = tail_error(want, ts, meas)
    # Measured 1.7 % → 0.92 %; with the secant removed the rows diverge (136 %).
    assert errs[0] > 0.01
    assert errs[3] < errs[0] / 1.5


def test_two_joints_and_a_multisine_converge_independently() -> None:
    want = multisine([0.1, -0.1], [[0.5, 1.5], [1.0, 2.0]], [[0.05, 0.02], [0.04, 0.02]])
    apc = AmplitudePhase(want, [WIDE, WIDE], PERIOD, gain=0.6)
    assert apc.window_s == pytest.approx(2.0)
    ts, _, meas = run(apc, LagPlant(2, k=0.8, delay=10), 30.0, n=2)
    assert tail_error(want, ts, meas, 4.0) < 5e-3


def test_a_command_is_capped_at_max_ratio_and_inside_the_velocity_limit() -> None:
    want = sine([0.0], [0.1], [1.0])
    weak = LagPlant(1, k=0.2, delay=0)  # would need 5× the command
    apc = AmplitudePhase(want, [WIDE], PERIOD, gain=1.0, max_ratio=3.0)
    run(apc, weak, 10.0)
    assert apc.amplitude_ratio()[0] == pytest.approx(3.0, rel=1e-9)
    # A velocity limit of 1.5× the desired's peak speed: the command stops there.
    peak = 2 * math.pi * 0.1
    slow = JointLimits(-3.0, 3.0, 1.5 * peak, 5000.0, 10.0)
    apc = AmplitudePhase(want, [slow], PERIOD, gain=1.0, max_ratio=3.0)
    run(apc, LagPlant(1, k=0.2, delay=0), 10.0)
    assert apc.limited[0] > 0
    assert apc.amplitude_ratio()[0] == pytest.approx(1.5, rel=1e-9)


def test_a_stuck_joint_leaves_the_command_alone() -> None:
    want = sine([0.0], [0.1], [1.0])
    apc = AmplitudePhase(want, [WIDE], PERIOD, gain=0.5)
    run(apc, LagPlant(1, k=0.01, delay=0), 6.0)  # 1 % of the motion: friction holds it
    assert apc.amplitude_ratio()[0] == 1.0 and apc.updates <= 1  # the mean may move once


def test_the_window_is_the_common_period_of_whole_loop_cycles() -> None:
    assert common_period(np.array([2 * math.pi]), 1e-3) == pytest.approx(1.0)
    f = np.array([0.15, 0.45, 0.8, 1.4, 2.1]) * 2 * math.pi
    assert common_period(f, 1e-3) == pytest.approx(20.0)
    with pytest.raises(CompensationError, match="no common period"):
        common_period(np.array([1.0, math.sqrt(2)]) * 2 * math.pi, 1e-3)


def sine_file(**comp: Any) -> dict[str, Any]:
    return {
        "name": "apc",
        "home_deg": [40.0, 30.0],
        "segments": [
            {
                "name": "sine",
                "duration_s": 10.0,
                "controller": {"kind": "pid"},
                "trajectory": {"kind": "sine", "amplitude_deg": [5, 5], "frequency_hz": [1, 1]},
                "compensation": {"kind": "amplitude_phase", **comp},
            }
        ],
    }


def test_an_experiment_file_takes_a_compensation_table() -> None:
    seg = Experiment.from_dict(sine_file(gain=0.7, harmonics=3)).segments[0]
    assert seg.compensation == {
        "gain": 0.7,
        "max_ratio": 3.0,
        "settle_windows": 1.0,
        "harmonics": 3.0,
    }


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (
            lambda d: d["segments"][0]["compensation"].update(kind="peak_valley"),
            "'amplitude_phase'",
        ),
        (lambda d: d["segments"][0]["compensation"].update(gain=1.5), "gain = 1.5 outside"),
        (lambda d: d["segments"][0]["compensation"].update(gain=True), "gain = True outside"),
        (lambda d: d["segments"][0]["compensation"].update(max_ratio=0.5), "[1.0, 10.0]"),
        (lambda d: d["segments"][0]["compensation"].update(harmonics=2.5), "whole number"),
        (lambda d: d["segments"][0]["compensation"].update(speed=1), "unknown compensation key"),
        (
            lambda d: d["segments"][0].update(
                trajectory={"kind": "chirp", "amplitude_deg": [1, 1], "f0_hz": 0.1, "f1_hz": 2}
            ),
            "needs a periodic trajectory",
        ),
        (
            lambda d: d["segments"][0].update(
                controller={
                    "kind": "valve_sine",
                    "amplitude_v": [0.1, 0.1],
                    "frequency_hz": [1, 1],
                    "centering_v_per_rad": [1, 1],
                }
            ),
            "controller 'valve_sine' is not one of",
        ),
    ],
)
def test_a_bad_compensation_table_is_refused_naming_it(edit: Any, words: str) -> None:
    d = copy.deepcopy(sine_file())
    edit(d)
    with pytest.raises(ExperimentError, match=r"segment 0 \('sine'\)") as err:
        Experiment.from_dict(d)
    assert words in str(err.value)


def test_harmonics_on_a_multisine_or_above_a_quarter_of_the_rate_are_refused() -> None:
    ms = multisine([0.0], [[0.5, 1.0]], [[0.05, 0.02]])
    with pytest.raises(CompensationError, match="one frequency per joint"):
        AmplitudePhase(ms, [WIDE], PERIOD, harmonics=2)
    with pytest.raises(CompensationError, match="quarter of the loop rate"):
        AmplitudePhase(sine([0.0], [0.1], [100.0]), [WIDE], PERIOD, harmonics=3)


def test_the_distortion_rows_give_way_first_at_the_acceleration_limit() -> None:
    """Cancelling a strong cubic's harmonics takes the command's acceleration bound (Σ ω²|U|)
    past a 4.5 rad/s² limit that the fundamental alone fits: the harmonic rows are cut back,
    the fundamental is what it is without the limit, and the bound holds."""
    want = sine([0.0], [0.1], [1.0])

    def final(limits: JointLimits) -> tuple[np.ndarray, np.ndarray, AmplitudePhase]:
        apc = AmplitudePhase(want, [limits], PERIOD, gain=0.5, harmonics=3)
        run(apc, LagPlant(1, k=1.0, delay=0, cubic=20.0), 12.0)
        cmd = apc.command()
        return cmd.omega[0], np.hypot(cmd.sin_coef[0], cmd.cos_coef[0]), apc

    w, free, _ = final(WIDE)
    assert float(np.sum(w**2 * free)) > 4.6  # unbounded, the harmonics need more
    w, mag, apc = final(JointLimits(-3.0, 3.0, 50.0, 4.5, 10.0))
    assert apc.limited[0] > 0
    assert float(np.sum(w**2 * mag)) <= 4.5 * (1 + 1e-9)
    assert mag[0] == pytest.approx(free[0], rel=0.02)  # the fundamental kept
    assert 0.0 < mag[1:].sum() < free[1:].sum()  # the harmonics got what was left


def test_harmonics_up_to_a_quarter_of_the_loop_rate_are_taken() -> None:
    apc = AmplitudePhase(sine([0.0], [0.01], [40.0]), [WIDE], PERIOD, harmonics=5)  # 240 Hz
    assert apc.window_s == pytest.approx(0.025) and len(apc.command().omega[0]) == 6


def test_the_reported_error_is_the_windows_rms_error_over_the_rms_desired_motion() -> None:
    want = sine([0.2], [0.1], [1.0])
    apc = AmplitudePhase(want, [WIDE], PERIOD, gain=0.5, settle_windows=5)
    ts, _, meas = run(apc, LagPlant(1, offset=0.01, center=0.2), 3.0)
    last = slice(2000, 3000)  # the third window: measured only (settling), the command desired
    wq, _, _ = want.sample(ts[last])
    expected = np.sqrt(np.mean((meas[last] - wq) ** 2) / np.mean((wq - 0.2) ** 2))
    assert apc.error[0] == pytest.approx(expected, rel=1e-3)
    assert apc.offset[0] == pytest.approx(float(np.mean(meas[last] - 0.2)), rel=1e-6)


def test_a_new_command_is_blended_in_within_the_joints_limits() -> None:
    """Position and velocity stay continuous across a window's end (a step would be a spike in
    a velocity feed-forward), and the blend's added acceleration stays within a quarter of the
    joint's limit: a large change is blended in over longer."""
    want = sine([0.0], [0.1], [1.0])
    a_max = 20.0  # rad/s²; the desired sine's own peak is 3.9
    lim = JointLimits(-3.0, 3.0, 50.0, a_max, 10.0)
    apc = AmplitudePhase(want, [lim], PERIOD, gain=0.8)
    q, qd, qdd = np.zeros(1), np.zeros(1), np.zeros(1)
    plant = LagPlant(1, offset=0.05)
    y = plant.x.copy()
    hist = []
    for i in range(2600):  # two windows: the second's end starts a blend
        t = i * PERIOD
        apc.eval(t, q, qd, qdd)
        apc.observe(t, y)
        hist.append((q[0], qd[0], qdd[0]))
        y = plant.step(q)
    assert apc.blend_n > 50  # the centre's move (~0.06 rad) needs ~0.14 s at 5 rad/s²
    h = np.array(hist)[1990 : 2010 + apc.blend_n]
    fd_v = np.gradient(h[:, 0], PERIOD)
    assert np.abs(fd_v[1:-1] - h[1:-1, 1]).max() < 0.01 * np.abs(h[:, 1]).max()
    assert np.abs(h[:, 2]).max() < 0.25 * a_max + 1.1 * 0.1 * (2 * math.pi) ** 2 * 1.5
    # Inside the blend (a smoothstep's acceleration jumps at its two ends) the acceleration is
    # the velocity's derivative: the model feed-forward gets the reference's true q̈.
    inner = np.array(hist)[2000 + 3 : 2000 + apc.blend_n - 3]
    fd_a = np.gradient(inner[:, 1], PERIOD)
    assert np.abs(fd_a[1:-1] - inner[1:-1, 2]).max() < 0.01 * np.abs(inner[:, 2]).max()


def test_the_following_error_bound_is_met_and_tight() -> None:
    """A loop that would need a compensation of ~0.6 rad at 1 Hz against a following-error
    limit of 0.02 rad + 0.05 s × speed: the adapted command's distance from the desired,
    sampled over a period, reaches 80 % of the limit at its speed and no more."""
    want = sine([0.0], [0.2], [1.0])
    lim = JointLimits(-3.0, 3.0, 50.0, 5000.0, 10.0, following_error=0.02,
                      following_error_per_velocity=0.05)  # fmt: skip
    apc = AmplitudePhase(want, [lim], PERIOD, gain=0.5)
    run(apc, LagPlant(1, k=0.4, delay=30), 8.0)
    assert apc.following_limited[0] > 0
    t = np.arange(0.0, 1.0, 1e-4)
    cq, cv, _ = apc.command().sample(t)
    dq, _, _ = want.sample(t)
    excess = np.abs(cq - dq)[:, 0] - 0.8 * (0.02 + 0.05 * np.abs(cv[:, 0]))
    assert -0.02 * 0.02 < excess.max() <= 0.01 * 0.02  # the grid's resolution: 256 a period


def test_each_compensation_setting_takes_the_ends_of_its_range() -> None:
    """The documented ranges are closed: their ends are accepted."""
    seg = Experiment.from_dict(
        sine_file(gain=1.0, max_ratio=10.0, settle_windows=100, harmonics=10)
    ).segments[0]
    assert seg.compensation == {
        "gain": 1.0, "max_ratio": 10.0, "settle_windows": 100.0, "harmonics": 10.0,
    }  # fmt: skip
    seg = Experiment.from_dict(
        sine_file(gain=0.05, max_ratio=1.0, settle_windows=0, harmonics=0)
    ).segments[0]
    assert seg.compensation is not None and seg.compensation["gain"] == 0.05


def test_the_harmonics_refusals_name_the_joint_and_the_loop_rate() -> None:
    two = multisine([0.0, 0.0], [[0.5, 1.0], [0.5, 1.5]], [[0.05, 0.02], [0.05, 0.02]])
    with pytest.raises(CompensationError, match=r"joint\(s\) \[1, 2\] have several"):
        AmplitudePhase(two, [WIDE, WIDE], PERIOD, harmonics=2)
    with pytest.raises(CompensationError, match=r"400 Hz, is above .* rate \(1000 Hz\)"):
        AmplitudePhase(sine([0.0], [0.1], [100.0]), [WIDE], PERIOD, harmonics=3)


def test_the_centre_moves_at_most_max_ratio_amplitudes_from_the_desired_one() -> None:
    """A plant offset ten times the sine's amplitude: the command's centre goes against it,
    but no further than `max_ratio` × the amplitude from the desired centre."""
    want = sine([0.2], [0.01], [1.0])
    apc = AmplitudePhase(want, [WIDE], PERIOD, gain=1.0, max_ratio=3.0)
    run(apc, LagPlant(1, k=1.0, delay=0, offset=0.1, center=0.2), 6.0)
    assert apc._center[0] == pytest.approx(0.2 - 3.0 * 0.01, abs=1e-12)


def test_the_command_stays_inside_the_soft_limit_nearer_its_centre() -> None:
    """Centre 0.5 in a 0.0 … 0.6 window: the room is 0.1 on the upper side. A half-gain plant
    would need a 0.16 command for a 0.08 sine; it gets the room, 0.1."""
    want = sine([0.5], [0.08], [1.0])
    lim = JointLimits(0.0, 0.6, 50.0, 5000.0, 10.0)
    apc = AmplitudePhase(want, [lim], PERIOD, gain=1.0, max_ratio=3.0)
    run(apc, LagPlant(1, k=0.5, delay=0, center=0.5), 10.0)
    assert apc.limited[0] > 0
    assert apc.amplitude_ratio()[0] == pytest.approx(0.1 / 0.08, rel=1e-3)


def test_the_following_error_cut_moves_from_the_desired_toward_the_compensation() -> None:
    """Cut back at the following-error bound, the command keeps the compensation's direction:
    larger than the desired sine for a plant that lags and loses gain, its centre against the
    plant's offset (below the desired centre for an offset upward)."""
    want = sine([0.3], [0.2], [1.0])
    lim = JointLimits(-3.0, 3.0, 50.0, 5000.0, 10.0, following_error=0.02,
                      following_error_per_velocity=0.05)  # fmt: skip
    apc = AmplitudePhase(want, [lim], PERIOD, gain=0.5)
    run(apc, LagPlant(1, k=0.4, delay=30, offset=0.01, center=0.3), 8.0)
    assert apc.following_limited[0] > 0
    assert apc.amplitude_ratio()[0] > 1.05
    assert 0.3 - 0.01 < apc._center[0] < 0.3 - 1e-4


def test_the_blend_lasts_blend_n_cycles_then_the_reference_is_the_new_command() -> None:
    """A blend started at a window's end covers cycles 0 … blend_n − 1 after it; from cycle
    blend_n on the reference is the new command alone, its acceleration included (the
    smoothstep's own at its end, −6·Δq/T², is not the new command's)."""
    want = sine([0.0], [0.1], [1.0])
    lim = JointLimits(-3.0, 3.0, 50.0, 20.0, 10.0)
    apc = AmplitudePhase(want, [lim], PERIOD, gain=0.8)
    q, qd, qdd = np.zeros(1), np.zeros(1), np.zeros(1)
    plant = LagPlant(1, offset=0.05)
    y = plant.x.copy()
    start = None
    for i in range(4000):
        t = i * PERIOD
        apc.eval(t, q, qd, qdd)
        if start is not None and i >= start + apc.blend_n - 1:
            alone = [np.zeros(1) for _ in range(3)]
            apc.command().eval(t, *alone)
            got, new = np.r_[q, qd, qdd], np.concatenate(alone)
            if i == start + apc.blend_n - 1:  # the blend's last cycle: not yet the new command
                assert abs(got[0] - new[0]) > 0.0
            else:
                np.testing.assert_allclose(got, new, rtol=0, atol=1e-12)
                if i == start + apc.blend_n + 3:
                    break
        apc.observe(t, y)
        if start is None and apc.windows == 2:  # the second window's end starts a blend
            start = i + 1
            assert apc.blend_n > 50
        y = plant.step(q)
    else:
        raise AssertionError("no blend seen")


def test_a_joint_the_sine_holds_has_no_relative_error_and_does_not_stop_the_others() -> None:
    """j2 is held (amplitude 0): its relative error has no denominator and is NaN, not a
    division by zero in the middle of a run; its offset is still measured and j1 is
    compensated as alone."""
    want = sine([0.0, 0.3], [0.1, 0.0], [1.0, 1.0])
    lim = JointLimits(-3.0, 3.0, 50.0, 20.0, 10.0)
    apc = AmplitudePhase(want, [lim, lim], PERIOD, gain=0.8)
    run(apc, LagPlant(2, offset=0.01), 3.0, n=2)
    assert apc.windows == 3
    assert math.isnan(apc.error[1]) and math.isfinite(apc.error[0])
    assert math.isfinite(apc.offset[1])


def test_a_restart_starts_the_windows_over_and_keeps_the_learnt_command() -> None:
    """A phase entered again (`restart`, from the runner's `_enter`) half-way through a window:
    the half window's sums are dropped and no blend is under way — from then on it behaves
    exactly as the same compensator restarted at a window's end (same commands, same measured
    error and offset), and its first reference is the learnt command itself."""
    want = sine([0.0], [0.1], [1.0])
    lim = JointLimits(-3.0, 3.0, 50.0, 20.0, 10.0)
    apc = AmplitudePhase(want, [lim], PERIOD, gain=0.8)
    plant = LagPlant(1, offset=0.05)
    q, qd, qdd = np.zeros(1), np.zeros(1), np.zeros(1)
    y = plant.x.copy()
    at_end = None
    for i in range(2500):  # a settle window, an update (its blend), half a window
        apc.eval(i * PERIOD, q, qd, qdd)
        apc.observe(i * PERIOD, y)
        y = plant.step(q)
        if apc.windows == 2 and at_end is None:
            at_end = copy.deepcopy(apc)  # a window's end: no sums held
    assert at_end is not None and apc.updates >= 1
    apc.restart()
    at_end.restart()
    learnt = [np.zeros(1) for _ in range(3)]
    apc.command().eval(0.0, *learnt)
    ys = 0.1 * np.sin(2 * np.pi * np.arange(1000) * PERIOD + 0.3) + 0.04
    cmds: list[list[float]] = []
    for twin in (apc, at_end):
        cmds.append([])
        for i in range(1000):  # one window from the phase's start
            twin.eval(i * PERIOD, q, qd, qdd)
            cmds[-1].append(float(q[0]))
            if i == 0:
                np.testing.assert_allclose(np.r_[q, qd, qdd], np.concatenate(learnt), atol=1e-12)
            twin.observe(i * PERIOD, ys[i : i + 1])
    assert apc.windows == at_end.windows == 1
    assert cmds[0] == cmds[1]
    assert apc.error[0] == at_end.error[0] and apc.offset[0] == at_end.offset[0]
    assert apc.offset[0] == pytest.approx(float(np.mean(ys)), abs=1e-9)


def _harmonic_row(gain: float) -> AmplitudePhase:
    """A 1 Hz sine of 0.1 rad with its 2nd harmonic adapted (row 1): cap 0.1, floor 0.0005."""
    return AmplitudePhase(sine([0.0], [0.1], [1.0]), [WIDE], PERIOD, harmonics=2, gain=gain)


def test_a_harmonic_whose_error_grows_after_a_step_backs_off_then_switches_off() -> None:
    """`_harmonic`'s back-off, as its docstring states: a row whose measured phasor grows by
    half after a step takes half the step back and halves its own gain, each time; once its
    gain is below 1 % of the set gain its command is 0 (switched off)."""
    apc = _harmonic_row(gain=0.5)
    apc._h[0][1] = 0.5 + 0j  # the loop's response at 2f, as measured
    apc._prev_u[0][1], apc._prev_y[0][1] = 0.02 + 0j, 0.001 + 0j
    got = []
    for k in range(7):
        u = complex(0.02 + 0.001 * (k + 1))
        du = u - apc._prev_u[0][1]
        out = apc._harmonic(0, 1, complex(0.002 * 2**k), u, None, True)
        got.append(out)
        if k < 6:  # gain 0.25, 0.125, … 0.0078: still above 1 % of 0.5
            assert out == pytest.approx(u - 0.5 * du, abs=1e-15), k
    assert apc._g[0][1] == pytest.approx(0.5 * 2.0**-7) and apc.backed_off[0] == 7
    assert got[-1] == 0j


def test_a_harmonic_is_left_alone_outside_an_update_or_without_a_response_model() -> None:
    """A settling window (`update` false) measures but never changes a row's command, grown or
    not; nor does an update without a model of the loop's response there (the fundamental too
    small to measure): the command stays as it is."""
    apc = _harmonic_row(gain=0.8)
    apc._h[0][1] = 0.5 + 0j
    apc._prev_u[0][1], apc._prev_y[0][1] = 0.02 + 0j, 0.001 + 0j
    assert apc._harmonic(0, 1, 0.01 + 0j, 0.03 + 0j, None, False) == 0.03 + 0j
    assert apc.backed_off[0] == 0 and apc._g[0][1] == 0.8
    blind = _harmonic_row(gain=0.8)  # no model at 2f, none from the fundamental (h1 None)
    assert blind._harmonic(0, 1, 0.01 + 0j, 0.03 + 0j, None, True) == 0.03 + 0j


def test_a_harmonics_command_is_capped_at_the_fundamentals_desired_amplitude() -> None:
    """The step −g·y/H would ask 1.6 rad at 2f of a 0.1 rad sine: the command keeps its
    direction and is cut to 0.1 rad, the fundamental's desired amplitude."""
    apc = _harmonic_row(gain=0.8)
    apc._h[0][1] = 0.5 + 0j
    out = apc._harmonic(0, 1, 1.0 + 0j, 0j, None, True)  # no previous command: no back-off
    assert abs(out) == pytest.approx(0.1, rel=1e-12) and out.real < 0.0
