"""The simulated converters and fault injection: what the loop sees is only counts."""

from __future__ import annotations

import numpy as np
import pytest

from daq.backends.sim import FaultSpecError, SimBackend, SimRig
from daq.profile import load_profile, parse_profile
from daq.scaling import counts_to_eng
from tests.conftest import PROFILES

PROFILE = load_profile(PROFILES / "sim-2dof.toml")


def _with_faults(*faults: str):  # type: ignore[no-untyped-def]
    data = PROFILE.model_dump(mode="python", exclude_none=True)
    data["backend"]["sim"]["faults"] = list(faults)
    return parse_profile(data)


def _read_many(backend: SimBackend, n: int) -> np.ndarray:
    out = np.zeros((n, backend.n_inputs))
    for k in range(n):
        backend.read(k * PROFILE.period, out[k])
        backend.advance(PROFILE.period)
    return out


def test_counts_are_integer_codes_within_the_converter_range() -> None:
    b = SimBackend.from_profile(PROFILE)
    b.open()
    raw = _read_many(b, 200)
    assert np.array_equal(raw, np.round(raw))
    full = np.array([1 << c.converter.bits for c in PROFILE.inputs])
    assert (raw >= 0).all() and (raw < full).all()


def test_noise_matches_the_profile_and_the_seed_repeats() -> None:
    a = SimBackend.from_profile(PROFILE)
    b = SimBackend.from_profile(PROFILE)
    a.open()
    b.open()
    ra, rb = _read_many(a, 2000), _read_many(b, 2000)
    assert np.array_equal(ra, rb)  # same seed, same counts
    i = [c.name for c in PROFILE.inputs].index("p_cap_1")
    eng = np.array([counts_to_eng(PROFILE.inputs[i], c) for c in ra[:, i]])
    assert 3.5e3 < eng.std() < 7e3  # 5 kPa noise at rest (+ quantisation)


def test_rail_and_stuck_faults_change_only_their_channel() -> None:
    b = SimBackend.from_profile(_with_faults("p_cap_1:rail_high", "q_1:stuck@0.1"))
    b.open()
    raw = _read_many(b, 300)
    names = [c.name for c in PROFILE.inputs]
    assert (raw[:, names.index("p_cap_1")] == 2**16 - 1).all()
    q1 = raw[100:, names.index("q_1")]
    assert (q1 == q1[0]).all()
    assert np.ptp(raw[:, names.index("p_rod_1")]) > 0  # the others stay live


def test_noise_burst_multiplies_the_noise() -> None:
    b = SimBackend.from_profile(_with_faults("piston_1:noise_burst:40@0.5"))
    b.open()
    raw = _read_many(b, 1000)
    col = raw[:, [c.name for c in PROFILE.inputs].index("piston_1")]
    assert col[500:].std() > 10 * col[:500].std()


def test_stall_read_blocks_once(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("daq.backends.sim.backend.time.sleep", slept.append)
    b = SimBackend.from_profile(_with_faults("q_1:stall_read:2.5@0.05"))
    b.open()
    _read_many(b, 100)
    assert slept == [2.5]


def test_stuck_valve_ignores_commands() -> None:
    rig = SimRig(_with_faults("valve_1:stuck_valve@0.0"))
    x0 = rig.backend.true_state()
    for _ in range(300):
        rig.step(np.array([5.0, 0.0]))
    x = rig.backend.true_state()
    assert abs(x[0] - x0[0]) < np.radians(0.5)  # joint 1 did not move under +5 V


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("nosuch:rail_high", "no channel 'nosuch'"),
        ("q_1:melted", "unknown kind 'melted'"),
        ("q_1:stall_read:x", "must be numbers"),
        ("q_1", "expected <channel>:<kind>"),
    ],
)
def test_malformed_fault_specs_are_refused(spec: str, fragment: str) -> None:
    with pytest.raises(FaultSpecError, match=fragment):
        SimBackend.from_profile(_with_faults(spec))


