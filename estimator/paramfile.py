"""Parameter file written by the estimator (TOML, format "hydrig-params/1"; docs/estimator.md).

    format = "hydrig-params/1"
    rig = "sim2dof"
    source = "rig-estimator"
    written_utc = "2026-11-21T05:30:00Z"
    samples = 120000
    warnings = ["…"]               # what the estimate says of itself in words, when anything

    [models.mechanical]            # one table per identified model
    names = ["M1", …]
    theta = [4.47, …]              # SI units
    sigma_pct = [0.05, …]          # Gautier eq. 19
    cov_diag = […]                 # Var(θ_i)
    residual_var = 1.3e-05         # σ² of the normalised equations (eq. 17)

    [plant]                        # the same numbers in PlantParams field names (feed-forward)
    inertia = [4.47, 1.27]
    …

    [structure]                    # the batch's file only: the model structure it chose
    coulomb_band_m_s = 0.0012      # (estimator.structure: what the online estimator takes)
    valve_null_offset_v = [0.007, -0.006]
    valve_lap_v = [-0.007, -0.007]

Written atomically (temporary file + rename) so a reader never sees half a file.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from controller.plant.params import PlantParams

FORMAT = "hydrig-params/1"


def _val(v: Any) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        f = float(v)
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return repr(f)
    if isinstance(v, list | tuple | np.ndarray):
        return "[" + ", ".join(_val(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to a parameter file")


def write_param_file(
    path: str | Path,
    rig: str,
    samples: int,
    models: dict[str, dict[str, Any]],
    params: PlantParams | None = None,
    *,
    source: str = "rig-estimator",
    structure: dict[str, Any] | None = None,
    warnings: Sequence[str] = (),
) -> None:
    """models: name → {names, theta, sigma_pct, cov_diag, residual_var}; `structure`: the
    [structure] table (estimator.structure), keys with a None value left out; `warnings`: what
    the estimate says of itself in words (a reader shows them beside the values)."""
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [
        f"# Written by {source}; see docs/estimator.md.",
        f"format = {_val(FORMAT)}",
        f"rig = {_val(rig)}",
        f"source = {_val(source)}",
        f"written_utc = {_val(now)}",
        f"samples = {int(samples)}",
    ]
    if warnings:
        lines.append(f"warnings = {_val(list(warnings))}")
    for name, m in models.items():
        lines += ["", f"[models.{name}]"]
        for key in ("names", "theta", "sigma_pct", "cov_diag", "residual_var"):
            lines.append(f"{key} = {_val(m[key])}")
    if params is not None:
        lines += ["", "[plant]"]
        for key in ("inertia", "viscous_friction", "gravity_moment", "flow_gains"):
            lines.append(f"{key} = {_val(np.asarray(getattr(params, key)).tolist())}")
        lines.append(f"coupling = {_val(float(params.coupling))}")
        lines.append(f"bulk_modulus = {_val(float(params.bulk_modulus))}")
    if structure:
        lines += ["", "[structure]"]
        lines += [f"{k} = {_val(v)}" for k, v in structure.items() if v is not None]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_param_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: cannot read parameter file: {exc}") from None
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: format {data.get('format')!r}, expected {FORMAT!r}")
    for name, m in data.get("models", {}).items():
        for key in ("names", "theta", "cov_diag", "residual_var"):
            if key not in m:
                raise ValueError(f"{path}: models.{name} has no '{key}'")
    return data
