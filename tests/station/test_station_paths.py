"""The loop's station paths that the procedure tests only cross on their way (daq/loop/station.py):
the shunt's overrange check channel by channel, a jog starting above a soft maximum, and the
shunt relays written only when they change. The loop is stepped directly in virtual time (no
thread), so each test sees exactly the cycles it asked for."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from daq.backends.base import BackendStatus
from daq.loop.interlocks import Interlocks
from daq.loop.states import State
from daq.loop.station import JOG_MARGIN_RAD, LoopStation
from daq.station.power import Power
from tests.loop.compiled_harness import sim_loop
from tests.loop.station_profile import ask, jog_payload, station_profile
from tests.station.station_rig import REALISTIC


def test_a_shunt_is_judged_on_exactly_the_channels_its_bits_close() -> None:
    """Bit k of a request is the k-th shunted channel: a loaded channel (its reading plus the
    shunt's equivalent above its limit) refuses a request whose bits include it — alone or
    with every other — and only those; the others' bits, without it, are accepted. Each
    channel in turn is the loaded one, so every bit position is checked."""
    profile = station_profile(REALISTIC)
    st = LoopStation(profile, Interlocks(profile))
    names = st.shunt_names
    assert len(names) >= 2
    inputs = [c.name for c in profile.inputs]
    every = (1 << len(names)) - 1
    for k, name in enumerate(names):
        eng = np.zeros(len(inputs))
        eng[inputs.index(name)] = st.shunt_limit[k] - 0.5 * st.shunt_equivalent[k]
        alone = st.shunt_overrange(1 << k, eng)
        assert alone is not None and alone.startswith(f"{name} reads "), (name, alone)
        assert st.shunt_overrange(every, eng) == alone
        assert st.shunt_overrange(every & ~(1 << k), eng) is None, name
        eng[inputs.index(name)] = 0.0  # at zero load every shunt may close
        assert st.shunt_overrange(every, eng) is None, name


def test_a_jog_from_above_the_soft_maximum_widens_it_past_where_the_joint_stands() -> None:
    """Joint 1 rests at ~60.7°, above its soft maximum (58°). The jog toward 50° moves the
    soft maximum to half a degree beyond where the joint stands — not half a degree short of
    it, which would trip SOFT_LIMIT in the jog's first cycle — then pulls it back in behind the
    joint until the profile's 58° is in force again."""
    profile = station_profile(initial_deg=[61.0, 30.0])
    loop = sim_loop(profile)
    loop.run(0.01)
    il = loop.interlocks
    assert math.degrees(loop.fb.q[0]) > 60.0 and math.degrees(il.soft_max[0]) == pytest.approx(58.0)
    assert ask(loop, "power", int(Power.LOW)).ok
    loop.run(3.0)  # the supply builds
    jog = ask(loop, "jog", jog_payload(profile, "j1", 50.0))
    assert jog.ok, jog.reason
    assert loop.state == State.ARMED and loop.fault is None
    # A few cycles in, the limit sits the margin beyond the joint (narrowed as it came in).
    assert il.soft_max[0] == pytest.approx(loop.fb.q[0] + JOG_MARGIN_RAD, abs=math.radians(0.05))
    assert math.degrees(il.soft_max[1]) == pytest.approx(48.0)  # joint 2 stands inside
    runner = loop.active
    loop.run(8.0)
    assert runner is not None and getattr(runner, "done", False)
    assert loop.state == State.ARMED and loop.fault is None
    assert math.degrees(loop.fb.q[0]) == pytest.approx(50.0, abs=0.5)
    assert math.degrees(il.soft_max[0]) == pytest.approx(58.0)


def test_the_shunt_relays_are_written_only_when_one_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every state change opens the relays — when one is closed. With all of them open a state
    change (reset, arm, disarm) leaves the relay lines alone: on the NI card each write is a
    driver call, with its timeout, inside the cycle that handles the command."""
    loop = sim_loop(station_profile(REALISTIC))
    loop.run(0.01)
    st, backend, inputs = loop.station, loop.backend, loop.profile.inputs
    written: list[list[str]] = []
    write_shunt = backend.write_shunt

    def recorded(mask: np.ndarray) -> Any:
        written.append([c.name for c, on in zip(inputs, mask, strict=True) if on])
        return write_shunt(mask)

    monkeypatch.setattr(backend, "write_shunt", recorded)
    bit = 1 << st.shunt_names.index("p_supply")
    assert ask(loop, "shunt", (True, bit)).ok
    assert ask(loop, "estop").ok  # the state change opens the closed relay
    assert st.shunt == 0 and written == [["p_supply"], []]
    assert ask(loop, "reset").ok
    assert ask(loop, "power", int(Power.LOW)).ok
    loop.run(3.0)
    assert ask(loop, "arm").ok
    assert ask(loop, "disarm").ok
    assert loop.state == State.IDLE and loop.fault is None
    assert written == [["p_supply"], []]  # nothing more: every relay was open


def test_a_second_estop_retries_a_shunt_relay_the_first_could_not_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The e-stop opens the closed relay; the driver fails that once, so the relay stays closed
    (and the station says so). The operator's second e-stop — the same state — tries again
    and opens it; without a closed relay an e-stop writes nothing."""
    loop = sim_loop(station_profile(REALISTIC))
    loop.run(0.01)
    st, backend = loop.station, loop.backend
    write_shunt = backend.write_shunt
    fail = [False]
    written: list[bool] = []

    def flaky(mask: np.ndarray) -> BackendStatus:
        written.append(bool(np.any(mask)))
        if fail[0]:
            fail[0] = False
            return BackendStatus.ERROR
        return write_shunt(mask)

    monkeypatch.setattr(backend, "write_shunt", flaky)
    assert ask(loop, "shunt", (True, 1 << st.shunt_names.index("p_supply"))).ok
    fail[0] = True
    assert ask(loop, "estop").ok
    assert loop.state == State.ESTOP and st.shunt != 0  # the driver refused: still closed
    assert ask(loop, "estop").ok
    assert st.shunt == 0 and written == [True, False, False]
    assert ask(loop, "estop").ok
    assert written == [True, False, False]  # every relay open: nothing more written


def test_a_shunt_reaching_exactly_its_limit_closes_one_bit_above_or_nan_does_not() -> None:
    """The pressure interlock trips above a chamber's limit, not at it: a shunted reading that
    would land exactly on the limit may close; one float above it, or a reading that is not a
    number, may not."""
    profile = station_profile(REALISTIC)
    st = LoopStation(profile, Interlocks(profile))
    inputs = [c.name for c in profile.inputs]
    for k, name in enumerate(st.shunt_names):
        limit, equiv = st.shunt_limit[k], st.shunt_equivalent[k]
        if not math.isfinite(limit):
            continue  # no finite limit: no boundary to reach
        reading = limit - equiv
        while reading + equiv < limit:
            reading = np.nextafter(reading, np.inf)
        while reading + equiv > limit:
            reading = np.nextafter(reading, -np.inf)
        assert reading + equiv == limit, name  # exactly on the limit
        eng = np.zeros(len(inputs))
        eng[inputs.index(name)] = reading
        assert st.shunt_overrange(1 << k, eng) is None, name
        eng[inputs.index(name)] = np.nextafter(reading, np.inf)
        while eng[inputs.index(name)] + equiv <= limit:
            eng[inputs.index(name)] = np.nextafter(eng[inputs.index(name)], np.inf)
        assert st.shunt_overrange(1 << k, eng) is not None, name
        eng[inputs.index(name)] = math.nan
        assert st.shunt_overrange(1 << k, eng) is not None, name


def test_arming_at_exactly_the_arm_supply_pressure_is_allowed() -> None:
    """Arming waits for the supply to reach its arm level: exactly at it is enough, one float
    below or a reading that is not a number is not."""
    loop = sim_loop(station_profile())
    st = loop.station
    assert st.check_supply
    eng = np.zeros(len(loop.profile.inputs))
    eng[st.supply_index] = st.supply_arm
    assert loop._supply_refusal(eng) is None
    for below in (np.nextafter(st.supply_arm, -np.inf), math.nan):
        eng[st.supply_index] = below
        reason = loop._supply_refusal(eng)
        assert reason is not None and "arm refused: supply pressure" in reason
