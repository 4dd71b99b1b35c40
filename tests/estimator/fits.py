"""A `ModelFit` built by hand, for tests of what reads one (warnings, the batch's choices)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from estimator.wls import ModelFit


def model_fit(
    name: str = "mechanical",
    names: Sequence[str] = ("M1", "B1"),
    *,
    theta: Sequence[float] | None = None,
    identifiable: Sequence[bool] | None = None,
    sigma_pct: Sequence[float] | None = None,
    kappa: Sequence[float] = (1.0,),
    z: Sequence[float] | None = None,
    unidentifiable: Sequence[str] = (),
) -> ModelFit:
    """Unit θ, σ and covariance unless given; `kappa` one per output equation."""
    n = len(names)
    th = np.ones(n) if theta is None else np.array(theta, dtype=float)
    return ModelFit(
        name=name,
        names=list(names),
        theta_ls=th.copy(),
        theta=th,
        cov=np.eye(n),
        sigma_pct=np.ones(n) if sigma_pct is None else np.array(sigma_pct, dtype=float),
        sigma_pct_ls=np.ones(n),
        residual_var=1.0,
        equation_sigma=np.ones(len(kappa)),
        singular_values=np.ones(n),
        condition=1.0,
        unidentifiable=list(unidentifiable),
        rows=100,
        identifiable=np.array([True] * n if identifiable is None else identifiable, dtype=bool),
        output_correlation=list(kappa),
        disagreement_z=np.zeros(n) if z is None else np.array(z, dtype=float),
    )
