"""`load_params` / `params` on an in-process service (simulated rig, virtual time): checked
against the profile, refused while RUNNING, in `status` and in every recording's metadata."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from daq.commands.errors import CommandError
from daq.loop.states import State
from daq.profile import load_profile, plant_params
from daq.recording import read_run
from daq.service import Service
from estimator.paramfile import write_param_file
from rigctl.cmd_params import check_against_profile
from rigctl.common import UsageError
from tests.conftest import PROFILES
from tests.params.conftest import write_params


def _load(service: Service, path: Path) -> dict[str, Any]:
    return service.api.handle("load_params", {"text": path.read_text(), "source": str(path)})


def _long_hold(n: int, controller: str = "pid") -> dict[str, Any]:
    home = [40.0, 30.0][:n]
    seg = {"name": "hold", "duration_s": 3600.0, "trajectory": {"kind": "hold"}}
    if controller == "pid_ff":
        seg = {
            "name": "sine",
            "duration_s": 3600.0,
            "trajectory": {"kind": "sine", "amplitude_deg": [2.0] * n, "frequency_hz": [0.5] * n},
        }
    seg["controller"] = {"kind": controller}
    return {"name": "long", "home_deg": home, "segments": [seg]}


def test_loaded_in_idle_and_armed_shown_in_status_values_and_recordings(
    service_2dof: Service, tmp_path: Path
) -> None:
    api = service_2dof.api
    assert service_2dof.status()["params"] is None
    first = write_params(tmp_path / "first.toml", "sim-2dof.toml", scale=1.1)
    sha = hashlib.sha256(first.read_bytes()).hexdigest()
    out = _load(service_2dof, first)
    assert out["params"]["sha256"] == sha
    status = service_2dof.status()["params"]
    assert status["source"] == str(first) and status["sha256"] == sha
    assert status["rig"] == "sim2dof" and status["models"] == ["mechanical"]
    truth = plant_params(load_profile(PROFILES / "sim-2dof.toml"))
    values = api.handle("params", {}, None)["values"]
    got = [j["inertia"] for j in values["joints"]]
    assert got == pytest.approx(list(1.1 * truth.inertia), rel=1e-12)
    path = api.handle("record_start", {"name": "with-params"}, None)["path"]
    api.handle("record_stop", {}, None)
    assert read_run(path).meta["params"]["sha256"] == sha

    api.handle("arm", {}, None)
    second = write_params(tmp_path / "second.toml", "sim-2dof.toml", scale=1.2)
    _load(service_2dof, second)
    sha2 = hashlib.sha256(second.read_bytes()).hexdigest()
    assert sha2 != sha and service_2dof.status()["params"]["sha256"] == sha2
    path = api.handle("record_start", {"name": "after-reload"}, None)["path"]
    api.handle("record_stop", {}, None)
    assert read_run(path).meta["params"]["source"] == str(second)


def _run_models(service: Service) -> list[Any]:
    """The plant models the running experiment's control laws hold (its feed-forward)."""
    runner = service.loop.active
    laws = [phase.law for phase in runner._planned]
    return [law.model for law in laws if getattr(law, "model", None) is not None]


def test_a_reload_reaches_the_next_runs_controller_by_value(
    service_2dof: Service, tmp_path: Path
) -> None:
    """Values, not the file's hash: after a second `load_params` the `params` read-out and
    the feed-forward of the next run's control law hold the new inertias, not the old."""
    api = service_2dof.api
    truth = plant_params(load_profile(PROFILES / "sim-2dof.toml"))
    _load(service_2dof, write_params(tmp_path / "first.toml", "sim-2dof.toml", scale=1.1))
    api.handle("arm", {}, None)
    api.handle("run", {"experiment": _long_hold(2, "pid_ff")}, None)
    models = _run_models(service_2dof)
    assert models and all(m.M == pytest.approx(list(1.1 * truth.inertia)) for m in models)
    api.handle("stop", {}, None)
    _load(service_2dof, write_params(tmp_path / "second.toml", "sim-2dof.toml", scale=1.2))
    values = api.handle("params", {}, None)["values"]
    got = [j["inertia"] for j in values["joints"]]
    assert got == pytest.approx(list(1.2 * truth.inertia), rel=1e-12)
    api.handle("run", {"experiment": _long_hold(2, "pid_ff")}, None)
    models = _run_models(service_2dof)
    assert models and all(m.M == pytest.approx(list(1.2 * truth.inertia)) for m in models)
    api.handle("stop", {}, None)


