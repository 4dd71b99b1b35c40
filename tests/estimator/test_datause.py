"""Which rows the estimator uses: RUNNING only, no fault or interlock flag, blocks cut at every
jump in measured time or seq (estimator.datause; issue 13 item 1, issue 19 item 4)."""

from __future__ import annotations

import numpy as np

from estimator.datause import CLAMP_FLAG, STATE_RUNNING, DataUse, blocks, classify

P = 0.001


def _cols(n: int = 20) -> dict[str, np.ndarray]:
    return {
        "seq": np.arange(n, dtype=float),
        "t": (np.arange(n) + 1) * P,
        "state": np.full(n, float(STATE_RUNNING)),
        "fault": np.zeros(n),
        "flags": np.zeros(n),
    }


def test_clean_rows_are_one_block() -> None:
    c = classify(_cols(), P, running_only=True)
    assert c.good.all() and not c.breaks.any() and c.gaps == 0
    assert blocks(c.good, c.breaks) == [slice(0, 20)]


def test_skipped_cycles_in_t_end_a_block_though_seq_is_consecutive() -> None:
    cols = _cols()
    cols["t"][8:] += 5 * P  # the loop skipped five deadlines; seq did not jump
    c = classify(cols, P, running_only=True)
    assert c.gaps == 1 and abs(c.gap_s - 5 * P) < 1e-12
    assert blocks(c.good, c.breaks) == [slice(0, 8), slice(8, 20)]


def test_lost_rows_in_seq_end_a_block() -> None:
    cols = _cols()
    keep = np.r_[0:5, 9:20]
    cols = {k: v[keep] for k, v in cols.items()}
    c = classify(cols, P, running_only=True)
    assert c.gaps == 1 and abs(c.gap_s - 4 * P) < 1e-12
    assert blocks(c.good, c.breaks) == [slice(0, 5), slice(5, 16)]


def test_faults_flags_and_states_are_left_out_and_restart_the_block() -> None:
    cols = _cols()
    cols["fault"][3:5] = 1  # CHANNEL_RANGE latched
    cols["flags"][10] = 1 << 1  # CHANNEL_FAULT tripping in this cycle
    cols["flags"][12] = CLAMP_FLAG  # a clamped valve command is not a fault
    cols["state"][16:] = 1  # ARMED: the experiment ended
    c = classify(cols, P, running_only=True)
    assert c.faulted == 3 and c.not_running == 4
    assert blocks(c.good, c.breaks) == [slice(0, 3), slice(5, 10), slice(11, 16)]
    everything = classify(cols, P, running_only=False)
    assert everything.not_running == 0 and everything.good[16:].all()


def test_streaming_previous_row_detects_a_gap_at_the_chunk_start() -> None:
    cols = _cols()
    prev = (float(cols["t"][0] - 3 * P), float(cols["seq"][0] - 1))  # t jumped 2 periods
    c = classify(cols, P, running_only=True, previous=prev)
    assert c.breaks[0] and c.gaps == 1


def test_data_use_words() -> None:
    d = DataUse(rows=1000, used=700, faulted=200, gaps=2, gap_s=0.25, virtual_time=False)
    text = d.summary(P)
    assert "real time" in text and "700 of 1000" in text and "200 with a fault" in text
    w = " ".join(d.warnings(P))
    assert "2 gap(s)" in w and "0.250 s missing" in w and "200 rows" in w
    assert DataUse(rows=10, used=10).warnings(P) == []
