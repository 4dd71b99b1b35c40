"""The model feed-forward on a chain (`controller.feedforward_chain.ChainModel`): the planar
rigs expressed as chains give `PlantModel`'s numbers; on the excavator the equivalent piston
reproduces the chain's own torques and flows, the law runs through the runner for four joints,
and it follows a multisine better than the profile's PID."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from controller.compiled.laws import compile_law
from controller.experiment import Experiment
from controller.feedforward import PlantModel
from controller.feedforward_chain import ChainModel, plant_model
from controller.plant.chain.hydraulics import drive_state
from controller.plant.chain.model import Chain
from controller.plant.chain.planar import chain_from_planar
from controller.plant.chain.plant import ChainPlant
from controller.plant.chain.profile import ChainProfile
from controller.runner import ExperimentRunner
from daq.profile.loader import load_profile
from daq.profile.plant import sim_plant
from daq.sim_closed_loop import SimLoop, gains_limits, rms_deg

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def excavator_chain(excavator: ChainProfile) -> Chain:
    return excavator.chain


@pytest.mark.parametrize("name", ["sim-1dof.toml", "sim-2dof.toml"])
def test_a_planar_rig_as_a_chain_gives_the_planar_models_numbers(name: str) -> None:
    params, _ = sim_plant(load_profile(ROOT / "hw_profiles" / name))
    planar, chain = PlantModel(params), ChainModel(chain_from_planar(params))
    assert plant_model(params).__class__ is PlantModel
    n = params.n
    rng = np.random.default_rng(3)
    for _ in range(30):
        q, qd, qdd = rng.uniform(0.0, 1.0, n), rng.normal(0.0, 1.0, n), rng.normal(0.0, 3.0, n)
        a, b = [0.0] * n, [0.0] * n
        planar.inverse_dynamics(q, qd, qdd, a)
        chain.inverse_dynamics(q, qd, qdd, b)
        assert b == pytest.approx(a, rel=1e-12, abs=1e-9)
        planar.gravity_friction(q, qd, a)
        chain.gravity_friction(q, qd, b)
        assert b == pytest.approx(a, rel=1e-12, abs=1e-9)
        for j in range(n):
            assert chain.cylinder(j, q[j]) == pytest.approx(planar.cylinder(j, q[j]), abs=1e-14)
            s, _ = planar.cylinder(j, q[j])
            force, sd = rng.normal(0.0, 2e4), rng.normal(0.0, 0.05)
            assert chain.spool_steady(j, force, sd) == pytest.approx(
                planar.spool_steady(j, force, sd), rel=1e-12
            )
            args = (j, s, sd, 1e6, -1e6, 5e6, 4e6)
            assert chain.spool_measured(*args) == pytest.approx(
                planar.spool_measured(*args), rel=1e-12
            )


def test_the_excavators_equivalent_pistons_carry_the_chains_torque_and_volumes(
    excavator_chain: Chain,
) -> None:
    """τ = r (A⁺p⁺ − A⁻p⁻) and V± of the equivalent piston equal the chain's own
    (`drive_state`: the boom's two jacks, the swing's motor through its gear)."""
    model, plant = ChainModel(excavator_chain), ChainPlant(excavator_chain)
    fx = plant.E[0] > 0.5
    rng = np.random.default_rng(4)
    for _ in range(20):
        q = rng.uniform(-0.3, 0.3, 4) + np.array([0.0, 0.0, 0.0, 0.5])
        for j in range(4):
            vc, vr, tc, tr = drive_state(plant.L, plant.J, plant.F, plant.E, j, q[j], fx)
            s, r = model.cylinder(j, q[j])
            assert r * model.Ac[j] == pytest.approx(tc, rel=1e-12)
            assert r * model.Ar[j] == pytest.approx(tr, rel=1e-12)
            assert model.chamber_volumes(j, s) == pytest.approx((vc, vr), rel=1e-12)
    assert model.kv[1] < 0.0  # the boom's inverted coil reaches the valve inverse


def test_jacks_that_move_unlike_are_refused(excavator_chain: Chain) -> None:
    boom = excavator_chain.joints[1]
    left, right = boom.drive
    moved = replace(right, pin_child=(right.pin_child[0] * 0.7, *right.pin_child[1:]))
    chain = replace(
        excavator_chain,
        joints=(
            excavator_chain.joints[0],
            replace(boom, drive=(left, moved)),
            *excavator_chain.joints[2:],
        ),
    )
    with pytest.raises(ValueError, match=r"'boom'.*jacks move unlike"):
        ChainModel(chain)


def test_alike_jacks_of_different_sizes_count_by_their_moment_arms(excavator_chain: Chain) -> None:
    """The boom's second jack 1.3 times the first (pins, lengths): ℓ′ is 1.3 times the
    first's at every angle, so its areas count 1.3 times in the equivalent piston, and the
    piston's τ = r (A⁺p⁺ − A⁻p⁻) and volumes still equal the chain's."""
    joints = list(excavator_chain.joints)
    left, right = joints[1].drive
    c = 1.3
    big = replace(
        right,
        pin_parent=(c * right.pin_parent[0], c * right.pin_parent[1], right.pin_parent[2]),
        pin_child=(c * right.pin_child[0], c * right.pin_child[1], right.pin_child[2]),
        closed_length=c * right.closed_length,
        stroke=c * right.stroke,
    )
    joints[1] = replace(joints[1], drive=(left, big))
    chain = replace(excavator_chain, joints=tuple(joints))
    model, plant = ChainModel(chain), ChainPlant(chain)
    assert model.Ac[1] == pytest.approx(left.area_cap + c * big.area_cap, rel=1e-9)
    fx = plant.E[0] > 0.5
    for q in np.linspace(-0.3, 0.3, 7):
        vc, vr, tc, tr = drive_state(plant.L, plant.J, plant.F, plant.E, 1, q, fx)
        s, r = model.cylinder(1, q)
        assert r * model.Ac[1] == pytest.approx(tc, rel=1e-9)
        assert r * model.Ar[1] == pytest.approx(tr, rel=1e-9)
        assert model.chamber_volumes(1, s) == pytest.approx((vc, vr), rel=1e-9)


def test_a_joint_without_a_drive_is_refused(excavator_chain: Chain) -> None:
    joints = list(excavator_chain.joints)
    joints[3] = replace(joints[3], drive=None)  # its valve stays: the chain accepts that
    with pytest.raises(ValueError, match=r"'bucket' has no drive"):
        ChainModel(replace(excavator_chain, joints=tuple(joints)))


def test_warm_up_leaves_nothing_to_compile_for_a_model_sent_to_the_loop(
    excavator_chain: Chain,
) -> None:
    """The service pickles the runner (and its model) to the loop process; after the loop's
    warm-up of a model of its own, the sent model's calls need no new specialisation."""
    import pickle

    from controller.plant.chain.rnea import jack_geometry, rnea

    ChainModel(excavator_chain).warm_up()
    known = len(rnea.signatures), len(jack_geometry.signatures)
    sent = pickle.loads(pickle.dumps(ChainModel(excavator_chain)))
    q = np.radians([5.0, -3.0, 2.0, 30.0])
    tau = [0.0] * 4
    sent.inverse_dynamics(q, q, q, tau)
    sent.gravity_friction(q, [0.0] * 4, tau)
    for j in range(4):
        sent.cylinder(j, float(q[j]))
    assert (len(rnea.signatures), len(jack_geometry.signatures)) == known


