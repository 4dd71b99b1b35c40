"""A model's nonlinear constants, chosen by the data: a shape by profile likelihood
(`ShapeSearch`), and per-joint switching points the same way, joint by joint
(`JointSwitches`).

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


def with_configured_switches(model: LinearModel, cfg: Any) -> LinearModel:
    """`model` running the profile's `[estimator] valve_null_offset_v` / `valve_lap_v` (per
    joint; a model with `switches`, whose value is [b₀; d]); None or absent: the model's own
    (zeros). The online estimator cannot search; the batch's note says what to put there."""
    sw = model.switches
    keys = ("valve_null_offset_v", "valve_lap_v")
    given = [getattr(cfg, k, None) for k in keys]
    if sw is None or all(g is None for g in given):
        return model
    value = np.array(sw.value, dtype=float)
    n = value.shape[1]
    for row, (key, got) in enumerate(zip(keys, given, strict=True)):
        if got is None:
            continue
        if len(got) != n:
            raise ValueError(f"[estimator] {key} has {len(got)} values; the rig has {n} joints")
        value[row] = got
    return replace(sw.make(value), truth=model.truth, prior=model.prior, shape=model.shape)


@dataclass(frozen=True)
class JointSwitches:
    """Per-joint constants that decide where a model's regressor switches (estimator.models_lin:
    each valve's null offset b₀ and lap d, so which metering edges are open), chosen like a
    shape by least residual, joint by joint. A joint's constants act on its own equations
    (rows `per_joint`·j …), so one fit scores a candidate for every joint at once; the
    parameters the joints share (1/b, α) couple them only weakly. `value` (k, n): k constants
    per joint, the model as built (what the online estimator runs). `directions` (p, k): the
    lines the search moves along in the k-dimensional space (None: each constant alone)."""

    label: str  # "valve null offset and lap per joint"
    value: np.ndarray
    span: float  # the first sweep's grid covers value ± span along each direction
    tol: float  # the golden-section search stops at this interval
    per_joint: int  # equations (rows) per joint
    make: Callable[[np.ndarray], LinearModel]
    show: Callable[[np.ndarray], str]
    directions: np.ndarray | None = None
    hint: str = ""  # where to configure the online estimator's values, for the note


@dataclass(frozen=True)
class SwitchChoice:
    value: np.ndarray
    cost: np.ndarray  # per joint, at `value`
    cost_own: np.ndarray  # per joint, at the model's own value
    fits: int
    at_edge: bool  # some constant ended at the grid's end: the data may want it beyond

    def note(self, model: str, sw: JointSwitches) -> str:
        ratio = np.where(self.cost > 0, self.cost_own / np.maximum(self.cost, 1e-300), np.inf)
        text = (
            f"{model}: {sw.label}: {sw.show(self.value)}, chosen by the data (least residual "
            f"per joint, {self.fits} fits); the values the online estimator ran "
            f"({sw.show(sw.value)}) leave {', '.join(f'{r:.2g}' for r in ratio)}× the residual "
            f"variance{sw.hint}"
        )
        return text + ("; at the end of the searched range" if self.at_edge else "")


#: Grid of the first sweep, in units of `span` (dense near the start, where constants sit).
SWITCH_GRID = np.array(
    [-1.0, -0.5, -0.25, -0.1, -0.04, -0.015, 0.0, 0.015, 0.04, 0.1, 0.25, 0.5, 1.0]
)
#: Later sweeps: a few points within ±4 tol of the value the first left.
SWITCH_GRID_LOCAL = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])
#: Coordinate sweeps over the directions (the second starts at the first's result, on all
#: the data where the first may score on part of it).
SWITCH_SWEEPS = 2
_GOLDEN = (np.sqrt(5.0) - 1.0) / 2.0


def choose_switches(
    sw: JointSwitches,
    cost: Callable[[np.ndarray], np.ndarray],
    coarse_cost: Callable[[np.ndarray], np.ndarray] | None = None,
) -> SwitchChoice:
    """Descent along each direction in turn: a grid (the first sweep, scored by `coarse_cost`
    where given: a cheaper cost on part of the data) or the neighbourhood of the current value
    (later sweeps), then a golden-section search between the best point's neighbours, every
    joint in lockstep (one fit per step scores them all). `cost(value (k, n))` → residual
    variance per joint (n,); NaN/inf = unusable. Lines other than the axes matter where the
    cost has a diagonal valley (a valve's null offset moves both edges' opening points at
    once; its lap moves them apart)."""
    k, n = np.shape(sw.value)
    dirs = np.eye(k) if sw.directions is None else np.asarray(sw.directions, dtype=float)
    fits = 0

    def scorer(f: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
        def score(value: np.ndarray) -> np.ndarray:
            nonlocal fits
            fits += 1
            c = np.asarray(f(value), dtype=float)
            return np.where(np.isfinite(c), c, np.inf)

        return score

    full = scorer(cost)
    value = np.array(sw.value, dtype=float)
    own = full(value)
    at_edge = np.zeros(n, dtype=bool)
    for sweep in range(SWITCH_SWEEPS):
        score = scorer(coarse_cost) if sweep == 0 and coarse_cost is not None else full
        steps = SWITCH_GRID if sweep == 0 else SWITCH_GRID_LOCAL
        scale = sw.span if sweep == 0 else 4.0 * sw.tol
        for direction in dirs:
            line = _Line(value.copy(), direction, score)
            grid = scale * steps[:, None] * np.ones((1, n))  # (g, n) offsets along the line
            cs = np.array([line.cost(t) for t in grid])
            best = np.argmin(cs, axis=0)
            cols = np.arange(n)
            if sweep == 0:
                at_edge |= (best == 0) | (best == len(grid) - 1)
            lo = grid[np.maximum(best - 1, 0), cols]
            hi = grid[np.minimum(best + 1, len(grid) - 1), cols]
            value = line.at(_golden(line.cost, lo, hi, sw.tol))
    return SwitchChoice(value, full(value), own, fits, bool(at_edge.any()))


@dataclass(frozen=True)
class _Line:
    """The constants base + t·direction, t per joint (n,)."""

    base: np.ndarray  # (k, n)
    direction: np.ndarray  # (k,)
    score: Callable[[np.ndarray], np.ndarray]

    def at(self, t: np.ndarray) -> np.ndarray:
        return self.base + self.direction[:, None] * t[None, :]

    def cost(self, t: np.ndarray) -> np.ndarray:
        return self.score(self.at(t))


def _golden(
    f: Callable[[np.ndarray], np.ndarray], lo: np.ndarray, hi: np.ndarray, tol: float
) -> np.ndarray:
    """Golden-section search of f (per joint) on [lo, hi], every joint in lockstep."""
    a, b = lo.copy(), hi.copy()
    x1, x2 = b - _GOLDEN * (b - a), a + _GOLDEN * (b - a)
    f1, f2 = f(x1), f(x2)
    while np.max(b - a) > tol:
        left = f1 <= f2  # the minimum lies in [a, x2]: x1 becomes the right point
        a, b = np.where(left, a, x1), np.where(left, x2, b)
        x1, x2 = (
            np.where(left, b - _GOLDEN * (b - a), x2),
            np.where(left, x1, a + _GOLDEN * (b - a)),
        )
        f_new = f(np.where(left, x1, x2))
        f1, f2 = np.where(left, f_new, f2), np.where(left, f1, f_new)
    return np.where(f1 <= f2, x1, x2)
