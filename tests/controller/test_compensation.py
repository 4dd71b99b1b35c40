"""Friction and valve compensation (`controller.compensation`): the Coulomb feed-forward's
force; the valve's null and lap (`valve_spool`, `pid_ff`'s `valve_null` / `valve_lap`) checked
against the simulator's own metering edges (`controller.plant.dynamics.valve_edges`), through
the law, and from a parameter file's `[structure]` table."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from controller import compensation as comp
from controller.experiment import ExperimentError
from controller.feedback import Feedback
from controller.feedforward import PlantModel
from controller.laws import FeedforwardPid
from controller.paramfile import ParamFileError, load_params
from controller.plant.dynamics import valve_edges
from controller.plant.params import G_PS, JointEffects, PlantEffects, PlantParams
from controller.tables import build_law


def test_the_coulomb_force_takes_each_directions_identified_force_through_the_band() -> None:
    v_eps = 1e-3
    for sd in (-5e-3, -1e-3, -2e-4, 0.0, 3e-4, 1e-3, 0.02):
        fc = 450.0 if sd >= 0 else 380.0
        want = 1.2 * fc * math.tanh(sd / v_eps)
        assert comp.coulomb_force(sd, 450.0, 380.0, v_eps, 1.2) == pytest.approx(want, abs=1e-12)
    assert comp.coulomb_force(0.05, 450.0, 380.0, v_eps, 1.0) == pytest.approx(450.0)
    assert comp.coulomb_force(-0.05, 450.0, 380.0, v_eps, 1.0) == pytest.approx(-380.0)
    # switched off, or no band: nothing
    assert comp.coulomb_force(0.01, 450.0, 380.0, v_eps, 0.0) == 0.0
    assert comp.coulomb_force(0.01, 450.0, 380.0, 0.0, 1.0) == 0.0


def _cap_flow(params: PlantParams, lap: float, xo: float) -> float:
    """The simulator's net flow into joint 1's cap chamber at metering position xo, both
    chambers at half the supply (equal pressure drop over every edge)."""
    eff = PlantEffects((JointEffects(lap=lap), JointEffects()))
    P, E = params.pack(), eff.pack(params)
    return float(valve_edges(P, E, 0, xo, 0.5 * P[G_PS], 0.5 * P[G_PS])[0])


@pytest.fixture
def matched(params2: PlantParams) -> PlantParams:
    """sim-2dof with matched edges, so that flow is opening × one gain."""
    return dataclasses.replace(params2, flow_gains=np.full((2, 4), 6.0e-7))


@pytest.mark.parametrize("b0", [0.0, 0.007, -0.006])
def test_an_underlapped_valve_compensated_flows_as_a_centred_zero_lapped_one(
    matched: PlantParams, b0: float
) -> None:
    """Underlap: the inverse is exact everywhere, inside the band (where both edges open and
    the valve's gain doubles) and outside it (where the flow is offset by |d|)."""
    lap = -0.007
    for w in np.linspace(-0.05, 0.05, 201):
        x = comp.valve_spool(float(w), b0, lap)
        want = _cap_flow(matched, 0.0, float(w))
        got = _cap_flow(matched, lap, x + b0)  # the metering edges see u + b₀
        assert got == pytest.approx(want, rel=1e-9, abs=1e-15), w
    # uncompensated, the same valve is 2× too strong at a quarter of the band
    assert _cap_flow(matched, lap, 0.25 * -lap) == pytest.approx(
        2 * _cap_flow(matched, 0.0, 0.25 * -lap)
    )


def test_an_overlapped_valve_compensated_has_no_dead_band_and_a_bounded_correction(
    matched: PlantParams,
) -> None:
    lap = 0.006
    ws = np.linspace(-0.04, 0.04, 401)
    flows = np.array([_cap_flow(matched, lap, comp.valve_spool(float(w), 0.0, lap)) for w in ws])
    assert np.all(np.diff(flows) >= 0), "the compensated flow never falls as w rises"
    # Uncompensated, nothing flows across the whole band |w| < d; the smoothing leaves a dead
    # band of |w| < 0.37 d (where w + d tanh(2w/d) = d), under 40 % of it.
    assert _cap_flow(matched, lap, 0.99 * lap) == 0.0
    dead = ws[flows == 0.0]
    assert dead.size and dead.max() - dead.min() <= 0.4 * 2 * lap
    assert _cap_flow(matched, lap, comp.valve_spool(0.4 * lap, 0.0, lap)) > 0.0
    # beyond twice the lap it flows as the zero-lapped valve (tanh(4) = 0.9993)
    for w in (2.5 * lap, -3 * lap, 0.03):
        assert _cap_flow(matched, lap, comp.valve_spool(w, 0.0, lap)) == pytest.approx(
            _cap_flow(matched, 0.0, w), rel=0.01
        )
    corr = [abs(comp.valve_spool(float(w), 0.004, lap) - w) for w in ws]
    assert max(corr) <= lap + 0.004 + 1e-12


def test_no_null_and_no_lap_leaves_the_command_as_it_is() -> None:
    for w in (-0.3, -1e-4, 0.0, 2e-3, 1.1):
        assert comp.valve_spool(w, 0.0, 0.0) == w


def _commands(law: FeedforwardPid, period: float) -> np.ndarray:
    t = np.arange(400) * period
    q_ref = np.radians([40.0, 30.0])[None, :] + 0.05 * np.sin(2 * math.pi * t)[:, None]
    qd_ref = np.gradient(q_ref, period, axis=0)
    qdd_ref = np.gradient(qd_ref, period, axis=0)
    fb = Feedback(2)
    fb.q[:] = q_ref[0]
    fb.p_cap[:], fb.p_rod[:] = 4e6, 3e6
    law.enable(fb, q_ref[0])
    out = np.zeros((len(t), 2))
    for k in range(len(t)):
        fb.q[:] = q_ref[k] - 0.002 * np.cos(3 * t[k])
        law.update(t[k], fb, q_ref[k], qd_ref[k], qdd_ref[k], out[k])
    return out


def test_pid_ff_applies_the_files_null_and_lap_each_switch_on_its_own(
    params2: PlantParams, rig2: tuple
) -> None:
    gains, limits = rig2
    valve = np.array([[0.007, -0.007], [-0.006, -0.005]])
    model = PlantModel(dataclasses.replace(params2, valve_structure=valve))
    kv = np.asarray(model.kv)
    plain = _commands(FeedforwardPid(gains, limits, 1e-3, model), 1e-3)
    null = FeedforwardPid(gains, limits, 1e-3, model, valve_null=True)
    # the null offset alone: every command moved by −b₀/k_v (volts), nothing else
    shift = np.broadcast_to(-valve[:, 0] / kv, plain.shape)
    np.testing.assert_allclose(_commands(null, 1e-3) - plain, shift, atol=1e-12)
    assert null.valve_volts == pytest.approx(list(-valve[:, 0] / kv))
    # the lap alone: each command is the inverse of the lap at the uncompensated one
    lap = _commands(FeedforwardPid(gains, limits, 1e-3, model, valve_lap=True), 1e-3)
    want = [[comp.valve_spool(v * kv[j], 0.0, valve[j, 1]) / kv[j] for j, v in enumerate(r)]
            for r in plain]  # fmt: skip
    np.testing.assert_allclose(lap, want, atol=1e-12)
    assert np.max(np.abs(lap - plain)) > 1e-3
    # switched per joint: joint 1's null only
    one = _commands(FeedforwardPid(gains, limits, 1e-3, model, valve_null=[True, False]), 1e-3)
    np.testing.assert_allclose(one[:, 0] - plain[:, 0], -valve[0, 0] / kv[0], atol=1e-12)
    np.testing.assert_array_equal(one[:, 1], plain[:, 1])


def test_valve_compensation_without_an_identified_structure_is_refused(
    params2: PlantParams, rig2: tuple
) -> None:
    gains, limits = rig2
    with pytest.raises(ValueError, match=r"valve_lap needs .*\[structure\]"):
        FeedforwardPid(gains, limits, 1e-3, PlantModel(params2), valve_lap=True)
    wide = dataclasses.replace(params2, valve_structure=np.array([[0.0, -0.2], [0.0, 0.0]]))
    with pytest.raises(ValueError, match=r"joint 1: the identified valve lap -200.0 mV .*±70"):
        FeedforwardPid(gains, limits, 1e-3, PlantModel(wide), valve_lap=True)
    # a file's wide null is no reason to refuse the lap alone
    FeedforwardPid(gains, limits, 1e-3, PlantModel(wide), valve_null=True)


def test_the_experiment_table_takes_the_switches_as_booleans(
    params2: PlantParams, rig2: tuple
) -> None:
    from controller import trajectories as tr
    from controller.experiment import Segment

    gains, limits = rig2
    model = PlantModel(dataclasses.replace(params2, valve_structure=np.zeros((2, 2))))
    ctrl = {"kind": "pid_ff", "valve_null": "yes"}
    seg = Segment(name="s", trajectory=tr.Hold([0.7, 0.5]), controller=ctrl, duration=1.0)
    with pytest.raises(ExperimentError, match="valve_null must be true, false or a list of them"):
        build_law(seg, gains, limits, 1e-3, model)
    ctrl["valve_null"] = [True]
    with pytest.raises(ExperimentError, match="valve_null must be true, false or a list of 2"):
        build_law(seg, gains, limits, 1e-3, model)
    ctrl["valve_null"] = True
    law = build_law(seg, gains, limits, 1e-3, model)
    assert isinstance(law, FeedforwardPid)


ESTIMATOR_FILE = {
    "format": "hydrig-params/1",
    "rig": "sim2dof",
    "plant": {"inertia": [4.5, 1.3]},
}


def test_the_parameter_files_structure_table_is_the_only_source(params2: PlantParams) -> None:
    d = ESTIMATOR_FILE | {
        "structure": {"valve_null_offset_v": [0.007, -0.006], "valve_lap_v": [-0.007, -0.007]}
    }
    vs = load_params(d, params2).valve_structure
    assert vs is not None
    np.testing.assert_array_equal(vs, [[0.007, -0.007], [-0.006, -0.007]])
    # no table: nothing, whatever the profile's (simulator's) valve is
    assert load_params(ESTIMATOR_FILE, params2).valve_structure is None
    bad = ESTIMATOR_FILE | {"structure": {"valve_null_offset_v": [0.0], "valve_lap_v": [0, 0]}}
    with pytest.raises(ParamFileError, match=r"structure\.valve_null_offset_v: expected 2 values"):
        load_params(bad, params2)
    nan = ESTIMATOR_FILE | {"structure": {"valve_null_offset_v": [0, 0], "valve_lap_v": [0, "x"]}}
    with pytest.raises(ParamFileError, match=r"structure\.valve_lap_v: expected finite numbers"):
        load_params(nan, params2)
