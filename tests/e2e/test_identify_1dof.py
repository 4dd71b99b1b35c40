"""Slow tier: `rigctl identify` on the 1-DOF profile, where the fluid model's least squares is
biased the most (errors in variables: 1/b −0.5…−0.75 %) and the output-error refinement has to
be both printed and right (estimator.refine.choose; its instruments from the spool without the
LVDT's noise, estimator.spool.INSTRUMENT_CROSSOVER_HZ); and the mechanical model's M, biased
low by the angle noise in q̈, refined with q̈ predicted from the measured force."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROFILES, ROOT

pytestmark = pytest.mark.slow
#: 1/b printed (IV) over 14 recordings: +0.04…+0.31 % at σ ≈ 0.3 %; the least-squares value
#: beside it −0.5…−0.75 %. With the instruments built from the regressors' spool the refined
#: 1/b was +1.08 % at σ 0.31 %: printed, unflagged, outside ±3σ.
MAX_1B_ERROR_PCT = 0.5
#: Least squares printed instead (its errors-in-variables bias, −0.5…−0.75 %): the nominal
#: plant's 1 % target.
LS_1B_ERROR_PCT = 1.0
#: M's least squares printed instead: its bias from the angle noise in q̈ is −0.13 % (10 runs).
M_LS_ERROR_PCT = 0.3


def test_every_parameter_within_its_error_bars_and_1b_and_m_refined(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "rigctl.main", "identify", "--profile"]
    cmd += [str(PROFILES / "sim-1dof.toml"), "--virtual-time", "--json", "--no-report"]
    cmd += ["--no-verify", "--validation", "none", "--out", str(tmp_path / "out")]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    params = {p["name"]: p for p in result["parameters"]}
    assert len(params) == 8
    for name, p in params.items():
        assert p["identifiable"] is True, name
        assert p["batch_within_3sigma"], p
    # M: least squares sits −0.13 % low (the angle sensors' noise in q̈); the refinement's
    # instruments take q̈ from the measured force (measured +0.014 % mean, sd 0.022, 10 runs).
    m = params["M"]
    if m["batch_method"] == "IV":
        assert abs(m["batch_error_pct"]) < 0.1, m
    else:
        # The chooser prints least squares where the Hausman test finds no bias beyond the two
        # estimates' σ (estimator.refine.choose), as for 1/b below: seen in a fresh-clone CI
        # run (M −0.106 %). Then within ±3σ (above) and its known bias's reach.
        assert abs(m["batch_error_pct"]) < M_LS_ERROR_PCT, m
    inv_b = params["1/b"]
    if inv_b["batch_method"] == "IV":
        assert abs(inv_b["batch_error_pct"]) < MAX_1B_ERROR_PCT, inv_b
        # Least squares beside it is the biased one the refinement corrects: errors in the
        # pressure-rate column attenuate it (LS below IV by 0.5–1.1 % over 14 recordings, by
        # 0.72 % on one where both lay within 0.4 % of the truth, LS the nearer: which of the
        # two is nearer on one run is the noise's, the direction of the correction is not).
        assert inv_b["batch_ls_error_pct"] < inv_b["batch_error_pct"] - 0.2, inv_b
    else:
        # The chooser prints least squares where the Hausman test finds no bias beyond the
        # two estimates' σ, or where the refinement is not trusted but differs immaterially
        # (estimator.refine.choose). Seen in CI on two recordings of four (LS at −0.26 % and
        # −0.57 %; never in 16 runs here): then within ±3σ (above) and the nominal plant's
        # 1 % — least squares' own bias is −0.5…−0.75 % — and never with a warning of a
        # material disagreement.
        assert inv_b["batch_method"] == "WLS", inv_b
        assert abs(inv_b["batch_error_pct"]) < LS_1B_ERROR_PCT, inv_b
        assert not any("refinement is not trusted" in w for w in result["warnings"]), result
