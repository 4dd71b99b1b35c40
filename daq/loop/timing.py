"""Loop timing statistics: preallocated 1 µs histograms, overrun counters, percentiles outside.

The loop calls `record()` once per cycle: two integer divisions and two increments into arrays
made here, nothing allocated. Percentiles and the status dictionary are computed by other threads
(`snapshot()`), from the histograms as they stand: a cycle recorded while a snapshot is taken
may or may not be counted, which is fine for statistics and needs no lock.

Histogram bins are 1 µs wide, like `cyclictest -h`, so that the benchmark compares like with
like; values beyond the last bin land in an overflow bin and still count for the maximum.
"""

from __future__ import annotations

import numpy as np

#: Histogram range in µs (values above land in the overflow bin).
DEFAULT_BINS_US = 20_000


def percentile_from_histogram(hist: np.ndarray, q: float) -> float:
    """The q-th percentile (0–100) of a 1-µs-bin histogram, in µs (upper edge of its bin)."""
    total = int(hist.sum())
    if total == 0:
        return float("nan")
    target = q / 100.0 * total
    cum = np.cumsum(hist)
    i = int(np.searchsorted(cum, target, side="left"))
    return float(min(i, len(hist) - 1))


class LoopTiming:
    def __init__(self, period_s: float, bins_us: int = DEFAULT_BINS_US) -> None:
        self.period_ns = round(period_s * 1e9)
        self.bins = bins_us
        self.wake_hist = np.zeros(bins_us + 1, dtype=np.int64)
        self.compute_hist = np.zeros(bins_us + 1, dtype=np.int64)
        # The backend's work between cycles (the simulated plant's step): real time only.
        self.between_hist = np.zeros(bins_us + 1, dtype=np.int64)
        self.cycles = 0
        self.overruns = 0  # cycles that finished after the next deadline
        self.consecutive_overruns = 0
        self.max_consecutive_overruns = 0
        self.skipped = 0  # deadlines dropped so that the loop never bunches cycles
        self.wake_max_ns = 0
        self.compute_max_ns = 0
        self.between_max_ns = 0

    def record(self, wake_ns: int, compute_ns: int) -> None:
        """One executed cycle's wake-up latency and compute time, in ns."""
        self.cycles += 1
        w = wake_ns // 1000
        if w < 0:
            w = 0
        self.wake_hist[w if w < self.bins else self.bins] += 1
        c = compute_ns // 1000
        self.compute_hist[c if c < self.bins else self.bins] += 1
        if wake_ns > self.wake_max_ns:
            self.wake_max_ns = wake_ns
        if compute_ns > self.compute_max_ns:
            self.compute_max_ns = compute_ns

    def record_between(self, between_ns: int) -> None:
        """The time the backend's `between_cycles` took after a cycle, in ns."""
        b = between_ns // 1000
        self.between_hist[b if b < self.bins else self.bins] += 1
        if between_ns > self.between_max_ns:
            self.between_max_ns = between_ns

    def record_overrun(self, skipped: int) -> int:
        """The cycle just finished late and `skipped` deadlines were dropped; returns the run
        of consecutive overruns."""
        self.overruns += 1
        self.skipped += skipped
        self.consecutive_overruns += 1
        if self.consecutive_overruns > self.max_consecutive_overruns:
            self.max_consecutive_overruns = self.consecutive_overruns
        return self.consecutive_overruns

    def record_on_time(self) -> None:
        self.consecutive_overruns = 0

    def snapshot(self) -> dict[str, object]:
        """Status dictionary (µs). Called off the real-time thread."""
        wake = self.wake_hist.copy()
        comp = self.compute_hist.copy()
        between = self.between_hist.copy()
        return {
            "cycles": self.cycles,
            "period_us": self.period_ns / 1000.0,
            "overruns": self.overruns,
            "consecutive_overruns": self.consecutive_overruns,
            "max_consecutive_overruns": self.max_consecutive_overruns,
            "skipped_cycles": self.skipped,
            "wake_latency_us": _summary(wake, self.wake_max_ns),
            "compute_time_us": _summary(comp, self.compute_max_ns),
            "between_cycles_us": _summary(between, self.between_max_ns),
        }


def _summary(hist: np.ndarray, max_ns: int) -> dict[str, float]:
    # One cumulative sum for all three percentiles: this runs on the telemetry/command threads
    # and holds the GIL the loop may be waiting for, so keep it short.
    cum = np.cumsum(hist)
    total = int(cum[-1])
    out = {"max": max_ns / 1000.0}
    for name, q in (("p50", 50.0), ("p99", 99.0), ("p99.9", 99.9)):
        if total == 0:
            out[name] = float("nan")
        else:
            i = int(np.searchsorted(cum, q / 100.0 * total, side="left"))
            out[name] = float(min(i, len(hist) - 1))
    return {k: out[k] for k in ("p50", "p99", "p99.9", "max")}
