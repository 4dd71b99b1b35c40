"""A model's nonlinear constants, chosen by the data: a shape by profile likelihood
(`ShapeSearch`), constants the model's own estimate implies by fixed point (`FixedPoint`).

Some models are linear in their parameters only once a shape is fixed: the width v_ε of the
smooth sign in Lin's Coulomb columns (estimator.models_lin) is the example. The width is a
property of the rig (how sharply its seals' friction reverses, smeared by the velocity
estimate), not of the software, and a wrong one biases everything correlated with friction:
on the realistic simulator with only in-family effects, the 5 mm/s the family used to fix
printed Fc⁻₁ 38 % off with σ 1.8 % and W₁ 11 % off, while the width that minimises the
residual (1 mm/s there) gives both within 1 % and a residual σ 6× smaller
(bench/identification_error_budget.py, docs/estimator.md).

With the shape fixed the model is linear, so the least-squares residual variance as a function
of the shape is the concentrated (profile) likelihood under Gaussian equation errors; the batch
takes its minimum: a log-spaced grid over the declared range, then a bounded scalar search
between the best point's neighbours. The online estimator cannot search (one RLS per width
would multiply its cost); it runs the model's own value or the profile's `[estimator]
coulomb_band_m_s` (`with_configured_shape`), and the batch's note says which width the data
chose, to put there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.optimize import minimize_scalar

if TYPE_CHECKING:
    from estimator.models import LinearModel

#: Grid points over [lo, hi] before the local search.
GRID_POINTS = 13
#: Relative precision of the local search (log10 units: ~2 %).
XATOL_LOG10 = 0.01


@dataclass(frozen=True)
class ShapeSearch:
    """How to vary a model's shape constant: `make(value)` builds the same model with it."""

    label: str  # what it is, for the report ("Coulomb zero-velocity band v_ε")
    unit: str  # display unit ("mm/s")
    display_scale: float  # SI → display unit (1e3 for m/s → mm/s)
    value: float  # the model's own value (SI): what the online estimator runs
    lo: float
    hi: float
    make: Callable[[float], LinearModel]

    def __post_init__(self) -> None:
        if not 0.0 < self.lo < self.hi or not self.lo <= self.value <= self.hi:
            raise ValueError(
                f"shape '{self.label}': need 0 < lo ≤ value ≤ hi, got "
                f"{self.lo}, {self.value}, {self.hi}"
            )

    def show(self, value: float) -> str:
        return f"{value * self.display_scale:.3g} {self.unit}"


@dataclass(frozen=True)
class ShapeChoice:
    value: float
    cost: float  # residual variance at `value`
    cost_own: float  # at the model's own value
    at_edge: bool  # the minimum is at an end of the range: the range may be too narrow

    def note(self, model: str, shape: ShapeSearch) -> str:
        ratio = self.cost_own / self.cost if self.cost > 0 else float("inf")
        return (
            f"{model}: {shape.label} = {shape.show(self.value)}, chosen by the data (least "
            f"residual over {shape.show(shape.lo)}–{shape.show(shape.hi)}; the model's own "
            f"{shape.show(shape.value)}, which the online estimator runs, leaves "
            f"{ratio:.2g}× the residual variance)"
        )


def choose(shape: ShapeSearch, cost: Callable[[float], float]) -> ShapeChoice:
    """The value in [lo, hi] with the least `cost` (a residual variance; NaN = unusable)."""
    grid = np.geomspace(shape.lo, shape.hi, GRID_POINTS)

    def safe(v: float) -> float:
        c = cost(float(v))
        return c if np.isfinite(c) else np.inf

    costs = np.array([safe(v) for v in grid])
    own = safe(shape.value)
    if not np.isfinite(costs).any():
        return ShapeChoice(shape.value, own, own, at_edge=False)
    k = int(np.argmin(costs))
    best, best_cost = float(grid[k]), float(costs[k])
    if 0 < k < len(grid) - 1:
        lo, hi = np.log10(grid[k - 1]), np.log10(grid[k + 1])
        res = minimize_scalar(
            lambda x: safe(10.0**x), bounds=(lo, hi), method="bounded",
            options={"xatol": XATOL_LOG10},
        )  # fmt: skip
        if res.fun < best_cost:
            best, best_cost = float(10.0**res.x), float(res.fun)
    return ShapeChoice(best, best_cost, own, at_edge=k in (0, len(grid) - 1))


def with_configured_shape(model: LinearModel, cfg: Any) -> LinearModel:
    """`model` running the profile's `[estimator] coulomb_band_m_s` (the shape constant of a
    model that has one; None or no section: the model's own)."""
    value = getattr(cfg, "coulomb_band_m_s", None)
    shape = model.shape
    if value is None or shape is None or value == shape.value:
        return model
    if not shape.lo <= value <= shape.hi:
        raise ValueError(
            f"[estimator] coulomb_band_m_s = {value} is outside {model.name}'s range "
            f"[{shape.lo}, {shape.hi}] m/s"
        )
    return replace(shape.make(value), truth=model.truth, prior=model.prior)


@dataclass(frozen=True)
class FixedPoint:
    """Constants of a model's regressor that its own estimate gives (estimator.models_lin:
    which metering edge is open depends on u + b₀, and b₀ = Q0/Cf is estimated): the batch
    fits, computes them from the estimate, rebuilds the model and fits again until they
    settle. Starting from `value` (the model as built, what the online estimator runs)."""

    label: str  # "valve null offsets b₀"
    unit: str
    value: np.ndarray
    tol: float  # settled when no constant moves more than this
    update: Callable[[np.ndarray], np.ndarray]  # θ → the constants it implies
    make: Callable[[np.ndarray], LinearModel]

    def show(self, value: np.ndarray) -> str:
        return "[" + ", ".join(f"{v:.3g}" for v in value) + f"] {self.unit}"


#: Refits before a fixed point that has not settled is given up.
MAX_FIXED_POINT_FITS = 6


def iterate(
    fp: FixedPoint, estimate: Callable[[LinearModel], np.ndarray | None]
) -> tuple[np.ndarray, int, bool]:
    """The constants where the model's estimate reproduces them: (value, fits, settled).
    `estimate(model)` is θ of a plain fit (None: no fit)."""
    value = np.asarray(fp.value, dtype=float)
    for k in range(1, MAX_FIXED_POINT_FITS + 1):
        theta = estimate(fp.make(value))
        if theta is None or not np.all(np.isfinite(theta)):
            return value, k, False
        nxt = np.asarray(fp.update(theta), dtype=float)
        if np.max(np.abs(nxt - value)) <= fp.tol:
            return nxt, k, True
        value = nxt
    return value, MAX_FIXED_POINT_FITS, False
