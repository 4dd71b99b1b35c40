"""What the calibration procedures compute from the rows they recorded (pure functions).

Every estimate comes with its 1σ from the data (batch means: the window cut into blocks, the
spread of the block means, so slow correlated noise is not mistaken for white) and a residual
that says how well the data fit what the procedure assumes; the procedure refuses to apply a
result whose residual exceeds the sensor's declared accuracy (daq.profile.schema.Accuracy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BLOCKS = 10


@dataclass(frozen=True)
class Mean:
    value: float
    sigma: float  # 1σ of the mean (batch means)
    #: |first half − second half| of the window: how settled it was.
    drift: float
    n: int


def window_mean(x: np.ndarray) -> Mean:
    """Mean of a settled window with its batch-means σ and its settling drift."""
    x = np.asarray(x, dtype=float)
    n = len(x)
    if n < 2 * BLOCKS:
        raise ValueError(f"a window of {n} samples is too short (at least {2 * BLOCKS})")
    blocks = x[: n - n % BLOCKS].reshape(BLOCKS, -1).mean(axis=1)
    sigma = float(blocks.std(ddof=1) / math.sqrt(BLOCKS))
    half = n // 2
    return Mean(float(x.mean()), sigma, float(abs(x[:half].mean() - x[half:].mean())), n)


@dataclass(frozen=True)
class TwoPoint:
    """A linear sensor from two known points: declared = gain·true + offset."""

    offset: float
    gain: float
    sigma_offset: float
    sigma_gain: float


def two_point(low: Mean, high: Mean, true_low: float, true_high: float) -> TwoPoint:
    """Offset and gain from the declared readings at two known true values (the MTS zero and
    span, or a cylinder's two end stops), σ propagated from the two means."""
    span = true_high - true_low
    gain = (high.value - low.value) / span
    offset = low.value - gain * true_low
    sg = math.hypot(high.sigma, low.sigma) / abs(span)
    # offset = (h·tl − l·th)/(tl − th): ∂/∂h = tl/(tl−th)·…, ∂/∂l = −th/(tl−th)
    so = math.hypot(true_low * high.sigma, true_high * low.sigma) / abs(span)
    return TwoPoint(offset, gain, so, sg)


def correct(declared: np.ndarray, offset: float, gain: float) -> np.ndarray:
    return (np.asarray(declared) - offset) / gain
