"""Plant-parameter files: round trip through dicts and TOML text, partial files, clear errors."""

from __future__ import annotations

import dataclasses
import tomllib

import numpy as np
import pytest

from controller.paramfile import FORMAT, ParamFileError, dump_params, load_params
from controller.plant.params import PlantParams


def _equal(a: PlantParams, b: PlantParams) -> None:
    for f in dataclasses.fields(PlantParams):
        if f.name.startswith("_"):
            continue
        if getattr(b, f.name) is None:  # optional (friction_lin): absent on both sides
            assert getattr(a, f.name) is None, f.name
            continue
        np.testing.assert_allclose(
            getattr(a, f.name), getattr(b, f.name), rtol=1e-12, err_msg=f.name
        )


def _to_toml(d: dict) -> str:
    """A minimal TOML writer for the test (the project's writers live in daq/estimator)."""

    def val(v: object) -> str:
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return repr(v)

    lines = [f"format = {val(d['format'])}", f"version = {d['version']}"]
    for table in ("meta", "global", "sigma"):
        if table in d:
            lines.append(f"[{table}]")
            lines += [f'"{k}" = {val(v)}' for k, v in d[table].items()]
    for row in d["joints"]:
        lines.append("[[joints]]")
        lines += [f"{k} = {val(v)}" for k, v in row.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("which", ["params1", "params2"])
def test_round_trip_through_toml(which: str, request: pytest.FixtureRequest) -> None:
    p: PlantParams = request.getfixturevalue(which)
    d = dump_params(p, meta={"rig": "sim", "source": "test"}, sigma={"M1": 1.5})
    assert d["format"] == FORMAT and d["sigma"] == {"M1": 1.5}
    back = load_params(tomllib.loads(_to_toml(d)))
    _equal(back, p)


def test_partial_file_takes_the_rest_from_base(params2: PlantParams) -> None:
    ident = params2.with_identified(
        theta_mech=params2.theta_mech() * 1.1, theta_fluid=params2.theta_fluid() * 0.9
    )
    d = {
        "format": FORMAT,
        "version": 1,
        "global": {"bulk_modulus_pa": ident.bulk_modulus, "coupling": ident.coupling},
        "joints": [
            {
                "inertia": float(ident.inertia[j]),
                "viscous_friction": float(ident.viscous_friction[j]),
                "gravity_moment": float(ident.gravity_moment[j]),
                "flow_gains": ident.flow_gains[j].tolist(),
            }
            for j in range(2)
        ],
    }
    _equal(load_params(d, base=params2), ident)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(format="other"), "not a plant-parameter file"),
        (lambda d: d.update(version=2), "unsupported version"),
        (lambda d: d.update(extra=1), "unknown top-level key"),
        (lambda d: d["global"].update(gravty=9.8), "global: unknown key"),
        (lambda d: d["joints"][0].update(inertia=-1.0), r"joints\[0\].inertia: must be > 0"),
        (
            lambda d: d["joints"][1].update(stroke="long"),
            r"joints\[1\].stroke: expected a finite number",
        ),
        (lambda d: d["joints"][0].update(flow_gains=[1e-7]), "flow_gains: expected 4 numbers"),
        (lambda d: d["joints"][0].pop("pin_a"), r"joints\[0\].pin_a: missing"),
        (lambda d: d.update(joints=[]), "one or two tables"),
    ],
)
def test_errors_name_the_key(params2: PlantParams, mutate: object, message: str) -> None:
    d = dump_params(params2)
    mutate(d)  # type: ignore[operator]
    with pytest.raises(ParamFileError, match=message):
        load_params(d)


def test_joint_count_must_match_base(params1: PlantParams, params2: PlantParams) -> None:
    with pytest.raises(ParamFileError, match="the rig 1"):
        load_params(dump_params(params2), base=params1)


def test_reads_the_estimators_file(params2: PlantParams, tmp_path: object) -> None:
    """What rig-estimator writes (estimator.paramfile) feeds the feed-forward directly."""
    from pathlib import Path

    from estimator.paramfile import read_param_file, write_param_file

    ident = params2.with_identified(
        theta_mech=params2.theta_mech() * 1.1, theta_fluid=params2.theta_fluid() * 0.9
    )
    path = Path(str(tmp_path)) / "p.toml"
    models = {
        "mechanical": {
            "names": params2.mech_names(),
            "theta": ident.theta_mech().tolist(),
            "sigma_pct": [1.0] * 7,
            "cov_diag": [0.0] * 7,
            "residual_var": 1.0,
        }
    }
    write_param_file(path, "sim2dof", 100, models, ident)
    _equal(load_params(read_param_file(path), base=params2), ident)
    # Without the [plant] table: the θ vectors of the models.
    d = read_param_file(path)
    del d["plant"]
    got = load_params(d, base=params2)
    np.testing.assert_allclose(got.theta_mech(), ident.theta_mech())
    np.testing.assert_allclose(got.theta_fluid(), params2.theta_fluid())  # not identified here
    with pytest.raises(ParamFileError, match="no geometry"):
        load_params(d)
