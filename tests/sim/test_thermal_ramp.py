"""The simulator's forced temperature ramp (`[backend.sim.plant.thermal] ramp_c_per_s`,
`ramp_start_s`, `ramp_duration_s`; issue 14, drift tests): T moves at the given rate inside the
window only, seen on the temperature channel."""

from __future__ import annotations

import numpy as np
import pytest

from daq.profile import ProfileError, parse_profile
from tests.sim.test_effects import BASE, BLOCKED, _record, _rig


def test_ramp_moves_the_temperature_inside_its_window_only() -> None:
    thermal = {
        "initial_c": 30.0,
        "ambient_c": 30.0,
        "cooling_time_constant_s": 1.0e6,
        "ramp_c_per_s": 4.0,
        "ramp_start_s": 0.5,
        "ramp_duration_s": 1.0,
    }
    rig = _rig(BLOCKED, {"thermal": thermal})
    T = _record(rig, 2.0)["oil_temp"]  # noise off: the reading is T (to the 16-bit A/D)
    t = np.arange(1, len(T) + 1) * rig.period
    before, during, after = t < 0.5, (t > 0.6) & (t < 1.4), t > 1.55
    assert np.ptp(T[before]) < 0.01 and np.ptp(T[after]) < 0.01
    slope = np.polyfit(t[during], T[during], 1)[0]
    assert slope == pytest.approx(4.0, rel=0.01)
    assert T[after].mean() - T[before].mean() == pytest.approx(4.0, abs=0.02)
    assert rig.backend.true_oil_temperature() == pytest.approx(34.0, abs=0.01)


def test_ramp_rate_out_of_range_is_refused_naming_the_key() -> None:
    data = {**BASE, "backend": {**BASE["backend"]}}
    data["backend"]["sim"] = {**BASE["backend"]["sim"]}
    data["backend"]["sim"]["plant"] = {
        **BASE["backend"]["sim"]["plant"],
        "thermal": {"ramp_c_per_s": 50.0},
    }
    with pytest.raises(ProfileError, match="ramp_c_per_s"):
        parse_profile(data)
