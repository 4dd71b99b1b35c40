"""`controller.tuning` / `hydraulic_linear`: the linearised loop agrees with the simulator on
where the hydraulic resonance goes unstable, tune's gains are predicted stable with their
margin, unstable sets and another rig's gains file are refused."""

from __future__ import annotations

import numpy as np
import pytest

from controller import hydraulic_linear as hl
from controller import tuning
from daq.profile.plant import plant_params
from tests.controller.simloop import profile

HOME = np.radians([40.0, 30.0])


@pytest.fixture(scope="module")
def tuned() -> list[tuning.JointTuning]:
    return tuning.tune(plant_params(profile("sim-2dof")), HOME, 1e-3, 3.0, 2.0)


def test_model_places_the_resonance_where_the_simulator_has_it() -> None:
    lin = hl.linearise(plant_params(profile("sim-2dof")), 0, HOME)
    f_h, zeta = hl.hydraulic_mode(plant_params(profile("sim-2dof")), 0, HOME)
    assert 6.0 < f_h < 12.0 and 0.0 < zeta < 0.15  # the ~7.5 Hz limit cycle at p = 8
    assert not hl.is_stable(lin, hl.LoopGains(8.0), 1e-3)
    assert hl.is_stable(lin, hl.LoopGains(8.0, dp=0.3, dp_hp_hz=1.0), 1e-3)


def test_tuned_gains_keep_their_margin(tuned: list[tuning.JointTuning]) -> None:
    for t in tuned:
        assert t.gain_margin >= 2.0
        assert t.min_damping >= tuning.MIN_DAMPING
        assert 1.5 < t.bandwidth_hz < 6.0
        assert t.gains.dp > 0.0 and t.gains.dp_hp_hz == tuning.DP_HP_HZ


def test_unstable_set_and_other_rigs_file_are_refused(tuned: list[tuning.JointTuning]) -> None:
    params = plant_params(profile("sim-2dof"))
    assert (
        tuning.check_gains(params, HOME, 1e-3, [{"p": 2.0, "dp": 0.2, "dp_hp_hz": 1.0}] * 2) == []
    )
    problems = tuning.check_gains(params, HOME, 1e-3, [{"p": 30.0}, {"p": 2.0, "dp": 0.2}])
    assert len(problems) == 1 and "joint 1: p=30" in problems[0]
    assert "predicted unstable" in problems[0]
    d = tuning.gains_file("sim2dof", ["j1", "j2"], tuned, {})
    import tomllib

    back = tomllib.loads(tuning.dumps_gains(d))
    got = tuning.read_gains_file(back, "sim2dof", ["j1", "j2"])
    assert got["j1"]["p"] == pytest.approx(tuned[0].gains.p)
    with pytest.raises(ValueError, match="gains file is for rig 'sim2dof', this rig is 'other'"):
        tuning.read_gains_file(back, "other", ["j1", "j2"])
    with pytest.raises(ValueError, match=r"bandwidth 500 Hz out of range"):
        tuning.tune(params, HOME, 1e-3, 500.0, 2.0)
