"""Plant-parameter files: what the estimator writes and the model-based controllers read.

The file is TOML; this module maps it to and from plain dicts (no I/O here). Format version 1:

    format = "hydrig-plant-params"
    version = 1
    [meta]                      # free-form provenance: rig, source, created, run, model, ...
    rig = "sim2dof"
    source = "estimator"
    [global]
    gravity = 9.81              # m/s²
    supply_pressure_pa = 7.0e6
    bulk_modulus_pa = 2.33e8    # b (identified: 1/θf[0])
    coupling = 1.37             # R12, kg·m² (0 for one joint)
    [[joints]]                  # one table per joint, in joint order
    inertia = 4.47              # M_i, kg·m²            (identified)
    viscous_friction = 50.77    # Fv_i, N·m·s/rad        (identified)
    gravity_moment = 8.55       # W_i, kg·m              (identified)
    flow_gains = [6.31e-7, 6.60e-7, 5.50e-7, 6.27e-7]   # Cf⁺⁺, Cf⁺⁻, Cf⁻⁺, Cf⁻⁻ (identified)
    area_cap = 7.0e-4           # geometry and valve: known, usually copied from the profile
    area_rod = 5.4e-4
    dead_volume = 7.9e-5
    stroke = 0.075
    pin_a = 0.11
    pin_b = 0.33
    closed_length = 0.30
    theta0_deg = 45.0
    valve_gain = 0.25
    valve_tau_s = 1.5e-3
    spool_max = 1.4
    [sigma]                     # optional: %σ of each identified parameter (PlantParams names)
    "M1" = 0.8
    "1/b" = 3.1

`load_params(d, base)` takes any key missing from the file from `base` (the profile's nominal
`PlantParams`), so an estimator may write only what it identified.

`load_params` also reads the file `rig-estimator` writes today (`format = "hydrig-params/1"`,
estimator/paramfile.py): its `[plant]` table (inertia, viscous_friction, gravity_moment,
flow_gains, coupling, bulk_modulus) or, without one, its `[models.mechanical]` /
`[models.fluid]` θ vectors, laid over `base` (required: that file has no geometry).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from controller.plant.params import PlantParams

FORMAT = "hydrig-plant-params"
VERSION = 1
ESTIMATOR_FORMAT = "hydrig-params/1"
_EST_PLANT = (
    "inertia",
    "viscous_friction",
    "gravity_moment",
    "flow_gains",
    "coupling",
    "bulk_modulus",
)
_GLOBAL = {
    "gravity": "gravity",
    "supply_pressure_pa": "supply_pressure",
    "bulk_modulus_pa": "bulk_modulus",
    "coupling": "coupling",
}
_JOINT = {
    "inertia": "inertia",
    "viscous_friction": "viscous_friction",
    "gravity_moment": "gravity_moment",
    "area_cap": "area_cap",
    "area_rod": "area_rod",
    "dead_volume": "dead_volume",
    "stroke": "stroke",
    "pin_a": "pin_a",
    "pin_b": "pin_b",
    "closed_length": "closed_length",
    "theta0_deg": "theta0",
    "valve_gain": "valve_gain",
    "valve_tau_s": "valve_tau",
    "spool_max": "spool_max",
}
_MAY_BE_ZERO = {"coupling", "viscous_friction", "gravity_moment", "theta0_deg"}


class ParamFileError(ValueError):
    """A malformed parameter file; the message names the key."""


def dump_params(
    params: PlantParams,
    meta: Mapping[str, Any] | None = None,
    sigma: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The file's dict for `params` (write it with any TOML writer)."""
    joints = []
    for j in range(params.n):
        row: dict[str, Any] = {}
        for key, attr in _JOINT.items():
            v = float(getattr(params, attr)[j])
            row[key] = math.degrees(v) if key == "theta0_deg" else v
        row["flow_gains"] = [float(x) for x in params.flow_gains[j]]
        joints.append(row)
    d: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "meta": dict(meta or {}),
        "global": {k: float(getattr(params, a)) for k, a in _GLOBAL.items()},
        "joints": joints,
    }
    if sigma:
        d["sigma"] = {str(k): float(v) for k, v in sigma.items()}
    return d


