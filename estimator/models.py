"""Linear-in-parameters models `y = Φ θ` the estimator identifies.

A model is a `LinearModel`: parameter names, a `regressor(sample) -> (Φ (N, m, n), y (N, m))`
evaluated on a `Sample` of per-joint signals, and two vectors that only *normalise* the problem
(`param_scale`: typical magnitude of each parameter; `output_scale`: typical magnitude of each
equation, used as the equation weight 1/output_scale). Neither is a prior: they make a diffuse
start truly diffuse and keep 1/b ≈ 4e-9 and M ≈ 4 in one well-conditioned problem.

The reference rig has two models, each identified by its own RLS (disjoint parameters):
  * mechanical (DESIGN §2.1): 7 parameters for two joints, 3 for one;
  * fluid (DESIGN §2.2): 1 + 4n parameters, every joint's pressure equations stacked so the bulk
    modulus is estimated once (Sakai).

User models: a profile may say `[estimator] model = "package.module:function"`; the function is
called as `function(params: PlantParams) -> LinearModel | Sequence[LinearModel]` and its
models replace the reference ones. `estimator.examples.one_joint` is a worked example.

Static/dynamic split (why `regressor` is evaluated three times): the part of Φ and y that does
not depend on any derivative (gravity columns, τ from pressures, valve terms h(p)·u) is
evaluated on the *raw* samples and filtered afterwards with the same FIR — exact parallel
filtering; only the derivative-dependent remainder comes from the conditioned signals.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType

import numpy as np

from controller.plant.dynamics import cylinder
from controller.plant.params import PlantParams
from controller.plant.regressors import fluid_regressor, mechanical_output, mechanical_regressor
from estimator.shape_search import JointSwitches, ShapeSearch

#: Signal names a `Sample` carries; `d`/`dd` prefixes are first/second time derivatives.
SIGNALS = ("q", "s", "p_cap", "p_rod", "u", "temp")


@dataclass
class Sample:
    """Per-joint signals, each (N, n_joints), in SI units (rad, m, Pa, spool V).

    Derivatives (`qd`, `qdd`, `sd`, `pd_cap`, `pd_rod`) are zero in the static evaluation."""

    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    s: np.ndarray
    sd: np.ndarray
    p_cap: np.ndarray
    pd_cap: np.ndarray
    p_rod: np.ndarray
    pd_rod: np.ndarray
    u: np.ndarray
    #: Oil temperature, °C, the same in every joint's column (one oil); None: not measured.
    temp: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.q.shape[0])


Regressor = Callable[[Sample], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class LinearModel:
    name: str
    names: tuple[str, ...]
    n_outputs: int
    regressor: Regressor
    param_scale: np.ndarray
    output_scale: np.ndarray
    #: Low-pass corner of this model's conditioning FIR (Hz) and its length (odd).
    cutoff_hz: float = 10.0
    taps: int = 201
    #: Evaluate the derivative-free part on raw samples and filter it (exact); see module doc.
    split_static: bool = True
    #: Where the model holds: `valid(raw_sample) -> bool (N,)` on raw samples. A regression
    #: sample is used only if every raw sample its filters saw was valid (e.g. the fluid model
    #: is void while a relief valve or the anti-cavitation check flows). None = always.
    valid: Callable[[Sample], np.ndarray] | None = None
    #: True values if known (simulator), for reports only; never used by the estimator.
    truth: np.ndarray | None = field(default=None, compare=False)
    #: The rig engineer's values (the profile's initial guesses), if complete: what a parameter
    #: the run cannot resolve is fixed at (estimator.wls.fit_model). Never the simulator's
    #: truth — the simulator is an adversary, not an accomplice.
    prior: np.ndarray | None = field(default=None, compare=False)
    #: For a model whose parameters are the reference physics under names of its own: the
    #: reference name each stands for (`PlantParams.mech_names()` / `fluid_names()`, e.g.
    #: "M" → "M1"), so validation can simulate the estimate with the shared physics like the
    #: reference model's. None: the names are the reference ones, or the model has its own.
    plant_names: tuple[str, ...] | None = field(default=None, compare=False)
    #: A shape constant the model is linear only once it is fixed (e.g. the Coulomb band of
    #: estimator.models_lin), which the batch chooses from the data (estimator.shape_search).
    shape: ShapeSearch | None = field(default=None, compare=False)
    #: Per-joint constants that decide where the regressor switches (e.g. each valve's null
    #: offset and lap, so which metering edges are open: estimator.models_lin), which the
    #: batch chooses from the data.
    switches: JointSwitches | None = field(default=None, compare=False)
    #: Parameters referred to the oil law's temperature through `Sample.temp`
    #: (controller.plant.oil): what the batch's notes say was referred.
    referred: tuple[str, ...] = ()
    #: Sentences every fit of this model carries as warnings: parameters the model's own
    #: construction biases beyond what their σ says (e.g. estimator.models_lin's stiction bumps).
    caveats: tuple[str, ...] = field(default=(), compare=False)
    #: Heteroscedastic weights: per output equation, the parameters whose columns' summed |Φ|
    #: is the row's speed (e.g. a joint's viscous columns). The batch then weights each
    #: equation's rows by the residual σ of their speed octile, not one σ per equation
    #: (estimator.wls.row_sigma). Empty: one σ per equation.
    speed_params: tuple[tuple[str, ...], ...] = field(default=(), compare=False)
    #: Parameters the model fits as a shape, not a measurement (a caveat says why): every
    #: fit flags them not identifiable and keeps their value for the model's own use.
    shapes: tuple[str, ...] = field(default=(), compare=False)
    #: Its equations are the chambers' flow balances only (DESIGN §1.2): it also uses the rows
    #: an experiment gives to those alone (`identify = "fluid"`, estimator.segment_rows).
    fluid: bool = field(default=False, compare=False)
    #: Per-joint parameters the batch chooses by closed-loop simulation where its equations
    #: flag them (estimator.closed_loop_choice: weak in the equations, strong in the loop).
    closed_loop: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        for attr in ("truth", "prior"):
            v = getattr(self, attr)
            if v is not None and not np.all(np.isfinite(v)):
                # A profile without those values gives NaN ("unknown"): none.
                object.__setattr__(self, attr, None)
        n = len(self.names)
        if np.shape(self.param_scale) != (n,) or np.any(np.asarray(self.param_scale) <= 0):
            raise ValueError(f"model '{self.name}': param_scale must be {n} positive numbers")
        if np.shape(self.output_scale) != (self.n_outputs,) or np.any(
            np.asarray(self.output_scale) <= 0
        ):
            raise ValueError(
                f"model '{self.name}': output_scale must be {self.n_outputs} positive numbers"
            )

    @property
    def n_params(self) -> int:
        return len(self.names)

    def with_conditioning(self, cutoff_hz: float | None, taps: int | None) -> LinearModel:
        return replace(
            self,
            cutoff_hz=self.cutoff_hz if cutoff_hz is None else cutoff_hz,
            taps=self.taps if taps is None else taps,
        )


def mechanical_model(params: PlantParams) -> LinearModel:
    """τ = Φm(q, q̇, q̈) θm with τ = r(q)(A⁺p⁺ − A⁻p⁻) (DESIGN §2.1)."""
    g = params.gravity

    def regressor(x: Sample) -> tuple[np.ndarray, np.ndarray]:
        Phi = mechanical_regressor(x.q, x.qd, x.qdd, g)
        return Phi, mechanical_output(params, x.q, x.p_cap, x.p_rod)

    # Typical torque: half the supply pressure on the cap area at a mid-range moment arm
    # (q = 0.5 rad is inside both reference joints' strokes; only the order of magnitude matters).
    _, r = cylinder(params, np.full((1, params.n), 0.5))
    out_scale = 0.5 * params.supply_pressure * params.area_cap * np.abs(r[0])
    return LinearModel(
        name="mechanical",
        names=tuple(params.mech_names()),
        n_outputs=params.n,
        regressor=regressor,
        param_scale=np.ones(len(params.mech_names())),
        output_scale=np.maximum(out_scale, 1e-6),
        # Measured on the simulator (60 s, reference noise): 20 Hz / 101 taps gave < 0.3 %
        # error on every parameter; 6 Hz cut into the hydraulic resonances and gave ~2.5 %.
        cutoff_hz=20.0,
        taps=101,
        truth=params.theta_mech(),
    )


def fluid_model(params: PlantParams) -> LinearModel:
    """All joints' pressure equations stacked, one shared 1/b (DESIGN §2.2, Sakai)."""

    def regressor(x: Sample) -> tuple[np.ndarray, np.ndarray]:
        return fluid_regressor(params, x.s, x.sd, x.u, x.p_cap, x.p_rod, x.pd_cap, x.pd_rod)

    n = params.n
    # The equations ignore the relief valve (cracking at relief_ratio·ps) and the
    # anti-cavitation check (p < 0): samples near those bounds are left out. The margin is
    # ~7σ of the reference pressure noise (DESIGN §1.4).
    margin = 0.005 * params.supply_pressure
    p_hi = params.relief_ratio * params.supply_pressure - margin

    def valid(x: Sample) -> np.ndarray:
        p = np.concatenate([x.p_cap, x.p_rod], axis=1)
        return np.all((p > margin) & (p < p_hi), axis=1)

    # 1/b of oil is ~1e-9 1/Pa, flow gains ~1e-6 m²/(s·V·√Pa); equations are flows, m³/s,
    # of the order of an area times 1 cm/s.
    scale = np.array([1.0e-9] + [1.0e-6] * 4 * n)
    area = np.empty(2 * n)
    area[0::2] = params.area_cap
    area[1::2] = params.area_rod
    return LinearModel(
        name="fluid",
        names=tuple(params.fluid_names()),
        n_outputs=2 * n,
        regressor=regressor,
        param_scale=scale,
        output_scale=area * 0.01,
        cutoff_hz=40.0,
        taps=101,
        valid=valid,
        truth=params.theta_fluid(),
        fluid=True,
    )


