"""The spool the fluid regressors use: the LVDT's below the crossover, the valve command's lag
above (estimator.spool), and what it buys the flow gains."""

from __future__ import annotations

import re

import numpy as np
import pytest

from daq.profile import load_profile
from daq.profile.plant import known_params, plant_params
from estimator.batch import identify_run
from estimator.online import OnlineIdentifier
from estimator.simdata import excite
from estimator.spool import U_SLOT, SpoolFusion, valve_commands, valve_converters
from tests.conftest import PROFILES

FS = 1000.0
NJ = 2


@pytest.fixture(scope="module")
def params():
    return plant_params(load_profile(PROFILES / "sim-2dof.toml"))


def spool_run(params, n: int = 20_000, noise: float = 1e-3, seed: int = 4):
    """Commands (n, 2), the spool they give through the declared lag, and its LVDT reading."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / FS
    cmd = np.stack([0.06 * np.sin(2 * np.pi * 3.7 * t), 0.04 * np.sin(2 * np.pi * 1.3 * t)], 1)
    cmd += 0.02 * rng.standard_normal(cmd.shape)
    a = np.exp(-1.0 / FS / params.valve_tau)
    spool = np.zeros_like(cmd)
    for k in range(n - 1):
        spool[k + 1] = a * spool[k] + (1 - a) * params.valve_gain * cmd[k]
    raw = np.zeros((n, 6 * NJ))
    raw[:, U_SLOT * NJ : (U_SLOT + 1) * NJ] = spool + rng.normal(0.0, noise, spool.shape)
    return cmd, spool, raw


def fused(params, raw, cmd, **kw):
    out = raw.copy()
    SpoolFusion(params, NJ, FS, **kw).apply(out, cmd)
    return out[:, U_SLOT * NJ : (U_SLOT + 1) * NJ]


def test_fused_spool_drops_the_lvdt_noise(params) -> None:
    cmd, _, raw = spool_run(params)
    _, _, clean = spool_run(params, noise=0.0)
    u = slice(U_SLOT * NJ, (U_SLOT + 1) * NJ)
    err_lvdt = np.std(raw[1000:, u] - clean[1000:, u], axis=0)
    err_fused = np.std(fused(params, raw, cmd)[1000:] - fused(params, clean, cmd)[1000:], axis=0)
    assert np.all(err_lvdt > 0.9e-3)
    # The LVDT's noise through a 2 Hz first-order low-pass: 1 mV × √(π·2/1000) ≈ 0.08 mV.
    assert np.all(err_fused < 0.15e-3), err_fused


def held_lag(params, cmd: np.ndarray, sub: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """The spool at the rows and ∫u dt at the rows, the lag integrated in `sub` exact steps per
    row with each row's command held (what the valve does between two samples)."""
    a = np.exp(-1.0 / FS / sub / params.valve_tau)
    u = np.zeros(NJ)
    area = np.zeros(NJ)
    at_rows, integral = np.zeros_like(cmd), np.zeros_like(cmd)
    for k in range(cmd.shape[0]):
        at_rows[k], integral[k] = u, area
        target = params.valve_gain * cmd[k]
        for _ in range(sub):  # exact mean of the exponential over the substep, then its end
            mean = target + (u - target) * (1 - a) / (1.0 / FS / sub / params.valve_tau)
            area = area + mean / FS / sub
            u = target + (u - target) * a
    return at_rows, integral


