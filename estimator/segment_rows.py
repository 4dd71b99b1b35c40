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


def fluid_only_spans(events: Iterable[Mapping[str, Any]]) -> list[tuple[int, float]]:
    """[seq from, seq to) of the segments marked `identify = "fluid"`: from the row where the
    runner entered one to the row where the next phase (an approach move, the next segment)
    began, the experiment ended or the state changed (to ∞ if the recording ends first)."""
    fluid: set[str] = set()
    spans: list[tuple[int, float]] = []
    start: int | None = None
    for ev in events:
        kind = ev.get("kind")
        at = ev.get("seq")
        if start is not None and kind in ("segment", "experiment_done", "state"):
            spans.append((start, float(at) if isinstance(at, int | float) else math.inf))
            start = None
        if kind == "experiment":
            segs = (ev.get("experiment") or {}).get("segments") or []
            fluid = {str(s.get("name")) for s in segs if s.get("identify") == "fluid"}
        elif kind == "segment" and ev.get("name") in fluid and isinstance(at, int | float):
            start = int(at)
    if start is not None:
        spans.append((start, math.inf))
    return spans


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