def reference_models(params: PlantParams) -> list[LinearModel]:
    return [mechanical_model(params), fluid_model(params)]


def load_models(
    spec: str | None,
    params: PlantParams,
    profile_dir: str | Path | None = None,
    prior_params: PlantParams | None = None,
) -> list[LinearModel]:
    """`None`/"reference" → the reference models; "module:function" or "path/file.py:function"
    → the user's factory.

    A user module is looked for, in order, as a file (or package) next to the profile
    (`profile_dir`, e.g. `mymodels.py` beside `rig.toml` for "mymodels:models"), in the current
    directory, then on `sys.path` — so a model kept with its profile loads from a fresh clone
    with no PYTHONPATH, in `rig-estimator` and in `rigctl identify`'s batch step alike.

    `prior_params` (`daq.profile.known_params`: geometry and the profile's initial guesses,
    never the truth) gives each model its `prior`, built by the same factory."""
    models = _make_models(spec, params, profile_dir)
    if prior_params is None:
        return models
    priors = {m.name: m.truth for m in _make_models(spec, prior_params, profile_dir)}
    return [replace(m, prior=priors.get(m.name)) for m in models]


def _make_models(
    spec: str | None, params: PlantParams, profile_dir: str | Path | None
) -> list[LinearModel]:
    if spec is None or spec == "reference":
        return reference_models(params)
    mod_name, sep, attr = spec.rpartition(":")
    if not sep or not mod_name or not attr:
        raise ValueError(f"estimator model '{spec}': expected 'package.module:function'")
    try:
        factory = getattr(_import_user_module(mod_name, profile_dir), attr)
    except (ImportError, AttributeError, OSError, SyntaxError) as exc:
        where = f" (looked beside the profile in {profile_dir}, in {Path.cwd()} and on sys.path)"
        raise ValueError(f"estimator model '{spec}': cannot load it ({exc}){where}") from None
    made = factory(params)
    models = [made] if isinstance(made, LinearModel) else list(made)
    if not models or not all(isinstance(m, LinearModel) for m in models):
        raise ValueError(f"estimator model '{spec}' must return LinearModel(s), got {made!r}")
    return models


