"""Rows an experiment gives to the fluid equations alone (`identify = "fluid"`;
estimator.segment_rows, the batch's `fluid_only`)."""

from __future__ import annotations

import numpy as np
import pytest

from daq.profile.plant import plant_params
from estimator.batch import identify_run
from estimator.segment_rows import fluid_only_rows


def _experiment(seq: int, *marked: str) -> dict:
    segs = [{"name": n, "identify": "fluid"} for n in marked] + [{"name": "plain"}]
    return {"kind": "experiment", "seq": seq, "experiment": {"segments": segs}}


def _segment(seq: int, name: str) -> dict:
    return {"kind": "segment", "seq": seq, "t": seq * 1e-3, "name": name}


SEQ = np.arange(100, 1100)  # the analysed rows' seq: row i is seq 100 + i


def test_a_marked_segment_runs_to_the_next_phase() -> None:
    events = [
        _experiment(100, "bulk"),
        _segment(100, "plain"),
        _segment(300, "approach:bulk"),
        _segment(400, "bulk"),
        _segment(650, "plain"),
        {"kind": "experiment_done", "seq": 900},
    ]
    assert fluid_only_rows(events, SEQ) == [slice(300, 550)]


@pytest.mark.parametrize(
    ("end", "stop"),
    [
        ({"kind": "experiment_done", "seq": 700}, 600),
        ({"kind": "state", "seq": 720, "state": "FAULT"}, 620),  # a fault ends it too
        (None, 1000),  # still in it where the recording ends
    ],
)
def test_a_marked_last_segment_ends_with_the_experiment(end: dict | None, stop: int) -> None:
    events = [_experiment(100, "bulk"), _segment(500, "bulk")] + ([end] if end else [])
    assert fluid_only_rows(events, SEQ) == [slice(400, stop)]


def test_only_the_running_experiments_marks_count() -> None:
    """A second experiment without the mark: its segment of the same name is not fluid-only;
    segment events before any experiment event mark nothing; rows outside the analysed ones are
    clipped away."""
    events = [
        _segment(150, "bulk"),
        _experiment(200, "bulk"),
        _segment(200, "bulk"),
        _segment(260, "plain"),
        _experiment(300),
        _segment(300, "bulk"),
        _segment(400, "plain"),
        _experiment(500, "bulk"),
        _segment(1050, "bulk"),
        _segment(1300, "plain"),
    ]
    assert fluid_only_rows(events, SEQ) == [slice(100, 160), slice(950, 1000)]
    assert fluid_only_rows(events, SEQ[:0]) == []


def test_the_mechanical_model_leaves_fluid_rows_out_and_the_fluid_model_keeps_them(
    sim1dof_run,
) -> None:
    profile, layout, rows = sim1dof_run
    cols = {n: rows[:, i] for i, n in enumerate(layout.names)}
    known = plant_params(profile)
    marked = slice(9000, 11000)
    got = identify_run(cols, known, profile=profile, fluid_only=[marked])
    whole = identify_run(cols, known, profile=profile)
    cut = identify_run(
        cols, known, profile=profile, segments=[slice(0, marked.start), slice(marked.stop, None)]
    )
    by = {f.name: f for f in got.fits}
    assert {f.name for f in got.fits} == {"mechanical", "fluid"}
    # The mechanical fit is the one on the data without the marked rows …
    np.testing.assert_array_equal(by["mechanical"].theta, cut.fits[0].theta)
    assert not np.array_equal(by["mechanical"].theta, whole.fits[0].theta)
    # … the fluid fit the one on all of them.
    np.testing.assert_array_equal(by["fluid"].theta, whole.fits[1].theta)
    assert not np.array_equal(by["fluid"].theta, cut.fits[1].theta)
    # and the report says so
    assert f"{2000 / profile.rig.loop_rate_hz:.1f} s of segments" in " ".join(got.notes)
    assert any("used by fluid only" in n for n in got.notes)
    assert not any("identify" in n for n in whole.notes)


