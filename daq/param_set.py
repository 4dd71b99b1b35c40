"""The service's current plant-parameter set: what `--params` and `load_params` hand it.

A parameter file (controller.paramfile: the estimator's `hydrig-params/1` or
`hydrig-plant-params` v1) is parsed and checked here, off the loop, against the profile: the rig
id it names, its joint count and — for a profile on the reference model — the parameter names of
each identified model (a file from another rig or model is refused naming the mismatch). Keys the
file lacks come from the profile's `[plant]`. The set carries where it came from, when it was
loaded and the SHA-256 of the file's bytes (the same as `sha256sum FILE`), for `status` and every
recording's metadata.
"""

from __future__ import annotations

import hashlib
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daq.commands.spec import MAX_PARAM_TEXT
from daq.profile.schema import Profile


@dataclass(frozen=True)
class ParamSet:
    params: Any  # controller.plant.params.PlantParams
    source: str
    loaded_utc: str
    sha256: str
    rig: str | None
    models: tuple[str, ...]

    def summary(self) -> dict[str, Any]:
        """What `status`, `params show` and the recordings' metadata carry."""
        return {
            "source": self.source,
            "loaded_utc": self.loaded_utc,
            "sha256": self.sha256,
            "rig": self.rig,
            "models": list(self.models),
        }


def profile_model(profile: Profile) -> str:
    """The profile's identification model spec ("reference" or "module:function")."""
    return profile.estimator.model if profile.estimator is not None else "reference"


def parse_param_set(text: str, source: str, profile: Profile) -> ParamSet:
    """Parse and check a parameter file's text; raise ValueError naming what is wrong."""
    from controller.paramfile import (
        check_compatible,
        file_models,
        file_rig,
        load_params,
        reference_model_names,
    )
    from daq.profile.plant import has_identified_values, known_params

    if len(text) > MAX_PARAM_TEXT:
        raise ValueError(f"{len(text)} characters; a parameter file has at most {MAX_PARAM_TEXT}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not valid TOML: {exc}") from None
    # Known geometry and initial guesses only: the simulator's truth never reaches the controller.
    base = known_params(profile) if profile.plant is not None else None
    # The service cannot evaluate a user model (it never imports the estimator): for those the
    # model check is `rigctl params load`'s, which can.
    expected = (
        reference_model_names(base)
        if base is not None and profile_model(profile) == "reference"
        else None
    )
    try:
        check_compatible(data, profile.rig.id, base, expected)
        params = load_params(data, base)
        rig, models = file_rig(data), tuple(file_models(data))
    except (TypeError, AttributeError, KeyError, IndexError) as exc:
        # controller.paramfile names the key for what it expects; a value of the wrong kind
        # altogether (a number where a table or list belongs) lands here.
        raise ValueError(f"malformed parameter file (a value of the wrong kind): {exc}") from None
    if not has_identified_values(params):
        # NaN: neither the file nor the profile's [plant] guesses give it.
        missing = missing_values(params)
        raise ValueError(f"no value for {missing} (in neither the file nor the profile's [plant])")
    return ParamSet(
        params=params,
        source=source,
        loaded_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        rig=rig,
        models=models,
    )


def missing_values(params: Any) -> list[str]:
    """The names of the identified parameters that have no value (NaN) in `params`."""
    names = params.mech_names() + params.fluid_names()
    values = [*params.theta_mech(), *params.theta_fluid()]
    return [n for n, v in zip(names, values, strict=True) if v != v]


def read_param_set(path: str | Path, profile: Profile) -> ParamSet:
    """`parse_param_set` of a file (its absolute path is the source)."""
    p = Path(path)
    return parse_param_set(p.read_text(encoding="utf-8"), str(p.resolve()), profile)


def planning_params(profile: Profile, params_path: str | Path | None = None) -> Any:
    """The values an experiment is planned with (`rigctl predict`, `estimator.bulk_experiment`):
    an earlier identification's parameter file, else the profile's initial guesses — never the
    simulator's truth, which `plant_params` would give on a simulated rig (a plan made with the
    answer would promise error bars no real rig could reach). ValueError naming every missing
    value and the two ways to give it."""
    from daq.profile.plant import has_identified_values, known_params

    if profile.plant is None:
        raise ValueError(
            f"profile '{profile.rig.id}' has no [plant] section: planning needs the known geometry"
        )
    if params_path is not None:
        try:
            return read_param_set(params_path, profile).params
        except (OSError, ValueError) as exc:
            raise ValueError(f"--params {params_path}: {exc}") from None
    params = known_params(profile)
    if not has_identified_values(params):
        missing = missing_values(params)
        raise ValueError(
            f"rig '{profile.rig.id}': planning the motion's pressures and flows needs a value for "
            f"every identified parameter; none for {', '.join(missing)}. Give --params FILE (an "
            "earlier identification's parameter file) or initial guesses in the profile's [plant] "
            "(bulk_modulus_pa, coupling) and [[plant.joints]] (inertia, viscous_friction, "
            "gravity_moment, flow_gains)"
        )
    return params
