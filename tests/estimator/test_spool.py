"""The spool the fluid regressors use: the LVDT's below the crossover, the valve command's lag
above (estimator.spool), and what it buys the flow gains."""

from __future__ import annotations

import numpy as np
import pytest

from daq.profile import load_profile
from daq.profile.plant import known_params, plant_params
from estimator.batch import identify_run
from estimator.online import OnlineIdentifier
from estimator.simdata import excite
from estimator.spool import U_SLOT, SpoolFusion, valve_commands
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


def test_fused_spool_keeps_the_motion_and_drops_the_noise(params) -> None:
    cmd, spool, raw = spool_run(params)
    fused = raw.copy()
    SpoolFusion(params, NJ, FS).apply(fused, cmd)
    u = slice(U_SLOT * NJ, (U_SLOT + 1) * NJ)
    err_lvdt = np.std(raw[1000:, u] - spool[1000:], axis=0)
    err_fused = np.std(fused[1000:, u] - spool[1000:], axis=0)
    assert np.all(err_lvdt > 0.9e-3)
    # The LVDT's noise through a 2 Hz first-order low-pass: 1 mV × √(π·2/1000) ≈ 0.08 mV.
    assert np.all(err_fused < 0.15e-3), err_fused


def test_fusion_follows_the_lvdt_where_the_valve_differs_from_its_datasheet(params) -> None:
    """A null offset and a gain the datasheet does not know reach û at low frequency (the
    LVDT is the reference there), so û does not carry the declared model's error."""
    cmd, spool, raw = spool_run(params, noise=0.0)
    u = slice(U_SLOT * NJ, (U_SLOT + 1) * NJ)
    true = 1.03 * spool + 0.004  # the real spool: 3 % more gain, 4 mV null offset
    raw[:, u] = true
    SpoolFusion(params, NJ, FS).apply(raw, cmd)
    settled = slice(5000, None)
    assert np.max(np.abs(np.mean(raw[settled, u] - true[settled], axis=0))) < 1e-4
    # What is left is the gain error above the crossover only, a fraction of the 3 %.
    assert np.std(raw[settled, u] - true[settled]) < 0.03 * np.std(spool[settled])


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
    u = U_SLOT * NJ
    # A restart begins at the LVDT's own reading, not the earlier stretch's state.
    assert restarted[1500, u] == raw[1500, u]
    assert restarted[1500, u] != whole[1500, u]


def test_a_non_finite_reading_stays_and_restarts_the_filters(params) -> None:
    cmd, _, raw = spool_run(params, n=2000)
    u = U_SLOT * NJ
    raw[700, u] = np.nan
    cmd[1200, 1] = np.inf
    out = raw.copy()
    SpoolFusion(params, NJ, FS).apply(out, cmd)
    assert np.isnan(out[700, u])
    assert out[701, u] == raw[701, u]  # restarted from the LVDT
    assert out[1201, u + 1] == raw[1201, u + 1]
    assert np.all(np.isfinite(np.delete(out[:, u], 700)))


def test_bad_arguments_are_named(params) -> None:
    with pytest.raises(ValueError, match="describe 2"):
        SpoolFusion(params, 1, FS)
    with pytest.raises(ValueError, match="crossover_hz must be in"):
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
