"""The Lin fluid regressor (estimator.models_lin) as one compiled pass over the samples.

Why: the batch evaluates this regressor for every candidate valve null and lap of the switch
search (three times each: conditioned, static and raw signals, estimator.observation) and six
times per iteration of the output-error refinement (the predicted pressure rates,
estimator.refine); written with NumPy it builds a dozen (N, 2n, ·) temporaries per call, and
it was the largest single cost of a realistic batch.

Same numbers as the NumPy form `models_lin.lin_fluid_regressor_reference`, which stays as
the definition and the tests' oracle (tests/estimator/test_lin_compiled.py): every product
and sum here is the one written there, in the same order, and the transcendental parts (the
air's compliance g(p), the oil law's factors) are still computed by NumPy and passed in, so
the two agree to the bit (IEEE arithmetic is exact per operation and `fastmath` is off).
"""

from __future__ import annotations

import math

import numpy as np

from controller.plant.jit import njit


@njit
def lin_fluid_rows(
    ps: float,
    acap: np.ndarray,
    arod: np.ndarray,
    v0: np.ndarray,
    stroke: np.ndarray,
    b0: np.ndarray,
    lap: np.ndarray,
    s: np.ndarray,
    sd: np.ndarray,
    u: np.ndarray,
    pc: np.ndarray,
    pr: np.ndarray,
    pdc: np.ndarray,
    pdr: np.ndarray,
    compl: np.ndarray,
    visc: np.ndarray,
    g_cap: np.ndarray,
    g_rod: np.ndarray,
    dtemp: np.ndarray,
    shift: bool,
    per_joint: int,
    phi: np.ndarray,
    y: np.ndarray,
) -> None:
    """Fill `phi` (N, 2n, 2 + per_joint·n, zeroed) and `y` (N, 2n): the module doc of
    estimator.models_lin, row for row as `lin_fluid_regressor_reference` writes them."""
    n = s.shape[1]
    g = np.zeros(4)
    for k in range(s.shape[0]):
        for i in range(n):
            half = 0.5 * stroke[i]
            rc = 2 * i
            rr = 2 * i + 1
            c = 1 + per_joint * i
            uk = u[k, i]
            # The reference regressor's per-unit-opening columns g_e (controller.plant
            # .regressors: the edges u = +1 opens, then −(those u = −1 opens)): P→cap and
            # cap→T in the cap row, P→rod and rod→T (negative) in the rod row.
            g[0] = math.sqrt(max(ps - pc[k, i], 0.0))
            g[1] = math.sqrt(max(pc[k, i], 0.0))
            g[2] = -math.sqrt(max(pr[k, i], 0.0))
            g[3] = -math.sqrt(max(ps - pr[k, i], 0.0))
            w = uk + b0[i]
            for e in range(4):
                row = rc if e < 2 else rr
                sign = 1.0 if e % 2 == 0 else -1.0  # EDGE_SIGNS: ++, −+ open with u > 0
                if sign * w > lap[i]:
                    phi[k, row, c + 8 + e] = g[e]
                    phi[k, row, c + e] = g[e] * uk
                    if shift:
                        phi[k, row, c + 16 + e] = g[e] * dtemp[k, i]
                else:
                    phi[k, row, c + 12 + e] = g[e]
            swept_cap = -pdc[k, i] * (half + s[k, i]) * acap[i]
            swept_rod = -pdr[k, i] * (half - s[k, i]) * arod[i]
            phi[k, rc, 0] = swept_cap * compl[k, i]
            phi[k, rr, 0] = swept_rod * compl[k, i]
            phi[k, rc, c + 4] = -pdc[k, i] * compl[k, i]
            phi[k, rr, c + 5] = -pdr[k, i] * compl[k, i]
            leak = (pc[k, i] - pr[k, i]) / visc[k, i]
            phi[k, rc, c + 6] = -leak
            phi[k, rr, c + 6] = leak
            phi[k, rc, c + 7] = -pc[k, i] / visc[k, i]
            phi[k, rr, c + 7] = -pr[k, i] / visc[k, i]
            last = phi.shape[2] - 1
            phi[k, rc, last] = (swept_cap - pdc[k, i] * v0[i]) * g_cap[k, i]
            phi[k, rr, last] = (swept_rod - pdr[k, i] * v0[i]) * g_rod[k, i]
            y[k, rc] = acap[i] * sd[k, i]
            y[k, rr] = -arod[i] * sd[k, i]