def _num(v: Any, where: str, key: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ParamFileError(f"{where}.{key}: expected a finite number, got {v!r}")
    if v < 0 or (v == 0 and key not in _MAY_BE_ZERO):
        if key != "theta0_deg":
            raise ParamFileError(f"{where}.{key}: must be > 0, got {v!r}")
    return float(v)


def load_params(d: Mapping[str, Any], base: PlantParams | None = None) -> PlantParams:
    """`PlantParams` from a parameter-file dict; missing keys come from `base` (if given)."""
    if d.get("format") == ESTIMATOR_FORMAT:
        return _load_estimator(d, base)
    if d.get("format") != FORMAT:
        raise ParamFileError(
            f"not a plant-parameter file: format is {d.get('format')!r}, expected {FORMAT!r}"
        )
    if d.get("version") != VERSION:
        raise ParamFileError(f"unsupported version {d.get('version')!r} (this reads {VERSION})")
    unknown = sorted(set(d) - {"format", "version", "meta", "global", "joints", "sigma"})
    if unknown:
        raise ParamFileError(f"unknown top-level key(s) {unknown}")
    g = d.get("global", {})
    bad = sorted(set(g) - set(_GLOBAL))
    if bad:
        raise ParamFileError(f"global: unknown key(s) {bad}; allowed {sorted(_GLOBAL)}")
    joints = d.get("joints")
    if not isinstance(joints, list) or not 1 <= len(joints) <= 2:
        raise ParamFileError("joints: expected a list of one or two tables")
    n = len(joints)
    if base is not None and base.n != n:
        raise ParamFileError(f"joints: the file has {n} joints, the rig {base.n}")
    kw: dict[str, Any] = {"n": n}
    for key, attr in _GLOBAL.items():
        if key in g:
            kw[attr] = _num(g[key], "global", key)
        elif base is not None:
            kw[attr] = float(getattr(base, attr))
        else:
            raise ParamFileError(f"global.{key}: missing (and no base parameters to take it from)")
    cols: dict[str, list[float]] = {a: [] for a in _JOINT.values()}
    flows = []
    for j, row in enumerate(joints):
        where = f"joints[{j}]"
        bad = sorted(set(row) - set(_JOINT) - {"flow_gains"})
        if bad:
            raise ParamFileError(f"{where}: unknown key(s) {bad}")
        for key, attr in _JOINT.items():
            if key in row:
                v = _num(row[key], where, key)
                cols[attr].append(math.radians(v) if key == "theta0_deg" else v)
            elif base is not None:
                cols[attr].append(float(getattr(base, attr)[j]))
            else:
                raise ParamFileError(f"{where}.{key}: missing (and no base parameters)")
        if "flow_gains" in row:
            fg = row["flow_gains"]
            if not isinstance(fg, list) or len(fg) != 4:
                raise ParamFileError(f"{where}.flow_gains: expected 4 numbers")
            flows.append([_num(x, where, "flow_gains") for x in fg])
        elif base is not None:
            flows.append([float(x) for x in base.flow_gains[j]])
        else:
            raise ParamFileError(f"{where}.flow_gains: missing (and no base parameters)")
    if n == 1 and kw["coupling"] != 0.0:
        raise ParamFileError("global.coupling must be 0 for one joint")
    for attr, vals in cols.items():
        kw[attr] = np.asarray(vals)
    kw["flow_gains"] = np.asarray(flows)
    return PlantParams(**kw)


def _load_estimator(d: Mapping[str, Any], base: PlantParams | None) -> PlantParams:
    """The estimator's own file (see the module doc) over `base`."""
    if base is None:
        raise ParamFileError(f"a {ESTIMATOR_FORMAT!r} file holds no geometry: pass base=")
    plant = d.get("plant")
    if plant is not None:
        bad = sorted(set(plant) - set(_EST_PLANT))
        if bad:
            raise ParamFileError(f"plant: unknown key(s) {bad}; allowed {list(_EST_PLANT)}")
        kw: dict[str, Any] = {}
        for key in ("inertia", "viscous_friction", "gravity_moment"):
            if key in plant:
                arr = np.asarray([_num(x, "plant", key) for x in plant[key]])
                if arr.shape != (base.n,):
                    raise ParamFileError(f"plant.{key}: expected {base.n} values")
                kw[key] = arr
        if "flow_gains" in plant:
            fg = plant["flow_gains"]
            if np.shape(fg) != (base.n, 4):
                raise ParamFileError(f"plant.flow_gains: expected {base.n} rows of 4")
            kw["flow_gains"] = np.asarray([[_num(x, "plant", "flow_gains") for x in r] for r in fg])
        for key in ("coupling", "bulk_modulus"):
            if key in plant:
                kw[key] = _num(plant[key], "plant", key)
        return _with_valve_structure(_with_lin_friction(dataclasses.replace(base, **kw), d), d)
    models = d.get("models", {})
    mech = models.get("mechanical", {}).get("theta")
    fluid = models.get("fluid", {}).get("theta")
    if mech is not None and len(mech) != len(base.theta_mech()):
        raise ParamFileError(f"models.mechanical.theta: expected {len(base.theta_mech())} values")
    if fluid is not None and len(fluid) != len(base.theta_fluid()):
        raise ParamFileError(f"models.fluid.theta: expected {len(base.theta_fluid())} values")
    if mech is None and fluid is None:
        raise ParamFileError("the file has neither a [plant] table nor mechanical/fluid models")
    return _with_valve_structure(
        _with_lin_friction(base.with_identified(theta_mech=mech, theta_fluid=fluid), d), d
    )


def _with_valve_structure(params: PlantParams, d: Mapping[str, Any]) -> PlantParams:
    """`params` with `valve_structure` (b₀, d per joint) from the file's `[structure]` table
    when it has both `valve_null_offset_v` and `valve_lap_v`, else unchanged: nothing else
    supplies them (the profile's valve is the simulator's, not a measurement)."""
    st = d.get("structure") or {}
    b0, lap = st.get("valve_null_offset_v"), st.get("valve_lap_v")
    if b0 is None or lap is None:
        return params
    n = params.n
    cols = []
    for key, vals in (("valve_null_offset_v", b0), ("valve_lap_v", lap)):
        if not isinstance(vals, list) or len(vals) != n:
            raise ParamFileError(f"structure.{key}: expected {n} values (one per joint)")
        for x in vals:
            if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
                raise ParamFileError(f"structure.{key}: expected finite numbers, got {x!r}")
        cols.append([float(x) for x in vals])
    return dataclasses.replace(params, valve_structure=np.asarray(cols).T.copy())


def _with_lin_friction(params: PlantParams, d: Mapping[str, Any]) -> PlantParams:
    """`params` with `friction_lin` (Fv±, Fc± per joint) when one of the file's models is Lin's
    friction family (names Fv+i, Fv-i, Fc+i, Fc-i for every joint i: estimator/models_lin.py),
    else unchanged. The values are the file's identified ones; nothing else supplies them."""
    n = params.n
    for name, m in (d.get("models") or {}).items():
        names = [str(x) for x in m.get("names", [])]
        theta = m.get("theta")
        want = [f"{k}{i}" for i in range(1, n + 1) for k in ("Fv+", "Fv-", "Fc+", "Fc-")]
        if theta is None or not all(w in names for w in want):
            continue
        if len(theta) != len(names):
            raise ParamFileError(f"models.{name}: {len(names)} names but {len(theta)} theta values")
        by_name = dict(zip(names, theta, strict=True))
        vals = [_friction_value(by_name[w], f"models.{name}", w) for w in want]
        return dataclasses.replace(params, friction_lin=np.asarray(vals).reshape(n, 4))
    return params


def _friction_value(v: Any, where: str, key: str) -> float:
    """A friction coefficient: finite; an estimate below 0 (no physical meaning: friction
    opposes motion) is taken as 0, as the estimator's own lin_plant does."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ParamFileError(f"{where}.{key}: expected a finite number, got {v!r}")
    return max(float(v), 0.0)


def file_rig(d: Mapping[str, Any]) -> str | None:
    """The rig id a parameter file says it was identified on (None if it says nothing)."""
    rig = d.get("rig") if d.get("format") == ESTIMATOR_FORMAT else d.get("meta", {}).get("rig")
    return str(rig) if rig is not None else None


def file_models(d: Mapping[str, Any]) -> dict[str, list[str]]:
    """Model name → parameter names, as the estimator's file lists them (empty otherwise)."""
    models = d.get("models", {}) if d.get("format") == ESTIMATOR_FORMAT else {}
    if not isinstance(models, Mapping):
        raise ParamFileError("models: expected a table of model tables")
    return {str(k): [str(x) for x in m.get("names", [])] for k, m in models.items()}


def reference_model_names(base: PlantParams) -> dict[str, list[str]]:
    """What the reference models (DESIGN §2.1, §2.2) identify, by model name."""
    return {"mechanical": base.mech_names(), "fluid": base.fluid_names()}


def check_compatible(
    d: Mapping[str, Any],
    rig_id: str,
    base: PlantParams | None,
    expected_models: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """Refuse (`ParamFileError`, naming the mismatch) a file made for another rig or model.

    `expected_models`: model name → parameter names the rig's identification model produces
    (e.g. `reference_model_names(base)`); None skips the model check (a user model the caller
    cannot evaluate). A model the file holds that the rig's model lacks, or a different
    parameter list, is a mismatch (a file may hold fewer models than the rig's model)."""
    rig = file_rig(d)
    if rig is not None and rig != rig_id:
        raise ParamFileError(f"the file is for rig {rig!r}; this rig is {rig_id!r}")
    joints = d.get("joints")
    if base is not None and isinstance(joints, list) and len(joints) != base.n:
        raise ParamFileError(f"the file has {len(joints)} joint(s); this rig has {base.n}")
    if expected_models is None:
        return
    have = file_models(d)
    if not have:
        return  # a plant-parameter file: no model tables to compare
    for name, names in have.items():
        want = expected_models.get(name)
        if want is None:
            raise ParamFileError(
                f"the file holds model {name!r}, which this rig's model does not identify "
                f"(its models: {sorted(expected_models)})"
            )
        if list(want) != names:
            raise ParamFileError(
                f"model {name!r}: the file's parameters {names} are not this rig's model's "
                f"{list(want)}"
            )