def test_real_time_read_catches_the_plant_up_with_the_clock() -> None:
    """In real time the loop only calls read(t): the plant integrates up to t by itself, to the
    same state as stepping it period by period in virtual time."""
    real, virtual = SimBackend.from_profile(PROFILE), SimBackend.from_profile(PROFILE)
    real.open()
    virtual.open()
    raw = np.zeros(real.n_inputs)
    cmd = np.array([0.2, -0.1])
    for b in (real, virtual):
        b.read(0.0, raw)
        b.write(0.0, cmd)
    for _ in range(50):
        virtual.advance(PROFILE.period)
    real.read(0.05, raw)  # 50 periods later, one call
    np.testing.assert_array_equal(real.true_state(), virtual.true_state())
    assert real.true_state()[0] > PROFILE.home_rad()[0] + np.radians(0.2)  # it did move


def test_warm_up_moves_neither_the_plant_nor_the_readings() -> None:
    """The loop warms the backend up before its first timed cycle (the plant step's numba code
    loads at its first call); that must not advance the plant or consume noise."""
    warmed, cold = SimBackend.from_profile(PROFILE), SimBackend.from_profile(PROFILE)
    for b in (warmed, cold):
        b.open()
        b.write(0.0, np.full(b.n_outputs, 1.5))  # a live command: the scratch step uses it
    before = warmed.true_state()
    warmed.warm_up()
    assert np.array_equal(warmed.true_state(), before)
    assert np.array_equal(_read_many(warmed, 50), _read_many(cold, 50))


def test_the_loop_warms_its_backend_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from daq.loop import Loop

    b = SimBackend.from_profile(PROFILE)
    b.open()
    calls: list[str] = []
    monkeypatch.setattr(b, "warm_up", lambda: calls.append("warm_up"))
    Loop(PROFILE, b, virtual_time=True).warm_up()
    assert calls == ["warm_up"]


def _quiet(profile):  # type: ignore[no-untyped-def]
    data = profile.model_dump(mode="python", exclude_none=True)
    for c in data["channels"]:
        c["sim_noise"] = 0.0
    return parse_profile(data)


def test_noise_rows_regenerate_what_each_read_added() -> None:
    """`noise_rows` (the run's noise realization, for the simulator's truth only) gives the
    normals the k-th read drew, across the draw blocks: the noisy backend's readings less the
    same backend's without noise are σ times them, to a converter step."""
    from daq.backends.sim.backend import NOISE_BLOCK, noise_rows

    reads = 2 * NOISE_BLOCK + 300
    noisy, quiet = SimBackend.from_profile(PROFILE), SimBackend.from_profile(_quiet(PROFILE))
    noisy.open()
    quiet.open()
    rn, rq = _read_many(noisy, reads), _read_many(quiet, reads)
    i = [c.name for c in PROFILE.inputs].index("p_cap_1")
    ch = PROFILE.inputs[i]
    diff = np.array(
        [
            counts_to_eng(ch, a) - counts_to_eng(ch, b)
            for a, b in zip(rn[:, i], rq[:, i], strict=True)
        ]
    )
    lsb = abs(counts_to_eng(ch, 1.0) - counts_to_eng(ch, 0.0))
    k = np.arange(reads)
    z = noise_rows(PROFILE.backend.sim.seed, len(PROFILE.inputs), k)[:, i]  # type: ignore[union-attr]
    assert np.abs(diff - ch.sim_noise * z).max() <= 1.01 * lsb
    # One read off is another realization altogether.
    off = noise_rows(PROFILE.backend.sim.seed, len(PROFILE.inputs), k + 1)[:, i]  # type: ignore[union-attr]
    assert abs(np.corrcoef(diff, off)[0, 1]) < 0.1
    with pytest.raises(ValueError, match="negative"):
        noise_rows(0, 3, np.array([-1]))
