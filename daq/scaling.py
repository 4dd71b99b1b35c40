"""Counts ↔ converter units ↔ engineering units, as data (the profile) plus pure functions.

Converter counts are offset binary: count k stands for `min + k·lsb`, lsb = (max − min)/2**bits.
A resolver's counts wrap at its range; an A/D's saturate at 0 and 2**bits − 1 (a broken wire
reads at a rail, which the channel-range interlock then catches).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.optimize import brentq

from daq.profile.schema import (
    Channel,
    Converter,
    LinearScaling,
    PolynomialScaling,
    TableScaling,
)

ScalingSpec = LinearScaling | PolynomialScaling | TableScaling


def lsb(conv: Converter) -> float:
    return (conv.max - conv.min) / (1 << conv.bits)


def counts_to_units(conv: Converter, counts: Any) -> Any:
    """Code(s) → converter units; a float or an array, as given."""
    return conv.min + counts * lsb(conv)


def units_to_counts(conv: Converter, x: Any) -> Any:
    """Quantise like the converter does: round to the nearest code, then wrap or saturate.
    A float for a float, an array for an array (a recorded column of commands)."""
    full = 1 << conv.bits
    if np.ndim(x):
        k = np.floor((np.asarray(x, dtype=float) - conv.min) / lsb(conv) + 0.5)
        return np.mod(k, full) if conv.wraps else np.clip(k, 0.0, full - 1.0)
    c = math.floor((x - conv.min) / lsb(conv) + 0.5)
    if conv.wraps:
        return float(c % full)
    return float(min(max(c, 0), full - 1))


def to_eng(s: ScalingSpec, x: float) -> float:
    if isinstance(s, LinearScaling):
        return s.gain * x + s.offset
    if isinstance(s, PolynomialScaling):
        y = 0.0
        for c in reversed(s.coefficients):
            y = y * x + c
        return y
    xs = [p[0] for p in s.points]
    ys = [p[1] for p in s.points]
    return _interp(x, xs, ys)


def from_eng(s: ScalingSpec, y: float, lo: float = -1e9, hi: float = 1e9) -> float:
    """Inverse of `to_eng`. Polynomials are inverted numerically inside [lo, hi] (the converter
    range), where the profile guarantees them monotonic."""
    if isinstance(s, LinearScaling):
        return (y - s.offset) / s.gain
    if isinstance(s, PolynomialScaling):
        f_lo, f_hi = to_eng(s, lo) - y, to_eng(s, hi) - y
        if f_lo == 0.0:
            return lo
        if f_hi == 0.0:
            return hi
        if f_lo * f_hi > 0.0:  # outside the calibrated range: clamp to the nearer end
            return lo if abs(f_lo) < abs(f_hi) else hi
        return float(brentq(lambda x: to_eng(s, x) - y, lo, hi, xtol=1e-12))
    xs = [p[0] for p in s.points]
    ys = [p[1] for p in s.points]
    if ys[0] > ys[-1]:
        return _interp(y, ys[::-1], xs[::-1])
    return _interp(y, ys, xs)


def _interp(x: float, xs: list[float], ys: list[float]) -> float:
    """Piecewise-linear, extrapolating the end segments (a table must not clip silently)."""
    i = 1
    while i < len(xs) - 1 and x > xs[i]:
        i += 1
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def counts_to_eng(ch: Channel, counts: float) -> float:
    return to_eng(ch.scaling, counts_to_units(ch.converter, counts))


def eng_to_counts(ch: Channel, y: float) -> float:
    conv = ch.converter
    return units_to_counts(conv, from_eng(ch.scaling, y, conv.min, conv.max))


def eng_to_units(ch: Channel, y: float) -> float:
    """Engineering value → converter units (for outputs: the D/A voltage to write)."""
    return from_eng(ch.scaling, y, ch.converter.min, ch.converter.max)


class ChannelScaler:
    """Scales a whole row of input counts in place, without allocating, for the loop.

    Linear channels (almost all) are folded into one gain/offset per channel applied with two
    numpy calls; polynomial and table channels are evaluated one by one.

    A transducer calibration (`daq.station.calfile`) corrects the declared scaling after the
    fact, eng = (declared − offset) / gain per channel. For linear channels it is folded into
    the same gain and offset, so a calibrated cycle costs exactly what an uncalibrated one does,
    on every backend alike; the nonlinear ones apply it after their own evaluation.
    """

    def __init__(self, channels: list[Channel]) -> None:
        self.channels = channels
        n = len(channels)
        self.gain = np.zeros(n)
        self.offset = np.zeros(n)
        self.nonlinear = [
            i for i, c in enumerate(channels) if not isinstance(c.scaling, LinearScaling)
        ]
        for i, c in enumerate(channels):
            if isinstance(c.scaling, LinearScaling):
                q = lsb(c.converter)
                self.gain[i] = c.scaling.gain * q
                self.offset[i] = c.scaling.gain * c.converter.min + c.scaling.offset
        self._declared_gain = self.gain.copy()
        self._declared_offset = self.offset.copy()
        #: The correction in force (0 and 1: none).
        self.corr_offset = np.zeros(n)
        self.corr_inv_gain = np.ones(n)
        self.valid_min = np.array([c.valid_min for c in channels])
        self.valid_max = np.array([c.valid_max for c in channels])

    def set_correction(self, offset: np.ndarray, inv_gain: np.ndarray) -> None:
        """eng = (declared − offset) · inv_gain from now on, per channel (offset 0, inv_gain 1:
        the declared scaling). In place: the arrays the cycle uses are never replaced."""
        np.copyto(self.corr_offset, offset)
        np.copyto(self.corr_inv_gain, inv_gain)
        np.multiply(self._declared_gain, inv_gain, out=self.gain)
        np.subtract(self._declared_offset, offset, out=self.offset)
        np.multiply(self.offset, inv_gain, out=self.offset)

    def scale(self, counts: np.ndarray, eng_out: np.ndarray) -> None:
        np.multiply(counts, self.gain, out=eng_out)
        np.add(eng_out, self.offset, out=eng_out)
        for i in self.nonlinear:
            declared = counts_to_eng(self.channels[i], float(counts[i]))
            eng_out[i] = (declared - self.corr_offset[i]) * self.corr_inv_gain[i]
