"""The identification report rendered for short simulated runs: every figure a real PNG that the
HTML shows, and tables that hold what the analysis computed from the recordings."""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from daq.profile import load_profile, plant_params
from daq.recording import read_run
from estimator.report import ReportResult
from estimator.validation import Measured, validate
from tests.report.conftest import FAULT_AT, PROFILE

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EXPECTED_FIGURES = {
    "convergence",
    "validation_s",
    "validation_p_cap",
    "validation_p_rod",
    "validation_q",
    "torque",
    "residuals",
    "singular_values",
    "timing",
}


def _page(result: ReportResult) -> str:
    return result.html.read_text(encoding="utf-8")


def test_every_figure_is_a_png_the_html_shows(cross_report: ReportResult) -> None:
    assert set(cross_report.figures) == EXPECTED_FIGURES
    page = _page(cross_report)
    srcs = set(re.findall(r'<img src="([^"]+)"', page))
    for key, path in cross_report.figures.items():
        assert path.parent == cross_report.html.parent, key  # relative links resolve
        raw = path.read_bytes()
        assert raw[:8] == PNG_MAGIC, key
        assert len(raw) > 10_000, (key, len(raw))
        img = imread(path)
        assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300, (key, img.shape)
        assert img.std() > 0.01, key  # not a blank canvas
        assert path.name in srcs, key
    assert srcs == {p.name for p in cross_report.figures.values()}


def test_html_is_self_contained(cross_report: ReportResult) -> None:
    page = _page(cross_report)
    assert "<style>" in page
    assert not re.search(r'(src|href)="(https?:|/)', page)  # no external or absolute resource


def test_parameter_table_has_every_parameter_with_truth(cross_report: ReportResult) -> None:
    params = plant_params(load_profile(PROFILE))
    names = params.mech_names() + params.fluid_names()
    truth = np.concatenate([params.theta_mech(), params.theta_fluid()])
    rows = cross_report.parameter_table
    assert [r["name"] for r in rows] == names
    page = _page(cross_report)
    for r, tr in zip(rows, truth, strict=True):
        assert f">{html.escape(r['name'])}<" in page
        assert r["truth"] == pytest.approx(tr)
        assert r["batch_err_pct"] == pytest.approx(100 * (r["batch"] - tr) / tr)
        # 6 s of sine excitation identifies the reference rig to a few percent.
        assert abs(r["batch_err_pct"]) < 5.0 and abs(r["online_err_pct"]) < 5.0, r
        assert 0.0 < r["batch_sigma_pct"] < 10.0 and 0.0 < r["online_sigma_pct"] < 10.0, r
    assert "truth (simulator)" in page


def _measured_from_file(path: Path) -> Measured:
    """The validation run's signals, built here independently of the report's loader."""
    run = read_run(path)

    def cols(stem: str) -> np.ndarray:
        return np.stack([run.column(f"eng.{stem}_{i}") for i in (1, 2)], axis=1)

    return Measured(
        run.column("t") - run.column("t")[0],
        cols("q"),
        cols("p_cap"),
        cols("p_rod"),
        cols("spool"),
        cols("piston"),
    )


def test_fit_table_comes_from_the_validation_run(
    cross_report: ReportResult, sim_runs: tuple[Path, Path]
) -> None:
    rows = {r["output"]: r for r in cross_report.fit_table}
    # The truth column must be exactly validate() on the *validation* recording.
    profile = load_profile(PROFILE)
    direct = validate(plant_params(profile), profile.period, _measured_from_file(sim_runs[1]))
    fit_keys = {f"{lab}{i}" for lab in ("s", "p_cap", "p_rod", "q") for i in (1, 2)}
    assert set(direct.fit) == fit_keys
    assert fit_keys | {"tau1", "tau2"} == set(rows)
    assert cross_report.cross_validation
    # Recorded straight from the simulator, not by the service's `run`: no experiment to replay
    # in closed loop, and the report says so rather than leaving the rows out silently.
    assert not any(r["kind"] == "FIT % closed loop" for r in cross_report.fit_table)
    assert any("no closed-loop validation" in n for n in cross_report.notes)
    page = _page(cross_report)
    for key in fit_keys:
        assert rows[key]["truth"] == pytest.approx(direct.fit[key]), key
        for col in ("batch", "online", "truth"):
            assert f"<td>{rows[key][col]:.1f}</td>" in page, (key, col)
        # Identified from 6 s, validated on another trajectory: well above Sakai's Table IV.
        assert rows[key]["batch"] > 85.0, (key, rows[key])
    for i in (1, 2):
        assert rows[f"tau{i}"]["truth"] == pytest.approx(direct.torque_rms[i - 1])
    assert "not cross-validation" not in page


def test_events_and_segment(cross_report: ReportResult, sim_runs: tuple[Path, Path]) -> None:
    """The fault shows in the event table and the trip list; only the RUNNING rows before it
    were analysed."""
    page = _page(cross_report)
    trip_seq = round(FAULT_AT * 1000)
    assert "cause=pressure" in page and "old=RUNNING, new=FAULT" in page
    assert re.search(rf"<tr><td>{trip_seq}</td><td>{FAULT_AT:.3f}</td><td>[^<]*4", page)
    assert f"6000 / {trip_seq} ({FAULT_AT:.2f} s)" in page
    assert f"analysed rows 0–{trip_seq - 1} of 6000" in " ".join(cross_report.notes)
    assert len(read_run(sim_runs[0]).data) == 6000


def test_json_summary_is_clean(cross_report: ReportResult) -> None:
    import json

    d = json.loads(cross_report.to_json())
    assert d["html"] == str(cross_report.html)
    assert set(d["figures"]) == EXPECTED_FIGURES
    assert len(d["parameters"]) == 16 and d["cross_validation"] is True
