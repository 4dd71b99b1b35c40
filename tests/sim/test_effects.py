"""Each effect beyond the identification model does what its equation says (docs/simulator.md),
seen only through the simulator's channels (scaled readings, as the loop sees them).

The test plants are the one-joint reference rig with noise off. "Piston blocked" is a load so
heavy (and weightless) that it does not move on the tests' time scale: its chamber volumes are
then constant, and the pressures follow the flows alone.
"""

from __future__ import annotations

import copy
import math
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.plant.oil import walther_viscosity
from controller.plant.params import P_ATM
from daq.backends.sim import SimRig
from daq.profile import parse_profile
from daq.profile.plant import plant_params
from tests.conftest import PROFILES

BASE = tomllib.loads((PROFILES / "sim-1dof.toml").read_text())
BLOCKED = {"inertia": 1.0e7, "gravity_moment": 0.0}


def _rig(
    joint: dict[str, Any] | None = None,
    plant: dict[str, Any] | None = None,
    sensors: dict[str, dict[str, float]] | None = None,
    noise: bool = False,
) -> SimRig:
    data = copy.deepcopy(BASE)
    truth = data["backend"]["sim"]["plant"]
    truth["joints"][0].update(joint or {})
    truth.update(plant or {})
    for c in data["channels"]:
        if not noise:
            c["sim_noise"] = 0.0
        if sensors and c["name"] in sensors:
            c["sim_error"] = sensors[c["name"]]
    return SimRig(parse_profile(data))


def _record(rig: SimRig, seconds: float, valve: float = 0.0) -> dict[str, np.ndarray]:
    steps = round(seconds / rig.period)
    out = np.empty((steps, len(rig.inputs)))
    for k in range(steps):
        out[k] = rig.step(np.array([valve]))
    return {c.name: out[:, i] for i, c in enumerate(rig.inputs)}


def _chamber_volumes(rig: SimRig, s: float, v0_cap: float, v0_rod: float) -> tuple[float, float]:
    p = plant_params(rig.profile)
    half = 0.5 * p.stroke[0]
    return v0_cap + (half + s) * p.area_cap[0], v0_rod + (half - s) * p.area_rod[0]


def _decay_time(t: np.ndarray, y: np.ndarray) -> float:
    """Time constant of y = y0 e^(−t/τ) by a log-linear fit."""
    slope = np.polyfit(t, np.log(np.abs(y)), 1)[0]
    return -1.0 / slope


# ----------------------------------------------------------------------------- nominal


def test_shipped_nominal_profiles_run_the_identification_model_only() -> None:
    """sim-2dof/sim-1dof have no effects: the dynamics take the model's own code path."""
    assert not _rig().backend.true_effects.active
    assert _rig().backend._E[0] == 0.0  # E_ON


# ----------------------------------------------------------------------------- leakage


@pytest.mark.parametrize("temp_c", [40.0, 20.0])
def test_internal_leakage_decays_the_pressure_difference_with_its_time_constant(
    temp_c: float,
) -> None:
    """Valve nulled, piston blocked: d(p⁺−p⁻)/dt = −b C (1/V⁺ + 1/V⁻)(p⁺−p⁻), with the true
    (hose) dead volumes, C scaled by ν(T_ref)/ν(T) (laminar leakage, Walther viscosity) and b
    by e^(−k (T − T_ref)) (Tait)."""
    c_int, v0c, v0r = 4.0e-12, 9.5e-5, 1.1e-4
    thermal = {"initial_c": temp_c, "ambient_c": temp_c, "reference_c": 40.0}
    rig = _rig(
        {**BLOCKED, "leakage": {"internal_m3_s_per_pa": c_int}}
        | {"dead_volume_cap": v0c, "dead_volume_rod": v0r},
        {"thermal": thermal},
    )
    ch = _record(rig, 0.15)
    dp = ch["p_cap_1"] - ch["p_rod_1"]
    t = np.arange(1, len(dp) + 1) * rig.period
    vc, vr = _chamber_volumes(rig, float(ch["piston_1"][0]), v0c, v0r)
    bulk = 2.33e8 * math.exp(-0.0058 * (temp_c - 40.0))
    c = c_int * walther_viscosity(40.0, 9.32, 3.65) / walther_viscosity(temp_c, 9.32, 3.65)
    tau = 1.0 / (bulk * c * (1.0 / vc + 1.0 / vr))
    keep = np.abs(dp) > 0.05 * abs(dp[0])  # above the converters' resolution
    assert abs(dp[0]) > 3e5
    assert _decay_time(t[keep], dp[keep]) == pytest.approx(tau, rel=0.03)
    # The nominal dead volume would give a clearly different time constant.
    vcn, vrn = _chamber_volumes(rig, float(ch["piston_1"][0]), 7.9e-5, 7.9e-5)
    assert abs(1.0 / (bulk * c * (1.0 / vcn + 1.0 / vrn)) / tau - 1.0) > 0.1