@pytest.mark.parametrize("profile", ["sim-1dof.toml", "sim-2dof.toml", "sim-2dof-realistic.toml"])
def test_every_shipped_fluid_model_says_so_and_no_mechanical_one(profile: str) -> None:
    """The profiles' own model families, and the fluid family re-made with other valve switches
    (what the batch's switch search fits): only the chambers' flow balances take fluid rows."""
    from pathlib import Path

    from daq.profile import load_profile
    from estimator.models import load_models

    prof = load_profile(Path(__file__).resolve().parents[2] / "hw_profiles" / profile)
    known = plant_params(prof)
    models = load_models(None if prof.estimator is None else prof.estimator.model, known)
    assert [m.fluid for m in models] == [m.name.startswith("fluid") for m in models]
    assert any(m.fluid for m in models) and not all(m.fluid for m in models)
    for m in models:
        if m.switches is not None:
            assert m.switches.make(m.switches.value).fluid is m.fluid


@pytest.mark.parametrize("chunk", [20, 7000])  # spans inside one call, and across calls
def test_online_the_mechanical_model_restarts_after_fluid_rows_and_the_fluid_model_keeps_them(
    sim1dof_run, chunk: int
) -> None:
    """Online as in the batch: the fluid-only rows reach the fluid chain (its estimate is the
    one without any span) and not the mechanical one, whose filters restart after them (one
    more FIR start-up lost, 103 taps + 2 − 1 rows)."""
    from estimator.online import OnlineIdentifier

    profile, layout, rows = sim1dof_run
    seq = rows[:, layout.names.index("seq")]
    span = (int(seq[9000]), int(seq[11000]))

    def run(spans):
        ident = OnlineIdentifier(profile, layout.names, fluid_only=spans)
        for k in range(0, len(rows), chunk):
            ident.update_rows(rows[k : k + chunk])
        ident.flush()
        return {c.model.name: c for c in ident.chains}

    plain, marked = run(()), run([span])
    np.testing.assert_array_equal(marked["fluid"].theta(), plain["fluid"].theta())
    assert marked["fluid"].rls.samples == plain["fluid"].rls.samples
    assert marked["mechanical"].rls.samples == plain["mechanical"].rls.samples - 2000 - 102


def test_live_events_mark_the_same_rows_as_the_recordings_spans(sim1dof_run) -> None:
    """rig-estimator hears the experiment and its segment boundaries on telemetry's `event`
    topic while the rows stream: fed as they come, they leave the same rows out of the
    mechanical chain as the spans read from a recording."""
    from estimator.online import OnlineIdentifier
    from estimator.segment_rows import fluid_only_spans

    profile, layout, rows = sim1dof_run
    seq = rows[:, layout.names.index("seq")]
    events = [
        _experiment(int(seq[0]), "bulk"),
        _segment(int(seq[0]), "plain"),
        _segment(int(seq[9000]), "bulk"),
        _segment(int(seq[11000]), "plain"),
    ]
    live = OnlineIdentifier(profile, layout.names)
    for k in range(0, len(rows), 100):
        for ev in events:  # each boundary heard just before the rows that reach it
            if k <= np.searchsorted(seq, ev["seq"]) < k + 100:
                live.event(ev)
        live.update_rows(rows[k : k + 100])
    live.flush()
    replay = OnlineIdentifier(profile, layout.names, fluid_only=fluid_only_spans(events))
    for k in range(0, len(rows), 100):  # the same chunks (the random walk steps per chunk)
        replay.update_rows(rows[k : k + 100])
    replay.flush()
    for a, b in zip(live.chains, replay.chains, strict=True):
        assert a.rls.samples == b.rls.samples
        np.testing.assert_allclose(a.theta(), b.theta(), rtol=1e-9)
    plain = OnlineIdentifier(profile, layout.names)
    for k in range(0, len(rows), 100):
        plain.update_rows(rows[k : k + 100])
    plain.flush()
    assert live.chains[0].rls.samples == plain.chains[0].rls.samples - 2000 - 102
