"""Slow tier: the README's main command end to end, as a user runs it (its own process).

`rigctl identify --profile hw_profiles/sim-2dof.toml --virtual-time --json --out DIR` starts
rig-daq and rig-estimator, runs the standard experiment (recorded), the online and the batch
identification, a validation run and the report. Accuracy targets are the benchmark's
(`bench/identification_accuracy.py`); this checks behaviour with the issue's 1 % bound and the
truth within ±3σ.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daq.profile import load_profile, plant_params
from daq.recording import read_run
from tests.conftest import PROFILES, ROOT

PROFILE = PROFILES / "sim-2dof.toml"
STATE_RUNNING = 2.0
#: Measured worst error 0.16–0.21 % (1/b, R12) on seed 1 (bench/identification_accuracy.py);
#: 1 % is the issue's target for the nominal plant.
LOOSE_ERROR_PCT = 1.0
#: Validation FIT of the identified parameters vs the true ones, points (see the test).
FIT_FROM_FLOOR = 1.0
#: Closed-loop validation FIT of the pressures, identified vs true parameters, points (see the
#: test: what an estimate within its ±3σ may lose there, measured).
CLOSED_LOOP_PRESSURE_POINTS = 6.0

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def identified(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("identify") / "out"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "rigctl.main", "identify", "--profile", str(PROFILE)]
    cmd += ["--virtual-time", "--json", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), out


def test_all_parameters_identified_near_truth(identified: tuple[dict[str, Any], Path]) -> None:
    result, _ = identified
    params = plant_params(load_profile(PROFILE))
    names = params.mech_names() + params.fluid_names()
    assert len(names) == 16
    assert [p["name"] for p in result["parameters"]] == names
    values = np.concatenate([params.theta_mech(), params.theta_fluid()])
    truth = dict(zip(names, values, strict=True))
    for p in result["parameters"]:
        assert p["truth"] == pytest.approx(truth[p["name"]], rel=1e-12)
        for est in ("online", "batch"):
            value, sigma = p[est], p[f"{est}_sigma_pct"]
            assert math.isfinite(value) and math.isfinite(sigma) and sigma > 0.0, (est, p)
            err = 100.0 * (value - p["truth"]) / abs(p["truth"])
            assert p[f"{est}_error_pct"] == pytest.approx(err)
            assert abs(err) < LOOSE_ERROR_PCT, (est, p)
    # Coverage is a rate over seeds (issue 13: ≥ 95 % of parameter-runs, the bench measures
    # it); one run may have one parameter outside ±3σ — 1/b's ≈ −0.17 % common-mode bias
    # (docs/estimator.md) sits near 3σ — but not two.
    for est in ("online", "batch"):
        outside = [p["name"] for p in result["parameters"] if not p[f"{est}_within_3sigma"]]
        assert len(outside) <= 1, (est, outside)
    assert result["online_samples"] > 0
    table = result["table"].splitlines()
    assert table[0].split()[:3] == ["parameter", "true", "online"]
    assert any(line.startswith("batch: max |error|") for line in table)


def test_report_written_with_fit_table(identified: tuple[dict[str, Any], Path]) -> None:
    result, out = identified
    html = Path(result["report"])
    assert html.is_file() and html.parent.parent == out
    text = html.read_text(encoding="utf-8")
    assert "<html" in text.lower() and "M1" in text
    fit = {r["output"]: r for r in result["fit"] if r["kind"] == "FIT %"}
    assert {"s1", "s2", "p_cap1", "p_rod1", "q1", "q2"} <= set(fit)
    # Closed loop (the run's own controller replayed, estimator.validation_closed_loop): every
    # output, the spool too. Angles and pistons as close to the truth as in open loop. The
    # pressures' closed-loop FIT is a sharp yardstick (bench/closed_loop_fit_sensitivity.py):
    # the simulator's plant with 1/b off by 0.2 % loses 1.2–1.4 points of p_cap1, by 0.5 %
    # 5–7, by 1 % 12–24. With every parameter moved at once by 2σ-scale random errors (σ the
    # batch's own: 1/b 0.06 %, M1 0.12 %) the loss was ≤ 5.5 points in 99 % of 30 draws (max
    # 6.2); the identified models lost 0.9 points at most over 10 runs. Before the estimator's
    # sampled-data spool (1/b −0.2 % biased, σ 0.2 %) the losses ran to 4.3 and once 10.8.
    # The floor is the true plant's FIT without the run's own noise. Its row with that noise
    # (regenerated from the simulator's seed and the rows' seq) checks the path itself:
    # measured 99.4 % on the spools, ≥ 99.8 % on angles and pistons; with the realization one
    # read off the spools score 88 %, without it 91 %. The pressures, 97.7–99.3 % over two
    # runs, are not held to 99 here: a reading a converter step off flips a D/A code now and
    # then (1 row in 130) and the nominal plant's oil column rings after it.
    closed = {r["output"]: r for r in result["fit"] if r["kind"] == "FIT % closed loop"}
    assert set(closed) == set(fit) | {"u1", "u2"}
    for key, row in closed.items():
        if key[0] in "uqs":
            assert row["truth"] >= 99.0, (key, row)
        assert row["truth"] > row["truth_noise_free"], (key, row)
        near = FIT_FROM_FLOOR if key[0] in "qs" else CLOSED_LOOP_PRESSURE_POINTS
        for est in ("online", "batch"):
            assert abs(row[est] - row["truth_noise_free"]) < near, (key, est, row)
    for out, row in fit.items():
        # The true parameters set the noise floor of the FIT (measured ≥ 95 % on the nominal
        # simulator, bench/identification_accuracy.py); identified parameters that deserve
        # their σ come within a point of it (measured within 0.13 points, seed 1).
        assert math.isfinite(row["truth"]) and row["truth"] > 90.0, (out, row)
        for est in ("online", "batch"):
            assert abs(row[est] - row["truth"]) < FIT_FROM_FLOOR, (out, est, row)
    assert result["warnings"] == [], result["warnings"]
    assert all(p["identifiable"] is True for p in result["parameters"])
    assert Path(result["validation_run"]).is_file()
    assert Path(result["online_param_file"]).is_file()


def test_identification_recording_complete_and_contiguous(
    identified: tuple[dict[str, Any], Path],
) -> None:
    result, _ = identified
    run = read_run(result["identification_run"])
    assert run.complete and run.lost == 0
    assert len(run.seq) > 0 and np.all(np.diff(run.seq) == 1)  # ring index: nothing lost
    assert np.all(np.diff(run.column("seq")) == 1)  # loop cycles: none skipped
    t = run.column("t")
    assert np.all(np.diff(t) > 0)
    # The experiment is one block of RUNNING rows (no fault, no stop in the middle) of at most
    # the 120 s the standard experiment may take, idle before it excluded.
    running = run.column("state") == STATE_RUNNING
    edges = np.flatnonzero(np.diff(running.astype(int)))
    assert running.any() and len(edges) <= 2, edges
    block = np.count_nonzero(running) * load_profile(PROFILE).period
    assert 60.0 < block <= 120.0
    assert not np.any(run.column("fault")[running])
