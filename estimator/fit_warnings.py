"""What a batch fit says in words: joints that barely moved, residuals far from white, output
equations that disagree, parameters the run could not resolve (issue 13's promise: a number the
data cannot support is flagged, never printed as measured)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from estimator.wls import DISAGREEMENT_Z, ModelFit

#: A joint whose filtered angle spans less than this (peak to peak) over the used data "barely
#: moved": its inertial, friction and flow-gain parameters are not excited (issue 13, item 2).
STILL_DEG = 1.0


def still_joints(raw: np.ndarray, nj: int, blocks_: Sequence[slice]) -> list[tuple[int, float]]:
    """(joint index, peak-to-peak angle in degrees) of every joint that barely moved."""
    out = []
    for j in range(nj):
        spans = [np.ptp(raw[b, j]) for b in blocks_ if b.stop > b.start]
        ptp = float(np.degrees(max(spans, default=0.0)))
        if ptp < STILL_DEG:
            out.append((j, ptp))
    return out


#: Residuals whose correlation factor κ exceeds this are "far from white": after decimation
#: the noise part is white (κ ≈ 1 measured on the nominal simulator), so what remains is a
#: model that does not explain the data — a gain error, a wrong sensor, unmodelled dynamics.
KAPPA_MISMATCH = 10.0


def output_labels(fit: ModelFit, nj: int) -> list[str]:
    """Names of a model's output equations (reference models; 'equation k' otherwise)."""
    m = len(fit.output_correlation)
    if fit.name == "mechanical" and m == nj:
        return [f"torque {j + 1}" for j in range(nj)]
    if fit.name == "fluid" and m == 2 * nj:
        return [f"{side} flow {j + 1}" for j in range(nj) for side in ("cap", "rod")]
    return [f"equation {k + 1}" for k in range(m)]


def fit_warnings(fit: ModelFit, still: Sequence[tuple[int, float]], nj: int) -> list[str]:
    out = []
    labels = output_labels(fit, nj)
    bad = [
        f"{lab} (κ = {k:.0f})"
        for lab, k in zip(labels, fit.output_correlation, strict=True)
        if k > KAPPA_MISMATCH
    ]
    if bad:
        measured = [nm for nm, ok in zip(fit.names, fit.identifiable, strict=True) if ok]
        out.append(
            f"the {fit.name} model does not explain the data: residuals far from white on "
            f"{', '.join(bad)}; {', '.join(measured)} are conditional on the model (a sensor "
            "gain or offset error, or dynamics the model lacks, bias them beyond their σ)"
        )
    split = [
        f"{nm} ({z:.0f}σ)"
        for nm, z in zip(fit.names, fit.disagreement_z, strict=True)
        if z > DISAGREEMENT_Z
    ]
    if split:
        measured = [nm for nm, ok in zip(fit.names, fit.identifiable, strict=True) if ok]
        out.append(
            f"the {fit.name} model's output equations disagree on {', '.join(split)}: a "
            "sensor error (gain, offset) or a model error; its σ is widened by the "
            f"disagreement, and {', '.join(measured)} are conditional on the model"
        )
    flagged = [nm for nm, ok in zip(fit.names, fit.identifiable, strict=True) if not ok]
    if flagged:
        why = []
        if still:
            why.append(
                "; ".join(f"joint {j + 1} barely moved ({p:.2f}° peak to peak)" for j, p in still)
            )
        if fit.unidentifiable:
            why.append("weakly excited directions: " + "; ".join(fit.unidentifiable))
        out.append(
            f"{', '.join(flagged)} {'is' if len(flagged) == 1 else 'are'} not identifiable from "
            f"this run ({'; '.join(why) or 'not excited'}): fixed at the profile's value, "
            "not measured"
        )
    return out