def test_fused_spool_is_what_a_sampled_flow_carries(params) -> None:
    """A chamber fed a flow g·u (g constant) sampled at the rows: the derivative of the sampled
    volume, conditioned as the fluid model's signals (40 Hz zero-phase low-pass, five-point
    derivative), is what the fused spool gives, not the spool at the rows (module doc: the
    sampled-data correction). Independent of the code: the lag integrated in substeps."""
    from scipy.signal import sosfiltfilt

    from estimator.observation import derivative, lowpass

    cmd, _, _ = spool_run(params, n=8000)
    at_rows, integral = held_lag(params, cmd)
    raw = np.zeros((cmd.shape[0], 6 * NJ))
    raw[:, U_SLOT * NJ : (U_SLOT + 1) * NJ] = at_rows
    sos = lowpass(40.0, FS)

    def band(x: np.ndarray) -> np.ndarray:
        return sosfiltfilt(sos, x, axis=0)[500:-500]

    seen = derivative(band(integral), 1.0 / FS)[5:-5]
    err_point = np.std(band(at_rows)[5:-5] - seen, axis=0) / np.std(seen, axis=0)
    err_fused = np.std(band(fused(params, raw, cmd))[5:-5] - seen, axis=0) / np.std(seen, axis=0)
    # Measured: the row's spool misses by 0.15–0.16 % of the motion, the fused one 0.006–0.009 %.
    assert np.all(err_point > 1e-3), err_point
    assert np.all(err_fused < 0.1 * err_point), (err_fused, err_point)


def test_commands_are_quantised_as_the_dac_writes_them(params) -> None:
    """With the valve's D/A declared, the model's spool follows the D/A's codes: on a spool
    driven by the quantised commands the fused spool (noise-free LVDT) matches what those codes
    give, and without the converters it does not."""
    profile = load_profile(PROFILES / "sim-2dof.toml")
    conv = valve_converters(profile)
    assert conv is not None and [c.bits for c in conv] == [12, 12]
    cmd, _, _ = spool_run(params, n=6000)
    q = (conv[0].max - conv[0].min) / 4096
    written = conv[0].min + np.floor((cmd - conv[0].min) / q + 0.5) * q
    at_rows, _ = held_lag(params, written)
    raw = np.zeros((cmd.shape[0], 6 * NJ))
    raw[:, U_SLOT * NJ : (U_SLOT + 1) * NJ] = at_rows
    exact = fused(params, raw, written)
    with_dac = fused(params, raw, cmd, converters=conv)
    without = fused(params, raw, cmd)
    np.testing.assert_allclose(with_dac, exact, rtol=0, atol=1e-12)
    assert np.max(np.abs(without - exact)) > 1e-4


def test_fusion_follows_the_lvdt_where_the_valve_differs_from_its_datasheet(params) -> None:
    """A null offset and a gain the datasheet does not know reach û at low frequency (the
    LVDT is the reference there), so û does not carry the declared model's error."""
    cmd, spool, raw = spool_run(params, noise=0.0)
    u = slice(U_SLOT * NJ, (U_SLOT + 1) * NJ)
    reference = fused(params, raw, cmd)  # the declared valve, exactly
    true = 1.03 * spool + 0.004  # the real spool: 3 % more gain, 4 mV null offset
    raw[:, u] = true
    out = fused(params, raw, cmd)
    expected = 1.03 * reference + 0.004
    settled = slice(5000, None)
    assert np.max(np.abs(np.mean(out[settled] - expected[settled], axis=0))) < 1e-4
    # What is left is the gain error above the crossover only, a fraction of the 3 %.
    assert np.std(out[settled] - expected[settled]) < 0.03 * np.std(spool[settled])


def test_chunks_give_what_the_whole_stretch_gives_and_reset_restarts(params) -> None:
    cmd, _, raw = spool_run(params, n=3000)
    whole = raw.copy()
    SpoolFusion(params, NJ, FS).apply(whole, cmd)
    chunked = raw.copy()
    fusion = SpoolFusion(params, NJ, FS)
    for k in range(0, 3000, 337):
        fusion.apply(chunked[k : k + 337], cmd[k : k + 337])
    np.testing.assert_allclose(chunked, whole, rtol=0, atol=1e-15)
    restarted = raw.copy()
    fusion.reset()
    fusion.apply(restarted[1500:], cmd[1500:])
    fresh = raw[1500:].copy()
    SpoolFusion(params, NJ, FS).apply(fresh, cmd[1500:])
    u = U_SLOT * NJ
    # A restart begins from the stretch's own first reading, not the earlier stretch's state.
    np.testing.assert_array_equal(restarted[1500:], fresh)
    assert restarted[1500, u] != whole[1500, u]