def _import_user_module(name: str, profile_dir: str | Path | None) -> ModuleType:
    """The module `name` (dotted, or a path to a .py file) from the profile's directory, the
    current directory or sys.path, in that order."""
    if name.endswith(".py"):
        path = Path(name)
        if not path.is_absolute() and profile_dir is not None:
            beside = Path(profile_dir) / path
            path = beside if beside.exists() else path
        return _module_from_file(path, f"hydrig_user_model_{path.stem}")
    if name in sys.modules:
        return sys.modules[name]
    rel = Path(*name.split("."))
    for base in [Path(profile_dir)] if profile_dir is not None else []:
        for candidate in (base / rel.with_suffix(".py"), base / rel / "__init__.py"):
            if candidate.is_file():
                return _module_from_file(candidate, name)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name.split(".")[0]:
            raise  # the module exists but one of its own imports is missing
        for candidate in (Path.cwd() / rel.with_suffix(".py"), Path.cwd() / rel / "__init__.py"):
            if candidate.is_file():
                return _module_from_file(candidate, name)
        raise


def _module_from_file(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def evaluate(model: LinearModel, x: Sample) -> tuple[np.ndarray, np.ndarray]:
    """Φ, y from the model with shape checks that name the model on failure."""
    Phi, y = model.regressor(x)
    N = x.n
    if Phi.shape != (N, model.n_outputs, model.n_params) or y.shape != (N, model.n_outputs):
        raise ValueError(
            f"model '{model.name}' returned Phi {Phi.shape} and y {y.shape}; expected "
            f"{(N, model.n_outputs, model.n_params)} and {(N, model.n_outputs)}"
        )
    return Phi, y


def static_sample(x: Sample) -> Sample:
    """The same sample with every derivative zero (the static part of the regression)."""
    z = np.zeros_like(x.q)
    return replace(x, qd=z, qdd=z, sd=z, pd_cap=z, pd_rod=z)
