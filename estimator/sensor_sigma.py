"""The sensors' calibration uncertainty carried into every batch parameter's σ.

A transducer's offset or gain error is not noise: it is the same in every sample of a run, so
no amount of data averages it away, and the batch's σ (from the residuals) cannot see it. Each
input channel has a 1σ offset and gain uncertainty: the calibration's own σ where the run was
recorded with a calibration in force (its header, daq/station), else the datasheet accuracy
class the profile declares (`accuracy`). The batch propagates them by sensitivities: the
model, as the batch chose it (shape and switch constants fixed), is refitted by plain WLS with
one channel's column moved by its σ (offset: + σ_offset; gain: + σ_gain·(x − pivot), the pivot
the true value a one-point calibration measured the offset at, daq.station.calfile; 0 for a
zero made at zero load and for the datasheet's class), and the change
of every parameter is that channel's share; the shares add in quadrature (independent sensors,
first order):

    σ_cal,k² = Σ_c [ (∂θ_k/∂o_c · σ_o,c)² + (∂θ_k/∂g_c · σ_g,c)² ]
    σ_k = √(σ_noise,k² + σ_cal,k²)

The sensitivities are those of the WLS estimate; where the printed estimate is the refined (IV)
one, they stand for it (the two estimate the same parameters from the same regressors).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from controller.plant.params import PlantParams
from daq.profile.schema import Profile
from estimator.models_lin import EDGES

#: Roles whose channels the batch's signals are built from (estimator.batch).
USED_ROLES = ("resolver", "potentiometer", "pressure_cap", "pressure_rod", "lvdt")
#: A parameter is called identifiable only if 3σ including calibration is within this fraction
#: of its size (the batch's own rule for a weak direction, estimator.batch.fit_model).
IDENTIFIABLE_3SIGMA = 0.05


@dataclass(frozen=True)
class ChannelUncertainty:
    offset: float  # 1σ, engineering units
    gain: float  # 1σ, relative
    source: str  # "calibration" or "datasheet"
    #: The true value the gain's error acts around (daq.station.calfile, "pivot").
    pivot: float = 0.0


def channel_uncertainty(
    profile: Profile, calibration: Mapping[str, Any] | None
) -> dict[str, ChannelUncertainty]:
    """Per input channel with any: the calibration's σ (run header's `calibration`) where it
    has the channel, else the profile's declared accuracy class."""
    cal = (calibration or {}).get("channels") or {}
    out: dict[str, ChannelUncertainty] = {}
    for ch in profile.inputs:
        c = cal.get(ch.name)
        if c is not None:
            u = ChannelUncertainty(
                float(c.get("sigma_offset", 0.0)), float(c.get("sigma_gain", 0.0)), "calibration",
                float(c.get("pivot", 0.0)),
            )  # fmt: skip
        elif ch.accuracy is not None:
            u = ChannelUncertainty(ch.accuracy.offset, ch.accuracy.gain, "datasheet")
        else:
            continue
        if u.offset > 0 or u.gain > 0:
            out[ch.name] = u
    return out


def used_channels(profile: Profile, params: PlantParams) -> list[str]:
    names = [c.name for c in profile.inputs if c.role in USED_ROLES and c.joint is not None]
    oil = profile.oil_temperature
    if params.oil is not None and oil is not None:
        names.append(oil.name)
    return names


def perturbed(
    columns: Mapping[str, np.ndarray], unc: Mapping[str, ChannelUncertainty], names: list[str]
) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """(label, columns with one channel moved by its σ) for every nonzero σ."""
    for name in names:
        u = unc.get(name)
        key = f"eng.{name}"
        if u is None or key not in columns:
            continue
        col = np.asarray(columns[key], dtype=float)
        if u.offset > 0:
            yield f"{name}.offset", {**columns, key: col + u.offset}
        if u.gain > 0:
            yield f"{name}.gain", {**columns, key: col + u.gain * (col - u.pivot)}


@dataclass
class Propagated:
    sigma: np.ndarray  # σ_cal per parameter, absolute
    shares: dict[str, np.ndarray]  # label → |Δθ| per parameter

    def largest(self, k: int, names: list[str]) -> str:
        """The largest share of parameter k in words ("p_cap_1.offset 62 %")."""
        if not self.shares or not self.sigma[k] > 0:
            return ""
        label, d = max(self.shares.items(), key=lambda kv: kv[1][k])
        return f"{label} {100.0 * d[k] ** 2 / self.sigma[k] ** 2:.0f} %"


def propagate(
    refit: Callable[[Mapping[str, np.ndarray]], np.ndarray | None],
    columns: Mapping[str, np.ndarray],
    unc: Mapping[str, ChannelUncertainty],
    names: list[str],
) -> Propagated | None:
    """σ_cal of every parameter by refitting once per channel σ; None if the base fit fails."""
    base = refit(columns)
    if base is None:
        return None
    var = np.zeros_like(base)
    shares: dict[str, np.ndarray] = {}
    for label, cols in perturbed(columns, unc, names):
        theta = refit(cols)
        if theta is None:
            continue
        d = np.abs(theta - base)
        shares[label] = d
        var += d * d
    return Propagated(np.sqrt(var), shares)


