"""The compiled interlock checks at their exact boundaries, called directly (no runner can aim a
reading at a limit to the last bit): every limit is strict, as `Interlocks` states it — a
reading equal to its range end, pressure limit, supply minimum or soft limit does not trip, the
next float beyond it does; a valve step equal to its rate limit and a following error equal to
its bound do not trip either; a non-finite command trips as an invalid command."""

from __future__ import annotations

import math

import numpy as np
import pytest

from daq.loop import kernel as K

ALL = np.ones(5, dtype=np.intp)  # channel_range, pressure, soft_limits, following, valve_limits


def _check(eng: list[float], q: list[float], *, supply: int = -1, supply_min: float = 0.0):
    trip_i, trip_f = np.zeros(2, dtype=np.intp), np.zeros(2)
    flags = K.check_cycle(
        np.array(eng, dtype=float), np.zeros(len(eng), dtype=np.uint8),
        np.array(q, dtype=float), ALL,
        np.full(len(eng), -10.0), np.full(len(eng), 10.0),
        np.array([1], dtype=np.intp), np.array([7.0]),
        True, supply, supply_min,
        np.array([-1.0]), np.array([1.0]),
        trip_i, trip_f,
    )  # fmt: skip
    return flags, int(trip_i[0]), int(trip_i[1])


def up(x: float) -> float:
    return math.nextafter(x, math.inf)


def down(x: float) -> float:
    return math.nextafter(x, -math.inf)


def test_a_reading_at_its_range_ends_does_not_trip_and_one_beyond_does() -> None:
    assert _check([-10.0, 0.0, 10.0], [0.0])[0] == 0
    assert _check([down(-10.0), 0.0, 0.0], [0.0])[1:] == (K._CHANNEL_RANGE, 0)
    assert _check([0.0, 0.0, up(10.0)], [0.0])[1:] == (K._CHANNEL_RANGE, 2)


def test_a_pressure_at_its_limit_does_not_trip_and_one_above_does() -> None:
    assert _check([0.0, 7.0, 0.0], [0.0])[0] == 0
    assert _check([0.0, up(7.0), 0.0], [0.0])[1:] == (K._PRESSURE, 0)


def test_a_supply_at_its_minimum_holds_and_one_below_is_lost() -> None:
    assert _check([0.0, 0.0, 3.0], [0.0], supply=2, supply_min=3.0)[0] == 0
    assert _check([0.0, 0.0, down(3.0)], [0.0], supply=2, supply_min=3.0)[1:] == (
        K._SUPPLY_LOST, 2,
    )  # fmt: skip
    # a supply watched on input channel 0 is watched too
    assert _check([down(3.0), 0.0, 0.0], [0.0], supply=0, supply_min=3.0)[1:] == (
        K._SUPPLY_LOST, 0,
    )  # fmt: skip


@pytest.mark.parametrize("lim", [-1.0, 1.0])
def test_an_angle_at_its_soft_limit_does_not_trip_and_one_beyond_does(lim: float) -> None:
    assert _check([0.0, 0.0, 0.0], [lim])[0] == 0
    beyond = up(lim) if lim > 0 else down(lim)
    assert _check([0.0, 0.0, 0.0], [beyond])[1:] == (K._SOFT_LIMIT, 0)


def _finish(volts: float, prev: float, *, ref: float = 0.0, q: float = 0.0, fe: float = 1.0):
    trip_i, trip_f = np.zeros(2, dtype=np.intp), np.zeros(2)
    out = np.zeros(1)
    flags = K.finish_outputs(
        np.array([volts]), np.array([0], dtype=np.intp), out,
        np.array([ref]), np.array([ref]), np.zeros(1), False, 1e-3,
        np.array([q]), ALL, np.array([fe]), np.zeros(1),
        np.array([-5.0]), np.array([5.0]), np.array([0.5]), np.array([prev]),
        trip_i, trip_f,
    )  # fmt: skip
    return flags, int(trip_i[0])


def test_a_valve_step_at_its_rate_limit_does_not_trip_and_one_above_does() -> None:
    assert _finish(1.5, 1.0) == (0, 0)
    assert _finish(up(1.5), 1.0)[1] == K._VALVE_RATE


def test_a_following_error_at_its_bound_does_not_trip_and_one_above_does() -> None:
    assert _finish(0.0, 0.0, ref=0.0, q=-1.0, fe=1.0) == (0, 0)
    flags, code = _finish(0.0, 0.0, ref=0.0, q=down(-1.0), fe=1.0)
    assert code == K._FOLLOWING and flags == 1 << (K._FOLLOWING - 1)


def test_a_non_finite_command_trips_as_an_invalid_command() -> None:
    for bad in (math.nan, math.inf):
        flags, code = _finish(bad, 0.0)
        assert code == K._COMMAND_INVALID
        assert flags == 1 << (K._COMMAND_INVALID - 1)


