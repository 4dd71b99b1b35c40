"""A run whose oil warmed too much for its parameters to be referred to one temperature.

The real-rig family refers its temperature-dependent columns to the oil law's reference
temperature (controller.plant.oil, docs/estimator.md "Temperature"): viscous friction ×
ν(T)/ν_ref, laminar leakage × ν_ref/ν(T), the compliances × e^(k (T − T_ref)), the valve null
shifted by β (T − T_ref). Those laws are the datasheet's and the family's, not the rig's: the
oil batch is not its datasheet (3 % in ν(24 °C)/ν₄₀ on the realistic plant), a piston seal's
viscous friction is not all an oil film (the simulator keeps its part constant, the family
scales every Fv± with ν). Over a run that spans a few kelvin what the laws get wrong is a near
constant the fit absorbs; over a run in which the oil warms by ten kelvin it drifts with the
temperature, the fit mistakes the drift for its parameters, and their σ (from the residual
scatter of the same fit) does not see it. Measured on the realistic plant
(`bench/identification_accuracy.py --cases realistic --calibrate`, the oil made to warm faster
by the simulator's heater, docs/estimator.md "Oil that warms during the run"), unflagged numbers
outside their ±3σ: over 3.9–4.0 K (the profile's cold start) 1 of 133 parameter-runs (Qt⁻⁻₂ at
3.04σ: the null coefficients' low bias), over 5.2–5.3 K none of 3 seeds' (the worst at 2.9σ),
over 6.8–6.9 K one or two per run (Fc⁻₁ 3.0–3.2σ, Qt⁻⁻₁ 3.0σ), over 10 K five or six (V0⁻/b₁ −6
… −10 % at 3.0–5.0σ, Fc⁻₁, Cf⁻⁺₂, Qt⁻⁻₁; which law the fluid side's drift comes from is not
isolated). So past `OIL_SPAN_LIMIT_K` the batch flags every parameter of the families that refer
to the oil's temperature and says why in words: the rig engineer lets the oil settle (warm-up at
the test temperature, as a test controller's station set-up does) and identifies again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from estimator.chain import TEMP_SLOT
from estimator.models import LinearModel

#: Largest span (K) of the oil temperature over the data used for which the referred families'
#: printed numbers are verified within their ±3σ on the realistic plant (module docstring:
#: held to 5.3 K, broken from 6.8 K).
OIL_SPAN_LIMIT_K = 5.0


class _Flaggable(Protocol):
    identifiable: np.ndarray


def used_temperatures(raw: np.ndarray, used: np.ndarray, nj: int) -> np.ndarray:
    """The oil temperature readings (°C) of the rows `used` (`raw`'s temperature slot), the
    missing ones left out."""
    t = raw[used, TEMP_SLOT * nj]
    return t[np.isfinite(t)]


def oil_span_warning(
    raw: np.ndarray,
    used: np.ndarray,
    nj: int,
    models: Sequence[LinearModel],
    fits: Sequence[_Flaggable],
    channel: str,
) -> list[str]:
    """Flag every parameter of each model that refers to the oil's temperature (`models[k]
    .referred`, fitted as `fits[k]`) when the measured oil (`raw`'s temperature slot over the
    rows `used`) spans more than `OIL_SPAN_LIMIT_K`; the warning naming the span, the limit and
    what to do, or nothing."""
    t = used_temperatures(raw, used, nj)
    referred = [(m, f) for m, f in zip(models, fits, strict=True) if m.referred]
    if t.size == 0 or not referred:
        return []
    lo, hi = float(np.min(t)), float(np.max(t))
    if hi - lo <= OIL_SPAN_LIMIT_K:
        return []
    for _, fit in referred:
        fit.identifiable[:] = False
    names = ", ".join(f"'{m.name}'" for m, _ in referred)
    return [
        f"the oil warmed by {hi - lo:.1f} K in the data used ({lo:.1f}–{hi:.1f} °C, "
        f"'{channel}'), more than the {OIL_SPAN_LIMIT_K:g} K over which the referral to the "
        f"oil law's temperature is verified: every parameter of {names} is flagged (the laws' "
        "error drifts with the temperature and biases them beyond their σ); let the oil settle "
        "at the test temperature and identify again"
    ]
