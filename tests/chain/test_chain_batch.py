"""The batch identification of a chain machine from its recording (estimator.chain_batch) and
`rigctl identify` on one: the noise measured on the run, the flags, and, on a service run of
the excavator, every measured base parameter within its ±3σ of the simulator's truth."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from estimator.chain_batch import (
    ChainRecording,
    flag_reasons,
    identify_chain,
    load_chain_run,
    measured_noise,
    sigma_bound,
    torque_rms,
    white_noise_sigma,
)
from estimator.chain_identify import ChannelNoise, Conditioning
from estimator.report.runs import ReportError, load_run

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "hw_profiles" / "sim-excavator.toml"


def test_the_white_noise_of_a_moving_channel_is_measured_from_its_fourth_differences() -> None:
    """A slow motion with a 20 Hz ringing on top, sampled at 1 kHz, plus white noise of known
    σ per column: the estimate is within 5 % of it (the motion's share is negligible)."""
    rng = np.random.default_rng(3)
    t = np.arange(60_000) / 1000.0
    motion = np.sin(2 * np.pi * 0.3 * t) + 1e-3 * np.sin(2 * np.pi * 20.0 * t)
    sigma = np.array([2e-3, 5e-4])
    x = motion[:, None] + rng.normal(0.0, 1.0, (t.size, 2)) * sigma
    np.testing.assert_allclose(white_noise_sigma(x), sigma, rtol=0.05)


def _recording(q: np.ndarray, pc: np.ndarray, pr: np.ndarray, floor: float) -> ChainRecording:
    n = q.shape[1]
    f = ChannelNoise(np.full(n, floor), np.full(n, floor), np.full(n, floor))
    return ChainRecording(None, 1000.0, q, pc, pr, f)  # type: ignore[arg-type]


def test_a_channel_quieter_than_its_converter_is_held_at_the_quantisation_noise() -> None:
    rng = np.random.default_rng(0)
    quiet = np.zeros((5000, 1))
    noisy = rng.normal(0.0, 0.2, (5000, 1))
    noise = measured_noise(_recording(quiet, noisy, quiet, floor=0.01))
    assert noise.q[0] == 0.01 and noise.p_rod[0] == 0.01
    assert noise.p_cap[0] == pytest.approx(0.2, rel=0.05)


def test_a_parameter_is_flagged_when_not_excited_or_when_its_3_sigma_reaches_zero() -> None:
    flags = flag_reasons(
        ["a", "b", "c", "d"],
        np.array([1.0, 3.0, -3.01, 5.0]),
        np.array([math.inf, 1.0, 1.0, 0.1]),
    )
    assert flags["a"] == "not excited by this run"
    assert flags["b"].startswith("not resolved")  # exactly at 3σ: not told from zero
    assert "c" not in flags and "d" not in flags


def test_the_printed_sigma_is_the_upper_bound_of_its_monte_carlo_estimate() -> None:
    assert sigma_bound(40) == pytest.approx(1.0 + 2.0 / math.sqrt(78.0))
    assert sigma_bound(1000) < sigma_bound(40) < sigma_bound(10)


@pytest.mark.slow
def test_every_measured_base_parameter_of_a_service_run_is_within_3_sigma(
    excavator_run: Path,
) -> None:
    """The service's simulator is the profile's chain: its base parameters are the truth. The
    noise is measured, not read from the profile (it matches the channels' `sim_noise` and
    converter steps); the bucket's first moments are measured, the rest flagged. Coverage is a
    rate (the bench measures it over seeds: 84 of 84 printed parameter-runs): one run may
    print one number just outside its ±3σ — a zero-truth parameter the flags let through sits
    past 3σ of zero by construction — but not two, and none beyond 4σ."""
    rec = load_chain_run(excavator_run, PROFILE)
    b = identify_chain(rec)
    assert b.truth is not None
    sim_q = math.hypot(math.radians(0.02), 2 * math.pi / 2**14 / math.sqrt(12))
    np.testing.assert_allclose(b.noise.q, sim_q, rtol=0.1)
    measured = b.measured
    assert {"bucket.mx", "bucket.my"} <= {n for n, m in zip(b.names, measured, strict=True) if m}
    z = np.abs(b.theta - b.truth) / b.sigma
    assert np.count_nonzero(measured & (z > 3.0)) <= 1 and not np.any(measured & (z > 4.0))
    assert set(b.flags) == {n for n, m in zip(b.names, measured, strict=True) if not m}
    # Its own run predicted by its own fit: no worse than the profile's nominal model, in the
    # weighted sum the fit minimises.
    rms = torque_rms(rec, b)
    assert set(rms["identified"]) == {"swing", "boom", "stick", "bucket"}
    assert all(rms["identified"][j] < 0.01 * rms["measured"][j] for j in rms["measured"])
    # The prediction model: the flagged bodies' combinations at the profile's values, never a
    # friction or an offset; the rest refitted (on the simulator, whose bodies are the
    # profile's, it fits its own run within a hair of the free fit).
    assert b.held and set(b.held) <= set(b.flags) and b.theta_held is not None
    assert not any(n.endswith((".fv", ".fva", ".o_cap", ".o_rod", ".Ia")) for n in b.held)
    at = [b.names.index(n) for n in b.held]
    np.testing.assert_array_equal(b.theta_held[at], b.nominal[at])
    free = [i for i in range(len(b.names)) if b.names[i] not in b.held]
    assert not np.allclose(b.theta_held[free], b.theta[free])
    assert all(rms["held"][j] < 0.01 * rms["measured"][j] for j in rms["measured"])


@pytest.mark.slow
def test_rigctl_identify_fits_a_chain_run_and_prints_its_base_parameters(
    excavator_run: Path,
) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "rigctl.main", "identify", str(excavator_run), "--json"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    chain = out["chain"]
    assert chain["model"] == "complete" and len(chain["base_parameters"]) == 62
    flagged = [p for p in chain["base_parameters"] if p["flag"]]
    assert flagged and all(p["flag"] in out["warnings"][0] or p["name"] in out["warnings"][0]
                           for p in flagged)  # fmt: skip
    rows = {p["name"]: p for p in out["parameters"]}
    assert rows["bucket.mx"]["identifiable"] and rows["bucket.mx"]["batch_within_3sigma"]
    assert "bucket.mx = bucket.mx − 0.225·bucket.jack0.pis.m" in out["table"]


@pytest.mark.slow
def test_a_planar_profile_is_refused_for_a_chain_run_and_the_reverse(excavator_run: Path) -> None:
    """Each reader names what the other kind of profile lacks."""
    with pytest.raises(ReportError, match=r"no \[chain\] section: not a chain machine's run"):
        load_chain_run(excavator_run, ROOT / "hw_profiles" / "sim-2dof.toml")
    with pytest.raises(ReportError, match=r"no \[plant\] section.*a \[chain\] machine"):
        load_run(excavator_run)  # the profile stored in the run: the excavator's


def test_the_online_estimator_refuses_a_structure_for_a_chain(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """A chain's model has no structure to take from a batch (estimator.structure)."""
    from estimator.service import main

    assert main(["--profile", str(PROFILE), "--structure", str(tmp_path / "x.toml")]) == 2
    assert "a [chain] machine's model has no structure" in caplog.text


def test_a_run_shorter_than_the_filters_start_up_is_refused_naming_the_length() -> None:
    cond = Conditioning(200.0)
    need = (2 * cond.trim + 1) * cond.nd
    cond.check_length(need)
    with pytest.raises(ValueError, match=r"start up for 8\.0 s at each end.*more than"):
        cond.check_length(need - 1)


def test_the_quantisation_floor_is_each_converters_step_over_root_12() -> None:
    """The excavator's 14-bit resolvers over 360° and 12-bit pressure A/Ds over ±10 V at
    3.447379e6 Pa/V (hw_profiles/sim-excavator.toml)."""
    from daq.profile import load_profile
    from estimator.chain_batch import converter_floor

    f = converter_floor(load_profile(PROFILE))
    np.testing.assert_allclose(f.q, 2 * math.pi / 2**14 / math.sqrt(12.0), rtol=1e-9)
    step_p = 20.0 / 2**12 * 3.447379e6 / math.sqrt(12.0)
    np.testing.assert_allclose(f.p_cap, step_p, rtol=1e-9)
    np.testing.assert_allclose(f.p_rod, step_p, rtol=1e-9)


def test_a_run_too_short_for_the_base_parameters_is_refused_naming_what_it_needs() -> None:
    """20 s at 1 kHz leave 10 decimated samples per joint after 8 s of start-up at each end:
    40 equations for 62 base parameters (at least twice as many are asked for)."""
    from types import SimpleNamespace

    from daq.profile import load_profile

    prof = load_profile(PROFILE)
    n, N = len(prof.joints), 20_000
    opened = SimpleNamespace(profile=prof, path=Path("short.rigrun"), notes=[])
    rec = ChainRecording(opened, 1000.0, np.zeros((N, n)), np.zeros((N, n)), np.zeros((N, n)),
                         ChannelNoise(np.ones(n), np.ones(n), np.ones(n)))  # type: ignore[arg-type]  # fmt: skip
    with pytest.raises(ReportError, match=r"short\.rigrun: 20\.0 s of running data give 10 "
                       r"decimated samples per joint .*8\.0 s each.*62 base parameters need at "
                       r"least 71 decimated samples"):  # fmt: skip
        identify_chain(rec)
