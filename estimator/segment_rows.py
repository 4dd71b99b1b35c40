"""The rows of a recording that only some identification equations may use.

An experiment segment may say `identify = "fluid"` (controller.experiment): its rows feed the
chambers' flow balances only. The bulk experiment's valve sines at the stroke ends
(estimator.bulk_experiment) are such segments: a 6 Hz sine there moves each joint a fraction
of a degree with accelerations the rest of the experiment never reaches, which is what the
compressibility columns need, but the mechanical equations' stiction bumps and 20 Hz velocity
filter do not describe that motion — on the realistic plant those rows took M1 and R12 from
within 2 % to σ of 40–70 %.

The service records each experiment's definition (event `experiment`) and every segment
boundary (event `segment`, at the row where the runner entered it; daq.service.loop_supervisor),
so the rows are found from the recording alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np


class FluidSpans:
    """The [seq from, seq to) spans of the segments marked `identify = "fluid"`, from the
    service's events as they come (a recording's, or telemetry's live): a span opens at the row
    where the runner entered such a segment and closes where the next phase (an approach move,
    the next segment) began, the experiment ended or the state changed; an open one runs to ∞."""

    def __init__(self) -> None:
        self.spans: list[tuple[int, float]] = []
        self._fluid: set[str] = set()
        self._open = False

    def feed(self, ev: Mapping[str, Any]) -> None:
        kind = ev.get("kind")
        at = ev.get("seq")
        if self._open and kind in ("segment", "experiment_done", "state"):
            a, _ = self.spans[-1]
            self.spans[-1] = (a, float(at) if isinstance(at, int | float) else math.inf)
            self._open = False
        if kind == "experiment":
            segs = (ev.get("experiment") or {}).get("segments") or []
            self._fluid = {str(s.get("name")) for s in segs if s.get("identify") == "fluid"}
        elif kind == "segment" and ev.get("name") in self._fluid and isinstance(at, int | float):
            self.spans.append((int(at), math.inf))
            self._open = True


def fluid_only_spans(events: Iterable[Mapping[str, Any]]) -> list[tuple[int, float]]:
    """`FluidSpans` of a whole list of events (a recording's)."""
    spans = FluidSpans()
    for ev in events:
        spans.feed(ev)
    return spans.spans


def fluid_only_rows(events: Iterable[Mapping[str, Any]], seq: np.ndarray) -> list[slice]:
    """The `fluid_only_spans` as row slices of the rows whose `seq` column is `seq`."""
    seq = np.asarray(seq)
    out = []
    for a, b in fluid_only_spans(events):
        i, j = np.searchsorted(seq, [a, b])
        if j > i:
            out.append(slice(int(i), int(j)))
    return out


def in_spans(seq: np.ndarray, spans: Sequence[tuple[int, float]]) -> np.ndarray:
    """Whether each seq lies in one of the [from, to) spans (sorted, not overlapping)."""
    seq = np.asarray(seq, dtype=float)
    if not spans:
        return np.zeros(seq.shape, dtype=bool)
    lo = np.array([a for a, _ in spans], dtype=float)
    hi = np.array([b for _, b in spans], dtype=float)
    k = np.searchsorted(lo, seq, side="right") - 1
    return (k >= 0) & (seq < hi[np.maximum(k, 0)])