def test_a_non_finite_reading_stays_and_restarts_the_filters(params) -> None:
    cmd, _, raw = spool_run(params, n=2000)
    u = U_SLOT * NJ
    raw[700, u] = np.nan
    cmd[1200, 1] = np.inf
    out = raw.copy()
    SpoolFusion(params, NJ, FS).apply(out, cmd)
    assert np.isnan(out[700, u])
    after = raw[701:].copy()  # restarted from the LVDT: as a fusion begun at row 701
    SpoolFusion(params, NJ, FS).apply(after[:, :], cmd[701:])
    assert out[701, u] == after[0, u]
    assert np.isinf(cmd[1200, 1]) and np.isfinite(out[1201, u + 1])
    assert np.all(np.isfinite(np.delete(out[:, u], 700)))


def test_bad_arguments_are_named(params) -> None:
    with pytest.raises(ValueError, match="describe 2"):
        SpoolFusion(params, 1, FS)
    with pytest.raises(ValueError, match=r"crossover_hz must be in \(0, 500.0\), got 600.0"):
        SpoolFusion(params, NJ, FS, crossover_hz=600.0)


def test_valve_commands_are_the_profiles_valve_outputs() -> None:
    assert valve_commands(load_profile(PROFILES / "sim-2dof.toml")) == [
        "cmd.valve_1",
        "cmd.valve_2",
    ]


def test_fused_spool_takes_the_lvdt_noise_out_of_the_fluid_equations(sim2dof_noisy_lvdt) -> None:
    """With the LVDTs' noise ×5 it dominates the fluid equations' error (it multiplies g(p) in
    every flow column); the fused spool takes it out: smaller equation errors and error bars,
    batch and online alike, and no note (the commands were recorded)."""
    profile, layout, rows = sim2dof_noisy_lvdt
    columns = {n: rows[:, i] for i, n in enumerate(layout.names)}
    params = known_params(profile)
    eq_sigma, batch_sigma, online_sigma = {}, {}, {}
    for fuse in (False, True):
        res = identify_run(columns, params, profile=profile, fuse_spool=fuse, refine=False)
        assert not any("valve command" in n for n in res.notes)
        fit = next(f for f in res.fits if f.name == "fluid")
        eq_sigma[fuse] = fit.equation_sigma
        batch_sigma[fuse] = np.nanmedian(fit.sigma_pct)
        online = OnlineIdentifier(profile, layout.names, fuse_spool=fuse)
        online.update_rows(rows)
        online.flush()
        chain = next(c for c in online.chains if c.model.name == "fluid")
        online_sigma[fuse] = np.median(chain.sigma_pct())
    assert np.all(eq_sigma[True] < 0.5 * eq_sigma[False]), eq_sigma
    assert batch_sigma[True] < 0.7 * batch_sigma[False], batch_sigma
    # Online σ also carries its jackknife over 16 stretches: measured 0.29 → 0.23 %.
    assert online_sigma[True] < 0.9 * online_sigma[False], online_sigma


def test_batch_says_when_no_command_was_recorded(sim2dof_noisy_lvdt) -> None:
    profile, layout, rows = sim2dof_noisy_lvdt
    columns = {n: rows[:, i] for i, n in enumerate(layout.names) if not n.startswith("cmd.")}
    res = identify_run(columns, known_params(profile), profile=profile, refine=False)
    assert any("no valve command recorded" in n for n in res.notes), res.notes


