"""`rigctl identify`'s mismatch warnings from the FIT table: an output the model reproduces
10 points worse than the truth does (or below 50 % without a truth) is named, with the
replay (open or closed loop) it comes from."""

from __future__ import annotations

from rigctl.identify_table import fit_warnings


def test_low_fits_are_named_with_their_replay() -> None:
    table = [
        {"output": "q1", "kind": "FIT %", "batch": 95.0, "online": 60.0, "truth": 96.0},
        {"output": "p_cap2", "kind": "FIT %", "batch": 90.0, "online": 90.0, "truth": 95.0},
        {"output": "p_cap2", "kind": "FIT % closed loop", "batch": 47.2, "truth": 96.0},
        {"output": "u1", "kind": "FIT % closed loop", "batch": 40.0},
        {"output": "tau1", "kind": "torque RMS N·m", "batch": 1.0, "truth": 100.0},
    ]
    batch, online = fit_warnings(table)
    assert "p_cap2 closed loop 47.2 % (floor 96.0 %)" in batch
    assert "u1 closed loop 40.0 %" in batch
    assert "q1" not in batch and "tau1" not in batch and "p_cap2 90.0" not in batch
    assert online.startswith("the online model") and "q1 60.0 % (floor 96.0 %)" in online


def test_the_closed_loop_floor_is_the_truth_without_the_runs_noise() -> None:
    """The true plant's closed-loop row replays the run's own noise (a check of the path,
    ~99.5 % on a spool); a model is judged against that row without the noise (~90 %)."""
    table = [
        {"output": "u1", "kind": "FIT % closed loop", "batch": 85.0, "online": 75.0,
         "truth": 99.6, "truth_noise_free": 90.5},
    ]  # fmt: skip
    warnings = fit_warnings(table)
    assert len(warnings) == 1 and warnings[0].startswith("the online model"), warnings
    assert "u1 closed loop 75.0 % (floor 90.5 %)" in warnings[0]
