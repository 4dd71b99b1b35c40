"""Causal signal conditioning: low-pass filtered values and derivatives from measured channels.

One linear-phase FIR low-pass `h` (windowed sinc, `taps` long, odd) is combined with central
differences into three kernels of equal length `L = taps + 2` and equal delay `D = (taps+1)/2`:

    value:   [0, h, 0]
    first:   h * [1, 0, −1] / (2Δt)
    second:  h * [1, −2, 1] / Δt²

so that at sample k the conditioner returns x, ẋ, ẍ of the *same* instant k − D. Why an FIR:
its phase is an exact delay at every frequency, so a static nonlinear function of delayed
signals is the delayed function — the regression `y = Φ(q, q̇, …)θ` still holds between
conditioned signals up to the passband ripple (Gautier's parallel filtering, DESIGN §2.3). A
causal IIR (Butterworth) delays different frequencies differently, which breaks that for the
nonlinear columns.

Terms that are static functions of the raw signals (τ = r(q)(A⁺p⁺ − A⁻p⁻), the valve terms
h(p)·u) are better evaluated on the raw samples and *then* filtered with the same value kernel
(`Conditioner.filter_values`): filtering commutes exactly with a linear-in-θ regression, so that
part of the regression is exact, not approximate.

Streaming (`push`) and batch (`batch`) run the same compiled kernel, so they agree bit for bit.
Nothing is allocated per sample: state is a circular buffer of the last L rows.
"""

from __future__ import annotations

import numba
import numpy as np
from scipy.signal import firwin


def design_kernels(fs: float, cutoff_hz: float, taps: int) -> np.ndarray:
    """The (3, taps + 2) value / first-derivative / second-derivative kernels."""
    if taps < 3 or taps % 2 == 0:
        raise ValueError(f"taps must be odd and ≥ 3, got {taps}")
    if not 0.0 < cutoff_hz < fs / 2.0:
        raise ValueError(f"cutoff_hz must be in (0, fs/2 = {fs / 2.0}), got {cutoff_hz}")
    dt = 1.0 / fs
    h = firwin(taps, cutoff_hz, fs=fs, window="hamming")
    K = np.zeros((3, taps + 2))
    K[0, 1:-1] = h
    K[1] = np.convolve(h, [1.0, 0.0, -1.0]) / (2.0 * dt)
    K[2] = np.convolve(h, [1.0, -2.0, 1.0]) / (dt * dt)
    return K


@numba.njit(cache=True)
def _fir_block(
    buf: np.ndarray, state: np.ndarray, X: np.ndarray, K: np.ndarray, out: np.ndarray
) -> int:
    """Push rows X (N, w) through kernels K (nk, L); out (N, nk, w).

    buf (L, w) is the circular history, state = [write position, samples since reset].
    Rows before the history is full are written as NaN. Returns the index of the first row
    with a valid output (N if none).
    """
    N, w = X.shape
    nk, L = K.shape
    pos = int(state[0])
    count = int(state[1])
    first = N
    for s in range(N):
        for c in range(w):
            buf[pos, c] = X[s, c]
        count += 1
        if count >= L:
            if first == N:
                first = s
            # Columns innermost: buf rows and out rows are contiguous, so the loop vectorises
            # (issue 13: throughput). Each sum still runs over j in the same order.
            for k in range(nk):
                for c in range(w):
                    out[s, k, c] = 0.0
                idx = pos
                for j in range(L):
                    kj = K[k, j]
                    for c in range(w):
                        out[s, k, c] += kj * buf[idx, c]
                    idx -= 1
                    if idx < 0:
                        idx = L - 1
        else:
            for k in range(nk):
                for c in range(w):
                    out[s, k, c] = np.nan
        pos += 1
        if pos == L:
            pos = 0
    state[0] = pos
    state[1] = count
    return first


class Conditioner:
    """Causal FIR conditioning of `width` signals; `orders` = how many kernels (1–3) to apply.

    `push(X, out)` for streaming blocks (including one row), `batch(X)` for a whole record
    from a fresh state; both give identical numbers.
    """

    def __init__(self, width: int, fs: float, cutoff_hz: float, taps: int, orders: int = 3) -> None:
        if width < 1:
            raise ValueError(f"width must be ≥ 1, got {width}")
        if orders not in (1, 2, 3):
            raise ValueError(f"orders must be 1, 2 or 3, got {orders}")
        self.width = width
        self.fs = fs
        self.cutoff_hz = cutoff_hz
        self.taps = taps
        self.kernels = np.ascontiguousarray(design_kernels(fs, cutoff_hz, taps)[:orders])
        self.length = taps + 2
        #: Samples between a raw sample and the conditioned instant it is reported at.
        self.delay = (taps + 1) // 2
        self._buf = np.zeros((self.length, width))
        self._state = np.zeros(2)

    def reset(self) -> None:
        """Forget the history (after a gap in the data): the next L − 1 outputs are NaN."""
        self._buf[:] = 0.0
        self._state[:] = 0.0

    @property
    def ready(self) -> bool:
        return self._state[1] >= self.length

    def push(self, X: np.ndarray, out: np.ndarray) -> int:
        """X (N, width) raw rows → out (N, orders, width). Returns the first valid row index."""
        if X.ndim != 2 or X.shape[1] != self.width:
            raise ValueError(f"expected rows of width {self.width}, got shape {X.shape}")
        if out.shape != (X.shape[0], self.kernels.shape[0], self.width):
            raise ValueError(
                f"out must have shape {(X.shape[0], self.kernels.shape[0], self.width)}"
            )
        return int(_fir_block(self._buf, self._state, X, self.kernels, out))

    def batch(self, X: np.ndarray) -> np.ndarray:
        """Whole record from a fresh state (this conditioner's own state is left untouched)."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        fresh = Conditioner(self.width, self.fs, self.cutoff_hz, self.taps, self.kernels.shape[0])
        out = np.empty((X.shape[0], self.kernels.shape[0], self.width))
        fresh.push(X, out)
        return out