def _scale(raw: list[float], table: list[tuple[float, float]], fb_index: np.ndarray, width: int):
    """`scale_fill` of channels 0..n−1 with gain 1, offset 0, channel 0 through `table` (the
    converter's units are the counts: nl_u = [0, 1, count]) in an (1, width) padded row."""
    ni = len(raw)
    eng = np.full(ni, np.nan)
    nl_x, nl_c = np.zeros((1, width)), np.zeros((1, width))
    nl_x[0, : len(table)] = [p[0] for p in table]
    nl_c[0, : len(table)] = [p[1] for p in table]
    fbm = np.full(fb_index.shape, -7.0)
    K.scale_fill(
        np.array(raw, dtype=float), eng, np.ones(ni), np.zeros(ni),
        np.array([0], dtype=np.intp), np.array([K._TABLE], dtype=np.intp),
        np.array([[0.0, 1.0, float(len(table))]]), nl_c, nl_x,
        np.zeros(ni), np.ones(ni), fb_index, fbm,
    )  # fmt: skip
    return eng, fbm


@pytest.mark.parametrize("x", [-5.0, 0.0, 1.0, 2.5, 4.0, 6.0, 9.0])
def test_a_table_scaling_is_daq_scalings_own_inside_at_the_knots_and_beyond_either_end(
    x: float,
) -> None:
    """The compiled table (padded to a wider row than the table, as the loop packs several)
    is `daq.scaling._interp`: linear between knots, the end segments extrapolated."""
    from daq.scaling import _interp

    table = [(0.0, 0.0), (1.0, 2.0), (4.0, 5.0), (6.0, 11.0)]
    eng, _ = _scale([x, 0.0], table, np.full((5, 1), -1, dtype=np.intp), width=7)
    xs, ys = [p[0] for p in table], [p[1] for p in table]
    assert eng[0] == pytest.approx(_interp(x, xs, ys), abs=1e-12)


def test_feedback_fields_without_a_channel_are_left_alone() -> None:
    """`fb_index` −1 (no channel for that field of that joint) leaves its feedback value; the
    others take their channel's engineering value."""
    idx = np.array([[0, 1], [-1, 1], [-1, -1], [1, -1], [0, 0]], dtype=np.intp)
    eng, fbm = _scale([3.0, 4.0], [(0.0, 0.0), (10.0, 20.0)], idx, width=2)
    np.testing.assert_array_equal(eng, [6.0, 4.0])
    want = np.where(idx >= 0, eng[np.maximum(idx, 0)], -7.0)
    np.testing.assert_array_equal(fbm, want)


def test_the_compiled_feedback_map_follows_the_profile_field_by_field_and_joint_by_joint() -> None:
    """A joint without a potentiometer (joint 2 here): its piston field has no channel (−1),
    joint 1's has its own; every other field of either joint reads its channel — the input
    index of the channel with that role on that joint, taken from the profile here."""
    from daq.loop.feedback_map import FIELDS
    from daq.profile import load_profile
    from tests.conftest import PROFILES
    from tests.loop.compiled_harness import sim_loop

    base = load_profile(PROFILES / "sim-2dof.toml")
    data = base.model_dump(exclude_none=True)
    data["channels"] = [
        c for c in data["channels"] if not (c["role"] == "potentiometer" and c["joint"] == "j2")
    ]
    profile = type(base).model_validate(data)
    loop = sim_loop(profile, compiled=True)
    nj = len(profile.joints)
    got = K._i(loop.kc.I, K.FB_INDEX, len(FIELDS) * nj).reshape(len(FIELDS), nj)
    names = [c.name for c in profile.inputs]
    for f, (_, role) in enumerate(FIELDS):
        for j, joint in enumerate(profile.joints):
            ch = profile.joint_channel(joint.name, role)
            assert got[f, j] == (-1 if ch is None else names.index(ch.name)), (role, joint.name)
    assert got[[r for _, r in FIELDS].index("potentiometer")].tolist()[1] == -1


def test_compile_all_reports_the_seconds_it_took() -> None:
    """The warm-up's figure (logged at start-up) is the time the compile or cache load took:
    measured around a second call (cached kernels), it lies within the call's own span."""
    import time

    K.compile_all()
    t0 = time.perf_counter()
    took = K.compile_all()
    span = time.perf_counter() - t0
    assert 0.0 <= took <= span


def test_a_kernel_trip_names_its_channel_joint_output_or_supply() -> None:
    """`CompiledCycle.where`: the name a compiled trip reports, by the trip's code and index."""
    from daq.profile import load_profile
    from tests.conftest import PROFILES
    from tests.loop.compiled_harness import sim_loop

    loop = sim_loop(load_profile(PROFILES / "sim-2dof.toml"), compiled=True)
    kc, il = loop.kc, loop.interlocks
    assert kc.where(K._CHANNEL_RANGE, 2, "sup") == il.input_names[2]
    assert kc.where(K._CHANNEL_FAULT, 1, "sup") == il.input_names[1]
    assert kc.where(K._PRESSURE, 3, "sup") == il.p_names[3]
    assert kc.where(K._SOFT_LIMIT, 1, "sup") == il.joint_names[1]
    assert kc.where(K._FOLLOWING, 0, "sup") == il.joint_names[0]
    assert kc.where(K._VALVE_RATE, 1, "sup") == il.output_names[1]
    assert kc.where(K._COMMAND_INVALID, 0, "sup") == il.output_names[0]
    assert kc.where(K._SUPPLY_LOST, 0, "p_supply") == "p_supply"
    assert kc.where(99, 0, "sup") == ""
    assert len({il.input_names[2], il.p_names[3], il.joint_names[1], il.output_names[1]}) == 4
