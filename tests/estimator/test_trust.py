"""Identification you can trust (issue 13; issue 19 item 4), on small synthetic and simulated
data: rank deficiency never crashes, identifiability is judged against the noise, faulted and
non-RUNNING rows are left out, a corrupted channel widens σ or is flagged, a still joint's
parameters are not printed as measured, a run without motion is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daq.profile.plant import plant_params
from estimator.batch import identify_run
from estimator.models import LinearModel
from estimator.online import OnlineIdentifier
from estimator.simdata import excite
from estimator.wls import fit_model

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("a", "b", "c")
TRUE = np.array([2.0, -1.0, 0.5])


def _model(prior: np.ndarray | None = TRUE) -> LinearModel:
    def regressor(x):  # pragma: no cover - fit_model takes Φ, y directly
        raise AssertionError

    return LinearModel(
        name="toy",
        names=NAMES,
        n_outputs=1,
        regressor=regressor,
        param_scale=np.ones(3),
        output_scale=np.ones(1),
        prior=prior,  # the rig engineer's values (here the true ones)
    )


def _data(col_c: float, noise: float, r: int = 4000, seed: int = 0):
    rng = np.random.default_rng(seed)
    Phi = rng.standard_normal((r, 1, 3))
    Phi[:, 0, 2] *= col_c
    y = Phi[:, 0, :] @ TRUE + noise * rng.standard_normal(r)
    return Phi, y[:, None]


def test_exact_zero_column_is_flagged_not_a_crash() -> None:
    Phi, y = _data(col_c=0.0, noise=0.01)
    fit = fit_model(_model(), Phi, y)  # default block=0: no ZeroDivisionError either
    assert list(fit.identifiable) == [True, True, False]
    assert fit.theta[2] == pytest.approx(TRUE[2], rel=1e-12)  # the prior, not a fitted number
    assert np.isnan(fit.sigma_pct[2]) and np.all(np.isfinite(fit.sigma_pct[:2]))
    np.testing.assert_allclose(fit.theta[:2], TRUE[:2], rtol=1e-3)
    assert any("c" in w for w in fit.unidentifiable)


def test_zero_column_without_a_prior_is_still_flagged() -> None:
    Phi, y = _data(col_c=0.0, noise=0.01)
    fit = fit_model(_model(prior=None), Phi, y, block=50)
    assert list(fit.identifiable) == [True, True, False] and np.isnan(fit.sigma_pct[2])


def test_weak_column_is_judged_against_the_noise_not_a_ratio() -> None:
    """The same small column (1e-3 of the others): resolved when the noise is low, flagged
    when the noise hides it. A fixed singular-value ratio would say the same in both."""
    quiet = fit_model(_model(), *_data(col_c=1e-3, noise=1e-5))
    noisy = fit_model(_model(), *_data(col_c=1e-3, noise=1e-1))
    assert quiet.identifiable.all()
    assert abs(quiet.theta[2] - TRUE[2]) <= 3 * quiet.sigma_pct[2] / 100 * abs(quiet.theta[2])
    assert list(noisy.identifiable) == [True, True, False]


def test_block_jackknife_widens_sigma_for_drifting_data() -> None:
    """A parameter that drifts along the run: the white-residual σ is far too small; the
    jackknife over contiguous stretches sees the scatter."""
    rng = np.random.default_rng(3)
    r = 8000
    Phi = rng.standard_normal((r, 1, 3))
    drift = TRUE[0] * (1 + 0.02 * np.sin(np.linspace(0, 6 * np.pi, r)))
    y = Phi[:, 0, 0] * drift + Phi[:, 0, 1:] @ TRUE[1:] + 1e-3 * rng.standard_normal(r)
    plain = fit_model(_model(), Phi, y[:, None])
    jack = fit_model(_model(), Phi, y[:, None], groups=(np.arange(r) * 16) // r)
    assert jack.sigma_pct[0] > 3 * plain.sigma_pct[0]


# ---------------------------------------------------------------- simulated, 1-DOF (20 s)


def _within_or_flagged(res, names_in_warnings: bool = True) -> list[str]:
    """Parameters neither within ±3σ of the truth nor flagged (should be none)."""
    text = " ".join(res.warnings)
    bad = []
    for i, nm in enumerate(res.names):
        if not res.identifiable[i] or (names_in_warnings and nm in text):
            continue
        sig = res.sigma_pct[i] / 100 * abs(res.theta[i])
        if abs(res.theta[i] - res.truth[i]) > 3 * sig:
            bad.append(nm)
    return bad


def _cols(layout, rows):
    return {n: rows[:, i] for i, n in enumerate(layout.names)}


def test_faulted_rows_are_left_out_online_and_batch(sim1dof_run) -> None:
    """1 s of broken wire on a pressure channel, with the fault the loop latches: rows left
    out, filters restarted, counted, and the estimates as good as on clean data."""
    profile, layout, clean = sim1dof_run
    rows = clean.copy()
    ch = layout.names.index("eng.p_cap_1")
    rows[8000:9000, ch] = 0.0
    rows[8000:9000, layout.names.index("fault")] = 1.0  # CHANNEL_RANGE
    res = identify_run(_cols(layout, rows), plant_params(profile), profile=profile)
    ref = identify_run(_cols(layout, clean), plant_params(profile), profile=profile)
    assert res.data.faulted == 1000 and any("1000 rows" in w for w in res.warnings)
    err = np.abs(res.theta - res.truth) / np.abs(res.truth)
    ref_err = np.abs(ref.theta - ref.truth) / np.abs(ref.truth)
    assert err.max() < ref_err.max() + 0.001, dict(zip(res.names, err, strict=True))
    ident = OnlineIdentifier(profile, layout.names)
    for k in range(0, len(rows), 20):
        ident.update_rows(rows[k : k + 20])
    est = ident.estimate()
    assert est.data.faulted == 1000
    on_err = np.abs(est.theta - est.truth) / np.abs(est.truth)
    assert on_err.max() < 0.005, dict(zip(est.names, on_err, strict=True))


def test_unflagged_broken_wire_widens_sigma_or_is_flagged(sim1dof_run) -> None:
    """The wire breaks without a fault flag (an interlock switched off): the corruption adds
    no parameter outside ±3σ that is not flagged. Compared with the clean run, whose 1/b
    carries the known ≈ −0.2 % bias of 1 kHz pressure derivatives (docs/estimator.md) that its
    σ does not cover — an open defect this test does not hide: it is listed in `clean_miss`."""
    profile, layout, clean = sim1dof_run
    rows = clean.copy()
    rows[8000:9000, layout.names.index("eng.p_cap_1")] = 0.0  # no fault flag: bad data only
    res = identify_run(_cols(layout, rows), plant_params(profile), profile=profile)
    ref = identify_run(_cols(layout, clean), plant_params(profile), profile=profile)
    clean_miss = set(_within_or_flagged(ref))
    assert clean_miss <= {"1/b"}
    assert set(_within_or_flagged(res)) <= clean_miss
    assert not res.identifiable.all()  # the torque columns cannot be trusted: flagged


def test_pressure_gain_error_widens_sigma_or_is_flagged(sim1dof_run) -> None:
    """+2 % gain on one pressure channel (issue 19: 9.6 % error at σ 0.2 %, 48σ, silently)."""
    profile, layout, clean = sim1dof_run
    rows = clean.copy()
    rows[:, layout.names.index("eng.p_cap_1")] *= 1.02
    res = identify_run(_cols(layout, rows), plant_params(profile), profile=profile)
    assert _within_or_flagged(res) == [], res.warnings
    assert any("does not explain the data" in w for w in res.warnings)
    assert any("disagree on 1/b" in w for w in res.warnings)


def test_time_gap_restarts_filters_online_and_batch(sim1dof_run) -> None:
    """Skipped cycles: `t` jumps 50 ms while `seq` stays consecutive."""
    profile, layout, clean = sim1dof_run
    rows = clean.copy()
    rows[10000:, layout.names.index("t")] += 0.05
    res = identify_run(_cols(layout, rows), plant_params(profile), profile=profile)
    assert res.data.gaps == 1 and abs(res.data.gap_s - 0.05) < 1e-9
    assert any("1 gap(s)" in w for w in res.warnings)
    err = np.abs(res.theta - res.truth) / np.abs(res.truth)
    assert err.max() < 0.005
    ident = OnlineIdentifier(profile, layout.names)
    for k in range(0, len(rows), 20):
        ident.update_rows(rows[k : k + 20])
    est = ident.estimate()
    assert est.gaps == 1 and est.data.gaps == 1
    # The filters restarted: a second FIR start-up (taps + 2 − 1 rows) gave no sample.
    assert est.models["mechanical"]["samples"] == len(rows) - 2 * (103 - 1)


def test_rows_outside_running_are_left_out_online(sim1dof_run) -> None:
    profile, layout, clean = sim1dof_run
    rows = clean.copy()
    rows[:3000, layout.names.index("state")] = 1.0  # ARMED before the experiment
    ident = OnlineIdentifier(profile, layout.names)
    for k in range(0, len(rows), 20):
        ident.update_rows(rows[k : k + 20])
    est = ident.estimate()
    assert est.data.not_running == 3000
    assert est.models["mechanical"]["samples"] <= len(rows) - 3000


def test_batch_uses_only_the_segments_it_is_told(sim1dof_run) -> None:
    profile, layout, clean = sim1dof_run
    segs = [slice(0, 9000), slice(11000, 20000)]
    res = identify_run(_cols(layout, clean), plant_params(profile), profile=profile, segments=segs)
    assert res.data.not_running == 2000 and res.data.used <= 18000
    err = np.abs(res.theta - res.truth) / np.abs(res.truth)
    assert err.max() < 0.005


def test_no_motion_is_refused_with_a_clear_message(sim1dof_run) -> None:
    profile, layout, clean = sim1dof_run
    cols = _cols(layout, clean.copy())
    for name in ("eng.q_1", "eng.piston_1"):
        cols[name] = np.full_like(cols[name], cols[name].mean())
    with pytest.raises(ValueError, match=r"no joint moved more than 1° .*joint 1 0\.00°"):
        identify_run(cols, plant_params(profile), profile=profile)


@pytest.fixture(scope="module")
def joint2_held():
    """20 s of the 2-DOF rig with joint 2's reference at home (it still moves ≈ 2° through the
    coupling, and is identifiable: see the first test below)."""
    profile, layout, rows, _ = excite(
        ROOT / "hw_profiles" / "sim-2dof.toml", 20.0, still=(1,), amp_deg=4.0, gain=4.0
    )
    return profile, layout, rows


def test_held_joint_that_moved_two_degrees_is_still_measured(joint2_held) -> None:
    profile, layout, rows = joint2_held
    res = identify_run(_cols(layout, rows), plant_params(profile), profile=profile)
    assert res.identifiable.all(), res.warnings
    err = np.abs(res.theta - res.truth) / np.abs(res.truth)
    assert err.max() < 0.006, dict(zip(res.names, err, strict=True))


def test_still_joint_parameters_are_flagged_not_measured(joint2_held) -> None:
    """Joint 2's sensors say it never moved: its inertial, friction, coupling and flow-gain
    parameters are flagged (no %σ), with the cause in words. The profile has no initial
    guesses, so nothing may pull them to the simulator's truth: at least one of them lands
    visibly away from it (the truth reaches only the comparison columns)."""
    profile, layout, rows = joint2_held
    cols = _cols(layout, rows.copy())
    for name in ("eng.q_2", "eng.piston_2", "eng.spool_2"):
        cols[name] = np.full_like(cols[name], cols[name].mean())
    res = identify_run(cols, plant_params(profile), profile=profile)
    flagged = {nm for nm, ok in zip(res.names, res.identifiable, strict=True) if not ok}
    assert {"M2", "Fv2", "R12", "Cf++2", "Cf+-2", "Cf-+2", "Cf--2"} <= flagged
    off_truth = 0
    for i, nm in enumerate(res.names):
        if nm in flagged:
            assert np.isnan(res.sigma_pct[i])
            off_truth += res.theta[i] != pytest.approx(res.truth[i], rel=1e-6)
    assert off_truth > 0, "flagged parameters sit exactly at the simulator's truth"
    text = " ".join(res.warnings)
    assert "joint 2 barely moved (0.00° peak to peak)" in text and "Cf+-2" in text


def test_sigma_carries_a_parameter_fixed_at_its_own_estimate() -> None:
    """An effect the data barely resolve (c, truth 0, its column mostly 0.2 a) is flagged and,
    without a prior, fixed at its own least-squares value: the σ printed for a must then be
    the marginal one (c unknown), whose z over 40 runs has RMS ≈ 1, not the one conditional
    on that arbitrary value. With a prior (a measurement) the conditional σ stays."""
    truth = np.array([2.0, -1.0, 0.0])
    z, z_cond = [], []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        Phi = rng.standard_normal((2000, 1, 3))
        Phi[:, 0, 2] = 0.2 * Phi[:, 0, 0] + 0.02 * Phi[:, 0, 2]
        y = (Phi[:, 0, :] @ truth + 0.1 * rng.standard_normal(2000))[:, None]
        fit = fit_model(_model(prior=None), Phi, y)
        assert list(fit.identifiable) == [True, True, False]
        z.append((fit.theta[0] - truth[0]) / (fit.sigma_pct[0] / 100 * abs(fit.theta[0])))
        known = fit_model(_model(prior=truth), Phi, y)
        z_cond.append(known.sigma_pct[0] / fit.sigma_pct[0])
    assert 0.5 < float(np.sqrt(np.mean(np.square(z)))) < 1.5
    assert max(z_cond) < 0.2  # the prior's conditional σ is far smaller
