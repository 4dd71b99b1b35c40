"""The live view's channels carry the telemetry row's values: every field of the joints,
valves, sensors and timing messages against the column it names, in its display unit, on rows
of the simulated rig's loop (armed, holding) and on a row whose columns all differ; the
following error is reference − position, with its sign."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from daq.backends.sim import SimBackend
from daq.bridge.channels import (
    TOPIC_JOINTS,
    TOPIC_PRESSURES,
    TOPIC_SENSORS,
    TOPIC_TIMING,
    TOPIC_VALVES,
    ChannelSet,
)
from daq.loop import Loop
from daq.loop.states import State
from daq.profile import load_profile
from daq.profile.schema import Profile
from daq.sample_layout import SampleLayout
from daq.service.control_api import joint_gains, make_hold_runner
from tests.loop.conftest import cycles, post

PROFILE = Path(__file__).resolve().parents[2] / "hw_profiles" / "sim-2dof-realistic.toml"

#: Wire unit → (display unit, factor), written out here rather than taken from the bridge.
UNITS = {"rad": ("deg", 180.0 / math.pi), "Pa": ("bar", 1e-5), "m": ("mm", 1e3), "s": ("us", 1e6)}


def _expected(profile: Profile, cols: list[dict[str, Any]], row: np.ndarray) -> dict[str, Any]:
    """What each message should hold, from the layout's column names and units alone."""
    roles = {c.name: c.role for c in profile.channels}
    shown: dict[str, dict[str, float]] = {"command": {}, "spool": {}, "values": {}, "bar": {}}
    position: dict[str, float] = {}
    reference: dict[str, float] = {}
    for i, c in enumerate(cols):
        unit, k = UNITS.get(c["unit"], (c["unit"], 1.0))
        value = float(row[i]) * k
        if c["role"] == "ref":
            reference[c["joint"]] = value
        elif c["role"] == "cmd":
            shown["command"][f"{c['channel']}_{unit}"] = value
        elif c["role"] == "eng":
            key = f"{c['channel']}_{unit}"
            if roles[c["channel"]] == "resolver":
                position[c["joint"]] = value
            elif c["unit"] == "Pa":
                shown["bar"][key] = value
            elif roles[c["channel"]] == "lvdt":
                shown["spool"][key] = value
            else:
                shown["values"][key] = value
    names = [c["name"] for c in cols]
    return {
        "position": position,
        "reference": reference,
        "error": {j: reference[j] - position[j] for j in reference},
        **shown,
        "wake_us": float(row[names.index("wake_latency")]) * 1e6,
        "compute_us": float(row[names.index("compute_time")]) * 1e6,
    }


def _check(cs: ChannelSet, profile: Profile, cols: list[dict[str, Any]], row: np.ndarray) -> None:
    want = _expected(profile, cols, row)
    msgs = cs.row_messages(list(row))
    approx = lambda d: pytest.approx(d, rel=1e-12, abs=1e-12)  # noqa: E731
    joints = msgs[TOPIC_JOINTS]
    assert joints["position_deg"] == approx(want["position"])
    assert joints["reference_deg"] == approx(want["reference"])
    assert joints["error_deg"] == approx(want["error"])
    assert msgs[TOPIC_PRESSURES]["bar"] == approx(want["bar"])
    assert msgs[TOPIC_VALVES]["command"] == approx(want["command"])
    assert msgs[TOPIC_VALVES]["spool"] == approx(want["spool"])
    assert msgs[TOPIC_SENSORS]["values"] == approx(want["values"])
    assert msgs[TOPIC_TIMING]["wake_latency_us"] == approx(want["wake_us"])
    assert msgs[TOPIC_TIMING]["compute_time_us"] == approx(want["compute_us"])
    for m in msgs.values():
        assert m["seq"] == int(row[0]) and m["t"] == approx(float(row[1]))


class Held(NamedTuple):
    profile: Profile
    cols: list[dict[str, Any]]
    rows: np.ndarray
    cs: ChannelSet
    names: list[str]


@pytest.fixture(scope="module")
def held_rows() -> Held:
    """500 cycles of the realistic simulated rig holding its home under the real hold law."""
    profile = load_profile(PROFILE)
    sim = SimBackend.from_profile(profile)
    sim.open()
    sim.precharge(2)  # the station's supply already at working pressure
    hold = make_hold_runner(profile, joint_gains(profile))
    loop = Loop(profile, sim, hold=hold, virtual_time=True, ring_capacity=1 << 10)
    loop.warm_up()
    post(loop, "power", 2)  # [hydraulics]: arming needs power on
    cycles(loop, 5)
    post(loop, "arm")
    cycles(loop, 500)
    assert loop.state == State.ARMED
    n = loop.ring.published
    rows = np.array([loop.ring.data[s & loop.ring.mask] for s in range(n - 400, n)])
    cols = SampleLayout.from_profile(profile).to_dict()
    cs = ChannelSet(cols, {c.name: c.role for c in profile.channels})
    return Held(profile, cols, rows, cs, [c["name"] for c in cols])


def test_channels_carry_the_loops_rows(held_rows: Held) -> None:
    profile, cols, rows, cs, names = held_rows
    cmd = rows[:, [names.index("cmd.valve_1"), names.index("cmd.valve_2")]]
    assert np.ptp(cmd, axis=0).min() > 0.0  # the valves are driven: their values are seen
    for row in rows[::7]:
        _check(cs, profile, cols, row)


def test_every_field_reads_its_own_column(held_rows: Held) -> None:
    """A row whose columns all differ: a field reading its neighbour's column, or a unit
    factor applied to the wrong field, cannot match."""
    profile, cols, rows, cs, _ = held_rows
    row = rows[-1].copy()
    row[7:] = 1.0 + 0.37 * np.arange(len(row) - 7)  # after the integer header fields
    row[5], row[6] = 123e-6, 456e-6
    _check(cs, profile, cols, row)


def test_the_following_error_is_reference_minus_position(held_rows: Held) -> None:
    _, _, rows, cs, names = held_rows
    row = rows[-1].copy()
    q1, q2 = names.index("eng.q_1"), names.index("eng.q_2")
    row[names.index("ref.j1")] = row[q1] + math.radians(2.0)  # reference ahead: error > 0
    row[names.index("ref.j2")] = row[q2] - math.radians(3.0)
    err = cs.row_messages(list(row))[TOPIC_JOINTS]["error_deg"]
    assert err["j1"] == pytest.approx(2.0, abs=1e-9)
    assert err["j2"] == pytest.approx(-3.0, abs=1e-9)
