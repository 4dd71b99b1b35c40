"""No `[estimator]` key is silently ignored: each acts on the chosen model family (the
reference `mechanical`/`fluid` models or the real-rig family's `mechanical_lin`/`fluid_lin`),
or the estimator refuses to start naming the key and the family."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from daq.profile.loader import load_profile
from daq.profile.schema import Estimator, Profile
from daq.sample_layout import SampleLayout
from estimator.models import LinearModel
from estimator.online import OnlineIdentifier, configure_models

ROOT = Path(__file__).resolve().parents[2]
REALISTIC = ROOT / "hw_profiles" / "sim-2dof-realistic.toml"
NOMINAL = ROOT / "hw_profiles" / "sim-2dof.toml"


def _identifier(path: Path, **keys: Any) -> OnlineIdentifier:
    profile: Profile = load_profile(path)
    est = ident_cfg(path, **keys)
    profile = profile.model_copy(update={"estimator": est})
    return OnlineIdentifier(profile, SampleLayout.from_profile(profile).names)


def _models(ident: OnlineIdentifier) -> dict[str, LinearModel]:
    return {c.model.name: c.model for c in ident.chains}


@pytest.mark.parametrize(
    ("key", "value", "model", "attr"),
    [
        ("mech_cutoff_hz", 7.5, "mechanical", "cutoff_hz"),
        ("mech_taps", 151, "mechanical", "taps"),
        ("fluid_cutoff_hz", 13.0, "fluid", "cutoff_hz"),
        ("fluid_taps", 99, "fluid", "taps"),
    ],
)
@pytest.mark.parametrize("family", ["reference", "lin"])
def test_conditioning_keys_act_on_either_family(
    key: str, value: float, model: str, attr: str, family: str
) -> None:
    path = NOMINAL if family == "reference" else REALISTIC
    name = model if family == "reference" else f"{model}_lin"
    default = getattr(_models(_identifier(path))[name], attr)
    assert default != value  # the key changes something
    models = _models(_identifier(path, **{key: value}))
    assert getattr(models[name], attr) == value
    other = next(m for n, m in models.items() if n != name)
    assert getattr(other, attr) == getattr(_models(_identifier(path))[other.name], attr)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("coulomb_band_m_s", 0.004),
        ("valve_null_offset_v", [0.01, -0.01]),
        ("valve_lap_v", [-0.005, -0.005]),
    ],
)
def test_real_rig_keys_act_on_the_lin_family_and_are_refused_on_the_reference(
    key: str, value: Any
) -> None:
    lin = _models(_identifier(REALISTIC, **{key: value}))
    if key == "coulomb_band_m_s":
        shape = lin["mechanical_lin"].shape
        assert shape is not None and shape.value == value
    else:
        sw = lin["fluid_lin"].switches
        assert sw is not None
        assert list(sw.value[0 if key == "valve_null_offset_v" else 1]) == value
    with pytest.raises(ValueError) as exc:
        _identifier(NOMINAL, **{key: value})
    assert f"[estimator] {key} = " in str(exc.value)
    assert "family 'reference'" in str(exc.value)


@pytest.mark.parametrize("key", ["mech_cutoff_hz", "mech_taps", "fluid_cutoff_hz", "fluid_taps"])
def test_conditioning_keys_without_their_model_are_refused(key: str) -> None:
    """A user family with neither a mechanical nor a fluid model: the key names no model."""
    ident = _identifier(NOMINAL)
    own = [replace(c.model, name=f"custom{i}") for i, c in enumerate(ident.chains)]
    assert configure_models(own, ident_cfg(NOMINAL)) == own
    cfg = ident_cfg(NOMINAL, model="tests.custom:models", **{key: 11})
    with pytest.raises(ValueError, match=rf"\[estimator\] {key} = 11: .*'tests.custom:models'"):
        configure_models(own, cfg)


def ident_cfg(path: Path, **keys: Any) -> Any:
    return (load_profile(path).estimator or Estimator()).model_copy(update=keys)
