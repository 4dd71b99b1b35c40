"""Rows are processed in chunks of rig time (issue 13, throughput): whatever the message size,
every read-out sees every row given so far, and the estimate is the same."""

from __future__ import annotations

import numpy as np
import pytest

from estimator.online import OnlineIdentifier


def _feed(ident: OnlineIdentifier, rows: np.ndarray, size: int) -> None:
    for k in range(0, len(rows), size):
        ident.update_rows(rows[k : k + size])


def test_chunked_and_per_message_processing_agree(sim1dof_run) -> None:
    profile, layout, rows = sim1dof_run
    rows = rows[:6000]
    chunked = OnlineIdentifier(profile, layout.names, chunk_s=0.1)
    direct = OnlineIdentifier(profile, layout.names, chunk_s=0.0)
    _feed(chunked, rows, 20)
    _feed(direct, rows, 20)
    a, b = chunked.estimate(), direct.estimate()
    assert a.data.rows == b.data.rows == len(rows)
    assert a.samples == b.samples > 0
    np.testing.assert_allclose(a.theta, b.theta, rtol=2e-3)


def test_read_outs_see_buffered_rows(sim1dof_run) -> None:
    profile, layout, rows = sim1dof_run
    ident = OnlineIdentifier(profile, layout.names, chunk_s=1.0)
    assert ident.update_rows(rows[:3000]) > 0  # a whole chunk and more: processed at once
    assert ident.update_rows(rows[3000:3050]) == 0  # buffered
    assert ident.rows == 3000
    assert ident.estimate().data.rows == 3050  # estimate() flushed
    ident.update_rows(rows[3050:3100])
    ident.gap()  # the buffered rows are processed before the break is counted
    assert ident.rows == 3100 and ident.estimate().gaps == 1
    with pytest.raises(ValueError, match="rows must have shape"):
        ident.update_rows(rows[:5, :-1])
    with pytest.raises(ValueError, match="chunk_s"):
        OnlineIdentifier(profile, layout.names, chunk_s=-1.0)