def test_refused_while_running_with_code_and_message(service_2dof: Service, tmp_path: Path) -> None:
    api = service_2dof.api
    f = write_params(tmp_path / "p.toml", "sim-2dof.toml")
    api.handle("arm", {}, None)
    api.handle("run", {"experiment": _long_hold(2)}, None)
    assert service_2dof.loop.state == State.RUNNING
    with pytest.raises(CommandError) as exc:
        _load(service_2dof, f)
    assert exc.value.code == "invalid_state"
    assert exc.value.message == (
        "load_params: refused in state RUNNING; parameters load in IDLE or ARMED "
        "(stop the experiment first)"
    )
    assert service_2dof.status()["params"] is None
    api.handle("stop", {}, None)


def test_model_segments_use_the_parameters_at_once(service_2dof: Service, tmp_path: Path) -> None:
    api = service_2dof.api
    api.handle("arm", {}, None)
    with pytest.raises(CommandError) as exc:
        api.handle("run", {"experiment": _long_hold(2, "pid_ff")}, None)
    assert exc.value.code == "rejected" and "param" in exc.value.message
    _load(service_2dof, write_params(tmp_path / "p.toml", "sim-2dof.toml"))
    out = api.handle("run", {"experiment": _long_hold(2, "pid_ff")}, None)
    assert out["state"] == "RUNNING"
    api.handle("stop", {}, None)


def test_file_for_another_rig_refused_naming_both(service_1dof: Service, tmp_path: Path) -> None:
    f = write_params(tmp_path / "two.toml", "sim-2dof.toml")
    with pytest.raises(CommandError) as exc:
        _load(service_1dof, f)
    assert exc.value.code == "rejected"
    assert "'sim2dof'" in exc.value.message and "'sim1dof'" in exc.value.message
    assert service_1dof.status()["params"] is None


def test_file_for_another_model_refused_naming_it(service_2dof: Service, tmp_path: Path) -> None:
    p = plant_params(load_profile(PROFILES / "sim-2dof.toml"))
    other = {
        "mechanical": {
            "names": ["M", "Fv", "W"],
            "theta": [4.0, 50.0, 8.0],
            "sigma_pct": [1.0] * 3,
            "cov_diag": [0.0] * 3,
            "residual_var": 1.0,
        }
    }
    f = tmp_path / "other-model.toml"
    write_param_file(f, "sim2dof", 1000, other, p)
    with pytest.raises(CommandError) as exc:
        _load(service_2dof, f)
    assert exc.value.code == "rejected"
    assert "model 'mechanical'" in exc.value.message and "'M1'" in exc.value.message


def test_client_checks_a_user_models_parameter_names(tmp_path: Path) -> None:
    """sim-1dof identifies with estimator.examples.one_joint (names M, Fv, W): a file with the
    reference model's names (M1, …) is another model's, which only the client can tell."""
    f = write_params(tmp_path / "ref-names.toml", "sim-1dof.toml")
    with pytest.raises(UsageError, match=r"model 'mechanical'.*'M1'"):
        check_against_profile(f.read_text(), PROFILES / "sim-1dof.toml")


@pytest.mark.parametrize(
    "text",
    [
        'format = "hydrig-plant-params"\nversion = 1\njoints = [1, 2]',
        'format = "hydrig-params/1"\n[models.mechanical]\nnames = 1',
        'format = "hydrig-params/1"\nrig = "sim2dof"\n[plant]\ninertia = 3',
        'format = "hydrig-plant-params"\nversion = 1\nmeta = 5',
        "x = ",
        'format = "something else"',
    ],
)
def test_malformed_files_rejected_with_a_message(service_2dof: Service, text: str) -> None:
    with pytest.raises(CommandError) as exc:
        service_2dof.api.handle("load_params", {"text": text, "source": "bad.toml"}, None)
    assert exc.value.code == "rejected" and exc.value.message.startswith("load_params: bad.toml: ")
    assert service_2dof.status()["params"] is None
