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