def _multisine(ctrl: dict) -> Experiment:
    with open(ROOT / "experiments" / "excavator-multisine.toml", "rb") as f:
        d = tomllib.load(f)
    settle, sine = d["segments"][0], dict(d["segments"][1], repeats=1, controller=ctrl)
    d["segments"] = [settle, sine]
    return Experiment.from_dict(d)


def test_the_model_feed_forward_follows_the_excavator_better_than_its_pid() -> None:
    """The four-joint law runs through the runner (on the loop's Python path: the chain's
    model has no compiled form) and takes every joint's tracking error well below the
    profile's PID with its velocity feed-forward."""
    p = load_profile(ROOT / "hw_profiles" / "sim-excavator.toml")
    chain, _, _ = p.chain_model()
    gains, limits = gains_limits(p)
    rms = {}
    for name, ctrl, params in (
        ("pid", {"kind": "pid"}, None),
        ("pid_ff", {"kind": "pid_ff"}, chain),
    ):
        runner = ExperimentRunner(_multisine(ctrl), gains, limits, p.period, params)
        if params is not None:
            assert compile_law(runner._planned[-1].law) is None
        _, ref, q = SimLoop(p).run(runner, 12.0)
        rms[name] = np.array(rms_deg(ref, q, 3000))
    assert np.all(rms["pid_ff"] < 0.7 * rms["pid"]), rms
    assert np.all(rms["pid_ff"] < 0.3), rms