def null_position_shares(
    prop: Propagated,
    names: list[str],
    theta: np.ndarray,
    profile: Profile,
    unc: Mapping[str, ChannelUncertainty],
) -> None:
    """Widen the LVDT offset's share of every null flow Q0ₑ to at least |Cfₑ|·σ_offset.

    A null flow is a gain times a position on the spool's axis (estimator.models_lin:
    Q0ₑ = Cfₑ (b₀ − sₑ (d − a_L))), and that position is read in the LVDT's frame: an offset
    of the LVDT moves b₀, hence every Q0ₑ of its joint, by Cfₑ·offset. The refit above keeps
    the valve structure (b₀, lap) the batch chose and so misses most of it (measured on the
    realistic valve: 7.6 % of Q0+-1 for the 10 mV class where Cf·offset is 61 %). The larger
    of the two stands for the share (they are the same effect, not independent)."""
    idx = {nm: k for k, nm in enumerate(names)}
    for j, joint in enumerate(profile.joints):
        ch = profile.joint_channel(joint.name, "lvdt")
        u = None if ch is None else unc.get(ch.name)
        if ch is None or u is None or not u.offset > 0:
            continue
        label = f"{ch.name}.offset"
        share = prop.shares.setdefault(label, np.zeros_like(prop.sigma))
        for e in EDGES:
            q0, cf = idx.get(f"Q0{e}{j + 1}"), idx.get(f"Cf{e}{j + 1}")
            if q0 is not None and cf is not None:
                share[q0] = max(share[q0], abs(float(theta[cf])) * u.offset)
    prop.sigma = np.sqrt(sum(d * d for d in prop.shares.values()))


def combine(fit: Any, prop: Propagated, size: np.ndarray | None = None) -> list[str]:
    """Fold σ_cal into `fit` (estimator.batch.ModelFit): `sigma_pct_noise` keeps the σ from
    the noise, `sigma_pct` becomes the total; a parameter whose 3σ total exceeds
    `IDENTIFIABLE_3SIGMA` of its size (prior, else estimate) where the noise's alone does not,
    and one whose ±3σ total spans zero, are no longer identifiable. Returns the warnings."""
    theta = np.asarray(fit.theta, dtype=float)
    fit.sigma_pct_noise = np.asarray(fit.sigma_pct, dtype=float).copy()
    fit.sigma_cal = prop.sigma
    noise = fit.sigma_pct_noise / 100.0 * np.abs(theta)
    total = np.sqrt(noise**2 + prop.sigma**2)
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = 100.0 * total / np.abs(theta)
    fit.sigma_pct = np.where(np.isfinite(fit.sigma_pct_noise), pct, np.nan)
    ref = (
        np.abs(theta) if size is None else np.where(np.isfinite(size), np.abs(size), np.abs(theta))
    )
    # Flagged here where the sensors' share makes the parameter weak: where the noise alone
    # would, the batch's own verdict (fit_model) is already given. And, whatever the share,
    # wherever ±3σ spans zero: not even the sign is known (an LVDT null moves the null flows
    # by tens of %, a temperature coefficient the run's few kelvin hardly excite).
    limit = IDENTIFIABLE_3SIGMA * ref
    unsigned = fit.identifiable & (3.0 * total > np.abs(theta))
    weak = fit.identifiable & (3.0 * total > limit) & ~(3.0 * noise > limit) & ~unsigned

    def why(mask: np.ndarray) -> str:
        return "; ".join(
            f"{n}: σ {100 * total[i] / max(abs(theta[i]), 1e-300):.1f} % of which sensors "
            f"{100 * prop.sigma[i] / max(abs(theta[i]), 1e-300):.1f} % (largest "
            f"{prop.largest(i, fit.names)})"
            for i, n in enumerate(fit.names)
            if mask[i]
        )

    def listed(mask: np.ndarray) -> str:
        return ", ".join(n for n, w in zip(fit.names, mask, strict=True) if w)

    warnings = []
    if weak.any():
        warnings.append(
            f"{listed(weak)} not identifiable once the sensors' calibration uncertainty is "
            f"counted ({why(weak)}); calibrate the transducers (rigctl calibrate) and identify "
            "again"
        )
    if unsigned.any():
        warnings.append(
            f"{listed(unsigned)} not identifiable: ±3σ, the sensors' calibration uncertainty "
            f"counted, spans zero ({why(unsigned)}); calibrate the transducers (rigctl "
            "calibrate) or excite them more"
        )
    fit.identifiable = fit.identifiable & ~weak & ~unsigned
    return warnings


def pct_or_nan(x: float) -> float:
    return x if math.isfinite(x) else math.nan