@pytest.fixture(scope="module")
def sim2dof_noisy_lvdt(tmp_path_factory):
    """30 s of the 2-DOF rig (estimator.simdata.excite) with the LVDTs' noise ×5: (profile,
    layout, rows)."""
    text = (PROFILES / "sim-2dof.toml").read_text()
    lvdt = "valid_max = 2.0\nsim_noise = {}"
    noisy = text.replace(lvdt.format("1.0e-3"), lvdt.format("5.0e-3"))
    assert noisy.count("sim_noise = 5.0e-3") == 2
    path = tmp_path_factory.mktemp("lvdt") / "sim-2dof-noisy-lvdt.toml"
    path.write_text(noisy)
    profile, layout, rows, _ = excite(path, 30.0, seed=2)
    return profile, layout, rows


def test_fluid_equations_hold_on_noise_free_data(tmp_path) -> None:
    """With every sensor noise-free and 24-bit, the batch's fluid fit on the fused spool lands
    on the simulator's own 1/b and flow gains to 0.005 % (the sampled-data correction: with
    the row's spool instead, 1/b came out −0.13 % and the flow gains ±0.01 %)."""
    text = (PROFILES / "sim-2dof.toml").read_text()
    text = re.sub(r"^sim_noise = .*$", "sim_noise = 0.0", text, flags=re.M)
    text = text.replace("converter = { bits = 16,", "converter = { bits = 24,")
    path = tmp_path / "sim-2dof-exact.toml"
    path.write_text(text)
    profile, layout, rows, _ = excite(path, 30.0, seed=1, gain=4.0)
    assert all(c.sim_noise == 0.0 for c in profile.inputs)
    columns = {n: rows[:, i] for i, n in enumerate(layout.names)}
    res = identify_run(columns, known_params(profile), profile=profile, refine=False)
    fit = next(f for f in res.fits if f.name == "fluid")
    truth = plant_params(profile).theta_fluid()
    err_pct = 100 * (fit.theta - truth) / truth
    assert np.all(np.abs(err_pct) < 5e-3), dict(zip(fit.names, err_pct.round(4), strict=True))


def test_the_lvdt_reaches_the_fused_spool_below_the_crossover_only(params) -> None:
    """The complementary filter's corner is CROSSOVER_HZ: with the commands at null (the model
    says the spool rests) an LVDT swinging at the crossover comes through at 1/√2, and a
    decade above it at a tenth (a first-order low-pass)."""
    from estimator.spool import CROSSOVER_HZ

    t = np.arange(20_000) / FS
    cmd = np.zeros((t.size, NJ))

    def through(f: float) -> float:
        raw = np.zeros((t.size, 6 * NJ))
        raw[:, U_SLOT * NJ] = 1e-3 * np.sin(2 * np.pi * f * t)
        out = fused(params, raw, cmd)[:, 0]
        tail = slice(t.size // 2, None)
        return float(np.std(out[tail]) / np.std(raw[tail, U_SLOT * NJ]))

    assert through(CROSSOVER_HZ) == pytest.approx(1 / np.sqrt(2), abs=0.02)
    assert through(10 * CROSSOVER_HZ) == pytest.approx(0.1, abs=0.01)


def test_the_crossover_must_lie_strictly_between_zero_and_nyquist(params) -> None:
    for bad in (0.0, 500.0):
        with pytest.raises(ValueError, match=rf"crossover_hz must be in \(0, 500.0\), got {bad}"):
            SpoolFusion(params, NJ, FS, crossover_hz=bad)
    for ok in (1e-3, 499.9):
        SpoolFusion(params, NJ, FS, crossover_hz=ok)


def test_consecutive_bad_rows_each_restart_the_filters(params) -> None:
    """Two bad rows in a row (the second a stretch of one row on its own): both stay as read,
    and the rows after them are fused as a fusion begun there."""
    cmd, _, raw = spool_run(params, n=2000)
    u = U_SLOT * NJ
    raw[700:702, u] = np.nan
    out = raw.copy()
    SpoolFusion(params, NJ, FS).apply(out, cmd)
    assert np.isnan(out[700, u]) and np.isnan(out[701, u])
    after = raw[702:].copy()
    SpoolFusion(params, NJ, FS).apply(after, cmd[702:])
    np.testing.assert_array_equal(out[702:, u], after[:, u])
