"""Which telemetry rows the estimator may use, where the data breaks, and the account of both.

The regressors differentiate measured signals, so they need rows that are (a) the experiment
— the loop RUNNING, no latched fault, no interlock flag raised in that cycle (a broken wire
trips CHANNEL_RANGE: its value is not a measurement) — and (b) evenly spaced in *measured*
time. The loop skips deadlines it missed (`daq/loop/cycle.py`: `t` jumps while `seq` does not) and
the recorder or telemetry may lose rows (`seq` jumps); in real time the simulated and the real
plant move on during a skipped deadline. Either way a derivative across the jump is wrong, so
a jump ends a *block*: the filters restart after it (online) or each block is filtered on its
own (batch), and nothing crosses it (issue 13, item 1; issue 19, item 4).

`classify(...)` does this per row, vectorised; `DataUse` counts what was left out and why, for
tables, reports and warnings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np

#: `state` column value of RUNNING (daq.loop.states.State.RUNNING; fixed by the sample-row
#: contract).
STATE_RUNNING = 2
#: `flags` bit that is not an interlock (a valve command clamped to its amplitude limit:
#: daq.loop.interlocks.CLAMP_FLAG). Every other bit is a trip in that cycle.
CLAMP_FLAG = 1 << 15
#: A step in `t` further than this fraction of a period from one period is a break.
GAP_TOLERANCE = 0.5


@dataclass
class DataUse:
    """How many rows were seen, used and left out, by reason (rows, seconds of rig time)."""

    rows: int = 0
    used: int = 0
    not_running: int = 0
    faulted: int = 0
    non_finite: int = 0
    #: Breaks in the data: skipped loop deadlines (t jumps), lost rows (seq jumps), restarts.
    gaps: int = 0
    #: Rig time missing in those gaps (s).
    gap_s: float = 0.0
    #: Rows that were usable but sat in a block too short to filter (batch) or in the filters'
    #: start-up after a break (online), so they gave no regression equation.
    short_block: int = 0
    #: Whether the rows came from a virtual-time run (None: not known).
    virtual_time: bool | None = None

    @property
    def dropped(self) -> int:
        return self.not_running + self.faulted + self.non_finite + self.short_block

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["dropped"] = self.dropped
        return d

    def summary(self, period: float) -> str:
        """One line: what was used, what was dropped and why, real or virtual time."""
        clock = {None: "", True: "virtual time; ", False: "real time; "}[self.virtual_time]
        parts = [f"{clock}used {self.used} of {self.rows} rows ({self.used * period:.1f} s)"]
        why = [
            (self.not_running, "outside RUNNING (or the segments given)"),
            (self.faulted, "with a fault or interlock flag"),
            (self.non_finite, "with a non-finite value"),
            (self.short_block, "in filter start-up after a break or in too short a block"),
        ]
        dropped = [f"{n} {what}" for n, what in why if n]
        if dropped:
            parts.append("dropped " + ", ".join(dropped))
        if self.gaps:
            parts.append(f"{self.gaps} gap(s) in time, {self.gap_s:.3f} s missing")
        return "; ".join(parts)

    def warnings(self, period: float) -> list[str]:
        """Sentences for the `warnings` list: only what a user must know about the data."""
        out = []
        if self.gaps:
            out.append(
                f"the data has {self.gaps} gap(s) in time ({self.gap_s:.3f} s missing: skipped "
                "loop cycles, stalls or lost rows); the filters restarted after each"
            )
        bad = self.faulted + self.non_finite
        if bad:
            out.append(
                f"{bad} rows ({bad * period:.2f} s) with a fault, an interlock flag or a "
                "non-finite value were left out"
            )
        if self.rows and self.dropped > 0.1 * self.rows:
            out.append(f"{self.dropped} of {self.rows} rows were not used ({self.summary(period)})")
        return out


@dataclass
class RowClasses:
    """Per row: `good` (usable), `breaks` (a break before this row: filters restart)."""

    good: np.ndarray
    breaks: np.ndarray
    not_running: int
    faulted: int
    gaps: int
    gap_s: float


def classify(
    columns: Mapping[str, np.ndarray],
    period: float,
    *,
    running_only: bool,
    previous: tuple[float, float] | None = None,
) -> RowClasses:
    """Classify rows from the header columns present (`t`, `seq`, `state`, `fault`, `flags`).

    `previous` = (t, seq) of the row before these (streaming), NaN where unknown. A row after a
    break or after a left-out row starts a new block (`breaks`)."""
    t = _col(columns, "t")
    n = len(t) if t is not None else len(next(iter(columns.values())))
    good = np.ones(n, dtype=bool)
    state = _col(columns, "state")
    not_running = 0
    if running_only and state is not None:
        run = state == STATE_RUNNING
        not_running = int(n - np.count_nonzero(run))
        good &= run
    faulted_rows = np.zeros(n, dtype=bool)
    fault = _col(columns, "fault")
    if fault is not None:
        faulted_rows |= fault != 0
    flags = _col(columns, "flags")
    if flags is not None:
        f = np.nan_to_num(flags).astype(np.int64)
        faulted_rows |= (f & ~CLAMP_FLAG) != 0
    faulted = int(np.count_nonzero(faulted_rows & good))
    good &= ~faulted_rows
    breaks = np.zeros(n, dtype=bool)
    gap_s = 0.0
    gaps = 0
    p_t, p_seq = previous if previous is not None else (np.nan, np.nan)
    seq = _col(columns, "seq")
    if t is not None:
        dt = np.diff(t, prepend=p_t)
        jump_t = np.abs(dt - period) > GAP_TOLERANCE * period
        jump_t[0] &= np.isfinite(p_t)
        breaks |= jump_t
        gap_s += float(np.sum(np.clip(dt[jump_t] - period, 0.0, None)))
    if seq is not None:
        ds = np.diff(seq, prepend=p_seq)
        jump_s = ds != 1
        jump_s[0] &= np.isfinite(p_seq)
        if t is None:
            gap_s += float(np.sum(np.clip(ds[jump_s] - 1, 0, None))) * period
        breaks |= jump_s
    gaps = int(np.count_nonzero(breaks))
    # A left-out row also ends a block: the next good row starts afresh.
    after_bad = np.zeros(n, dtype=bool)
    after_bad[1:] = ~good[:-1]
    breaks |= after_bad & good
    return RowClasses(good, breaks, not_running, faulted, gaps, gap_s)


def classify_stream(
    rows: np.ndarray,
    header: Mapping[str, int],
    period: float,
    data: DataUse,
    *,
    running_only: bool,
    previous: tuple[float, float],
) -> tuple[RowClasses, tuple[float, float]]:
    """`classify` for a streaming estimator's telemetry rows (header column → index in a row):
    the classes, with `data`'s counters updated, and the (t, seq) of the last row — the next
    call's `previous`."""
    cls = classify(
        {c: rows[:, i] for c, i in header.items()},
        period,
        running_only=running_only,
        previous=previous,
    )
    last = (
        float(rows[-1, header["t"]]) if "t" in header else np.nan,
        float(rows[-1, header["seq"]]) if "seq" in header else np.nan,
    )
    data.rows += rows.shape[0]
    data.not_running += cls.not_running
    data.faulted += cls.faulted
    data.gaps += cls.gaps
    data.gap_s += cls.gap_s
    return cls, last


def blocks(good: np.ndarray, breaks: np.ndarray) -> list[slice]:
    """Maximal [i, j) of good rows with no break inside (a break at i itself is allowed).

    Vectorised over the rows (no per-row Python): each block ends at the next block's start or
    at the first left-out row after its start, whichever comes first."""
    good = np.asarray(good, dtype=bool)
    n = len(good)
    if n == 0:
        return []
    prev_bad = np.ones(n, dtype=bool)
    prev_bad[1:] = ~good[:-1]
    starts = np.flatnonzero(good & (np.asarray(breaks, dtype=bool) | prev_bad))
    if starts.size == 0:
        return []
    bad = np.flatnonzero(~good)
    first_bad = np.append(bad, n)[np.searchsorted(bad, starts)]
    next_start = np.append(starts[1:], n)
    ends = np.minimum(first_bad, next_start)
    return [slice(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]


def _col(columns: Mapping[str, np.ndarray], name: str) -> np.ndarray | None:
    c = columns.get(name)
    return None if c is None else np.asarray(c, dtype=float)