def test_external_leakage_drains_each_chamber_with_its_time_constant() -> None:
    """dp/dt = −(b/V) C_ext p per chamber."""
    c_ext = 3.0e-12
    rig = _rig({**BLOCKED, "leakage": {"external_m3_s_per_pa": c_ext}})
    ch = _record(rig, 0.2)
    t = np.arange(1, len(ch["p_cap_1"]) + 1) * rig.period
    vc, vr = _chamber_volumes(rig, float(ch["piston_1"][0]), 7.9e-5, 7.9e-5)
    for name, v in (("p_cap_1", vc), ("p_rod_1", vr)):
        assert _decay_time(t, ch[name]) == pytest.approx(v / (2.33e8 * c_ext), rel=0.03)


# ----------------------------------------------------------------------------- friction


def _breakaway_force(bias: float, friction: dict[str, float]) -> float:
    """The largest net piston force (from the pressure channels) the piston withstands before it
    slides, the force ramped by a null bias (valve command 0, weightless link). The bias passes
    more flow than the smooth model's creep below F_S (a few v_ε), so the chamber compresses."""
    # A light link (83 kg at the piston): the breakaway is not masked by inertial force.
    light = {"gravity_moment": 0.0, "inertia": 1.0, "viscous_friction": 0.0}
    rig = _rig({**light, "friction": friction, "valve": {"null_bias_v": bias}})
    p = plant_params(rig.profile)
    ch = _record(rig, 1.0)
    force = p.area_cap[0] * ch["p_cap_1"] - p.area_rod[0] * ch["p_rod_1"]
    s = ch["piston_1"]
    win = 10
    speed = np.abs(s[win:] - s[:-win]) / (win * rig.period)
    # 3 v_ε: the smooth model creeps at v_ε·atanh(F/F_S), under 3 v_ε up to 0.99 F_S.
    moving = np.flatnonzero(speed > 0.003)
    assert moving.size, "the piston never broke away"
    return float(force[moving[0] + win // 2])


def test_breakaway_needs_the_stiction_force_in_each_direction() -> None:
    fr = {
        "coulomb_pos_n": 300.0,
        "coulomb_neg_n": 200.0,
        "stiction_pos_n": 600.0,
        "stiction_neg_n": 350.0,
    }
    f_pos = _breakaway_force(0.0035, fr)
    f_neg = _breakaway_force(-0.0035, fr)
    # Within a few % of F_S: the smooth model peaks a little below it (tanh × Stribeck bump),
    # the piston's inertia and the detection's delay add a little.
    assert 0.9 * 600.0 <= f_pos <= 1.06 * 600.0
    assert -1.06 * 350.0 <= f_neg <= -0.9 * 350.0
    # Without the Stribeck bump it slides near the Coulomb level, far below that F_S.
    assert _breakaway_force(0.0035, {"coulomb_pos_n": 300.0}) < 1.15 * 300.0


def test_direction_dependent_viscous_friction_takes_its_force_in_one_direction() -> None:
    """Extending at speed v, an extra f_v⁺ costs f_v⁺·v more pressure force; f_v⁻ costs none."""

    def run(friction: dict[str, float]) -> tuple[float, float]:
        rig = _rig({"gravity_moment": 0.0, "friction": friction})
        p = plant_params(rig.profile)
        ch = _record(rig, 0.3, valve=0.1)
        s = ch["piston_1"]
        force = p.area_cap[0] * ch["p_cap_1"] - p.area_rod[0] * ch["p_rod_1"]
        return float((s[-1] - s[-101]) / (100 * rig.period)), float(force[-100:].mean())

    v0, f0 = run({})
    v1, f1 = run({"viscous_pos_n_s_per_m": 2.0e4})
    _, f2 = run({"viscous_neg_n_s_per_m": 2.0e4})
    assert v0 > 0.01  # extending, not on a stop
    assert f1 - f0 == pytest.approx(2.0e4 * v1, rel=0.05)
    assert abs(f2 - f0) < 0.01 * 2.0e4 * v0


# ----------------------------------------------------------------------------- valve


def test_null_bias_moves_pressures_with_the_spool_reading_zero() -> None:
    ch = _record(_rig({**BLOCKED, "valve": {"null_bias_v": 0.01}}), 0.05)
    assert np.abs(ch["spool_1"]).max() < 1e-3
    assert ch["p_cap_1"][-1] - ch["p_cap_1"][0] > 5e5
    assert ch["p_rod_1"][-1] - ch["p_rod_1"][0] < -5e5
    still = _record(_rig(BLOCKED), 0.05)
    assert np.ptp(still["p_cap_1"]) < 1e4


def test_overlap_is_a_dead_band_of_the_spool() -> None:
    """Spool inside the overlap: no flow; beyond it: flow."""
    lap = 0.05  # V of spool; command volts × k_v (0.25) = spool volts

    def rise(valve_v: float) -> float:
        ch = _record(_rig({**BLOCKED, "valve": {"lap_v": lap}}), 0.05, valve=valve_v)
        return float(ch["p_cap_1"][-1] - ch["p_cap_1"][0])

    assert abs(rise(0.8 * lap / 0.25)) < 1e4
    assert rise(1.6 * lap / 0.25) > 5e5


def test_null_leakage_holds_blocked_ports_between_supply_and_tank() -> None:
    """With the ports blocked, the edges' leakage openings balance where
    Cf⁺⁺ √(ps − p⁺) = Cf⁺⁻ √p⁺, i.e. p⁺ = ps Cf⁺⁺² / (Cf⁺⁺² + Cf⁺⁻²) (likewise p⁻)."""
    rig = _rig({**BLOCKED, "valve": {"null_leakage_l_min": 2.0}})
    ch = _record(rig, 1.0)
    p = plant_params(rig.profile)
    cf = p.flow_gains[0]
    ps = p.supply_pressure
    assert ch["p_cap_1"][-1] == pytest.approx(ps * cf[0] ** 2 / (cf[0] ** 2 + cf[1] ** 2), rel=0.01)
    assert ch["p_rod_1"][-1] == pytest.approx(ps * cf[3] ** 2 / (cf[3] ** 2 + cf[2] ** 2), rel=0.01)


# ----------------------------------------------------------------------------- fluid


def _bulk_with_air(p: float, bulk: float, alpha: float, n: float) -> float:
    r = (P_ATM / (P_ATM + p)) ** (1.0 / n)
    return bulk * (1.0 + alpha * r) / (1.0 + alpha * bulk * r / (n * (P_ATM + p)))


def test_entrained_air_softens_the_oil_at_low_pressure() -> None:
    """Cap chamber emptied through a fixed opening (negative null bias): ṗ = −E(p)/V · Cf⁺⁻ b √p,
    so E(p) ∝ −ṗ/√p; its ratio between 2 MPa and 0.3 MPa follows the entrained-air law."""
    bias = -0.002
    rig = _rig(
        {**BLOCKED, "valve": {"null_bias_v": bias}},
        {"bulk_modulus_pa": 1.0e9, "fluid": {"air_content": 0.01, "polytropic_index": 1.0}},
    )
    pc = _record(rig, 0.4)["p_cap_1"]
    rate = np.gradient(pc, rig.period)

    def stiffness(p: float) -> float:
        k = int(np.argmin(np.abs(pc - p)))
        return float(-rate[k] / math.sqrt(pc[k]))

    measured = stiffness(2.0e6) / stiffness(3.0e5)
    expected = _bulk_with_air(2.0e6, 1.0e9, 0.01, 1.0) / _bulk_with_air(3.0e5, 1.0e9, 0.01, 1.0)
    assert expected > 2.0  # the effect is large here
    assert measured == pytest.approx(expected, rel=0.05)


# ----------------------------------------------------------------------------- temperature


def test_oil_cools_to_ambient_with_its_time_constant() -> None:
    """No losses (valve nulled, no leakage): T − T_amb = (T0 − T_amb) e^(−t/τ) on the channel."""
    thermal = {"initial_c": 60.0, "ambient_c": 20.0, "cooling_time_constant_s": 5.0}
    ch = _record(_rig(BLOCKED, {"thermal": thermal}), 3.0)
    t = np.arange(1, len(ch["oil_temp"]) + 1) * 1e-3
    assert _decay_time(t, ch["oil_temp"] - 20.0) == pytest.approx(5.0, rel=0.01)


def test_a_throttling_run_heats_the_oil_by_its_losses() -> None:
    """Valve sine on the moving arm: the temperature channel rises (no cooling at τ = 1e6 s),
    by no more than the supply's whole power p_s·Q over the heat capacity."""
    thermal = {
        "initial_c": 30.0,
        "ambient_c": 30.0,
        "cooling_time_constant_s": 1.0e6,
        "heat_capacity_j_per_k": 500.0,
    }
    rig = _rig(None, {"thermal": thermal})
    steps = 3000
    temps = np.empty(steps)
    for k in range(steps):
        v = 3.0 * math.sin(2 * math.pi * 1.0 * k * rig.period)
        temps[k] = rig.step(np.array([v]))[rig.index("oil_temp")]
    rise = temps[-1] - temps[0]
    assert rise > 0.3
    assert np.all(np.diff(temps[::100]) > -0.01)  # heating only
    # Bound: the valve passes at most Cf·u_max·√p_s of flow, all of it throttled at ≤ p_s.
    p = plant_params(rig.profile)
    q_max = p.flow_gains[0].max() * p.spool_max[0] * math.sqrt(p.supply_pressure)
    assert rise < p.supply_pressure * q_max * steps * rig.period / 500.0


# ----------------------------------------------------------------------------- sensors


def test_sensor_offset_gain_and_drift_show_in_the_engineering_value() -> None:
    """The loop decodes with the declared scaling: the true sensor's error is what it reads."""
    err = {"offset": 5.0e4, "gain_error": 0.02, "drift_per_hour": 3.6e6}  # 1 kPa/s
    clean = _record(_rig(BLOCKED), 1.0)["p_cap_1"]
    seen = _record(_rig(BLOCKED, sensors={"p_cap_1": err}), 1.0)["p_cap_1"]
    t = np.arange(1, len(clean) + 1) * 1e-3
    expected = clean * 1.02 + 5.0e4 + 1.0e3 * t
    lsb = 20.0 / 65536 * 2.0e6
    assert np.abs(seen - expected).max() <= 1.5 * lsb


def test_null_shift_with_temperature_is_a_null_bias_on_the_spool_flow() -> None:
    """b₀(T) = null_bias + db/dT·(T − T_ref): oil held 20 K off the reference (no cooling, no
    losses at null) with db/dT = 0.5 mV/K drives the blocked chambers exactly as a fixed null
    bias of 10 mV does in the same oil, in the direction of the temperature's sign; at the
    reference it does nothing."""

    def run(temp_c: float, shift: float, bias: float = 0.0) -> dict[str, np.ndarray]:
        thermal = {
            "initial_c": temp_c,
            "ambient_c": min(max(temp_c, -20.0), 60.0),
            "reference_c": 40.0,
            "cooling_time_constant_s": 1.0e6,
            "heat_capacity_j_per_k": 1.0e12,  # the flow's losses do not move T
        }
        valve = {"null_shift_v_per_k": shift, "null_bias_v": bias}
        return _record(_rig({**BLOCKED, "valve": valve}, {"thermal": thermal}), 0.05)

    warm = run(60.0, 5.0e-4)
    assert np.abs(warm["spool_1"]).max() < 1e-3  # the spool reads null: only the flow moves
    assert warm["p_cap_1"][-1] - warm["p_cap_1"][0] > 5e5
    assert warm["p_rod_1"][-1] - warm["p_rod_1"][0] < -5e5
    as_bias = run(60.0, 0.0, bias=0.01)  # same oil (bulk modulus, viscosity), fixed bias
    for ch in ("p_cap_1", "p_rod_1"):
        np.testing.assert_allclose(warm[ch], as_bias[ch], rtol=1e-6, atol=1.0)
    cold = run(20.0, 5.0e-4)  # below the reference: the opposite edges open
    assert cold["p_cap_1"][-1] - cold["p_cap_1"][0] < -5e5
    at_reference = run(40.0, 5.0e-4)
    assert np.ptp(at_reference["p_cap_1"]) < 1e4


def test_a_joint_pushed_onto_its_end_stop_does_not_drive_the_other() -> None:
    """Joint 2 held on its retracted stop by its pressure must not push joint 1 through m12:
    both pistons, driven to retract, come to rest on their retracted stops."""
    from controller.plant.dynamics import cylinder
    from daq.backends.sim.rig import SimRig
    from daq.profile.loader import load_profile
    from daq.station.twin import with_station

    root = Path(__file__).resolve().parents[2]
    rig = SimRig(
        with_station(load_profile(root / "hw_profiles" / "sim-2dof-realistic.toml")), powered=False
    )
    rig.backend.write_power(1)  # low stage
    for _ in range(3000):
        rig.step(np.zeros(2))
    for _ in range(6000):
        rig.step(np.array([-0.3, -0.15]))
    x = rig.backend.true_state()
    s, _ = cylinder(rig.true_params, x[:2])
    np.testing.assert_allclose(s, -0.5 * rig.true_params.stroke, atol=1e-6)
