"""Composite backend: scatter/gather over sub-backends (fakes), then sim + emulated serial."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import pytest

from daq.backends.base import Backend, BackendError, BackendStatus
from daq.backends.composite import FAULT_DEVICE_EXCEPTION, CompositeBackend
from daq.backends.factory import make_backend
from daq.backends.serial_emulator import BoardEmulator
from daq.backends.serial_resolver import FAULT_PORT
from daq.profile import Profile
from daq.profile.schema import Channel
from daq.scaling import eng_to_counts
from tests.serial.conftest import RELAXED_TIMEOUT_S, make_profile


class Fake(Backend):
    """Reads a distinct count per channel (device base + channel index); records writes."""

    instances: ClassVar[dict[str, Fake]] = {}

    def __init__(self, device: str, inputs: list[Channel], outputs: list[Channel]) -> None:
        super().__init__(len(inputs), len(outputs))
        self.device, self.inputs, self.outputs = device, inputs, outputs
        self.base = {"sim": 1000.0, "serial": 2000.0, "ni": 3000.0}[device]
        self.status = BackendStatus.OK
        self.written: list[list[float]] = []
        self.log: list[str] = []
        self.raise_in_read = False
        self.fail_open = False
        Fake.instances[device] = self

    def open(self) -> None:
        if self.fail_open:
            raise BackendError(f"{self.device} cannot open")
        self.log.append("open")

    def read(self, t: float, raw_out: np.ndarray) -> BackendStatus:
        if self.raise_in_read:
            raise RuntimeError("bug")
        raw_out[:] = self.base + np.arange(self.n_inputs)
        return self.status

    def write(self, t: float, volts: np.ndarray) -> BackendStatus:
        self.written.append(volts.tolist())
        return BackendStatus.OK

    def write_null(self) -> None:
        self.log.append("null")

    def close(self) -> None:
        self.log.append("close")

    def advance(self, dt: float) -> None:
        self.log.append(f"advance {dt}")

    def between_cycles(self, t_next: float) -> None:
        self.log.append(f"between {t_next}")


def fake_factory(
    profile: Profile, device: str, inputs: list[Channel], outputs: list[Channel]
) -> Backend:
    return Fake(device, inputs, outputs)


@pytest.fixture
def prof() -> Profile:
    return make_profile("/dev/null")


@pytest.fixture
def comp(prof: Profile) -> CompositeBackend:
    Fake.instances.clear()
    return CompositeBackend(prof, prof.inputs, prof.outputs, make_device=fake_factory)


def test_scatter_gather_in_profile_order(prof: Profile, comp: CompositeBackend) -> None:
    sim, ser = Fake.instances["sim"], Fake.instances["serial"]
    assert [c.name for c in ser.inputs] == ["q_1", "q_2"]
    assert [c.name for c in sim.outputs] == ["valve_1", "valve_2"]
    raw = np.zeros(len(prof.inputs))
    assert comp.read(0.0, raw) == BackendStatus.OK
    names = [c.name for c in prof.inputs]
    expect = {c.name: 1000.0 + i for i, c in enumerate(sim.inputs)}
    expect.update({c.name: 2000.0 + i for i, c in enumerate(ser.inputs)})
    assert raw.tolist() == [expect[n] for n in names]


def test_status_is_ored_and_faults_land_on_the_right_channels(
    prof: Profile, comp: CompositeBackend
) -> None:
    ser = Fake.instances["serial"]
    ser.status = BackendStatus.ERROR
    ser.channel_fault[:] = [0, 7]
    raw = np.zeros(len(prof.inputs))
    assert comp.read(0.0, raw) == BackendStatus.ERROR
    faults = dict(zip([c.name for c in prof.inputs], comp.channel_fault.tolist(), strict=True))
    assert faults.pop("q_2") == 7
    assert set(faults.values()) == {0}


def test_an_exception_in_a_device_read_is_contained(prof: Profile, comp: CompositeBackend) -> None:
    Fake.instances["serial"].raise_in_read = True
    raw = np.zeros(len(prof.inputs))
    assert comp.read(0.0, raw) == BackendStatus.ERROR
    q = [i for i, c in enumerate(prof.inputs) if c.role == "resolver"]
    assert comp.channel_fault[q].tolist() == [FAULT_DEVICE_EXCEPTION] * 2


def test_outputs_go_to_the_sim_and_virtual_time_too(comp: CompositeBackend) -> None:
    comp.write(0.0, np.array([1.5, -2.0]))
    assert Fake.instances["sim"].written == [[1.5, -2.0]]
    assert Fake.instances["serial"].written == []
    comp.advance(0.001)
    assert Fake.instances["sim"].log == ["advance 0.001"]
    comp.between_cycles(0.002)  # real time: every device gets the rig's share of the period
    assert Fake.instances["sim"].log[-1] == Fake.instances["serial"].log[-1] == "between 0.002"


def test_sim_gets_every_output_even_those_a_real_device_drives(prof: Profile) -> None:
    data = make_profile("/dev/null").model_dump()
    data["backend"]["ni"] = {"device": "Dev1"}
    data["channels"] = [
        {**c, "device": "ni", "physical": f"Dev1/ao{i}"} if c["role"] == "valve" else c
        for i, c in enumerate(data["channels"])
    ]
    p3 = Profile.model_validate(data, strict=False)
    Fake.instances.clear()
    comp = CompositeBackend(p3, make_device=fake_factory)
    assert [c.name for c in Fake.instances["ni"].outputs] == ["valve_1", "valve_2"]
    assert [c.name for c in Fake.instances["sim"].outputs] == ["valve_1", "valve_2"]
    assert Fake.instances["ni"].inputs == []
    comp.write(0.0, np.array([0.25, 0.5]))
    assert Fake.instances["ni"].written == Fake.instances["sim"].written == [[0.25, 0.5]]


def test_open_failure_closes_what_was_opened(prof: Profile, comp: CompositeBackend) -> None:
    Fake.instances["serial"].fail_open = True
    with pytest.raises(BackendError, match="serial cannot open"):
        comp.open()
    assert Fake.instances["sim"].log == ["open", "close"]


def test_close_nulls_every_device_first(comp: CompositeBackend) -> None:
    comp.close()
    assert Fake.instances["sim"].log == ["null", "close"]
    assert Fake.instances["serial"].log == ["null", "close"]


# ------------------------------------------------------------------ real sim + emulated serial


def test_factory_builds_sim_plus_serial_on_the_emulator() -> None:
    emu = BoardEmulator()
    emu.open_pty()
    emu.start()
    prof = make_profile(emu.port)
    comp = make_backend(prof)
    assert isinstance(comp, CompositeBackend)
    ser = next(p.backend for p in comp.parts if p.device == "serial")
    ser.timeout_s = RELAXED_TIMEOUT_S  # type: ignore[attr-defined]
    try:
        comp.open()
        comp.start()
        raw = np.zeros(len(prof.inputs))
        dt = prof.period
        for k in range(20):
            assert comp.write(k * dt, np.zeros(2)) == BackendStatus.OK
            comp.advance(dt)
            assert comp.read((k + 1) * dt, raw) == BackendStatus.OK
        homes = {j.name: math.radians(j.home_deg) for j in prof.joints}
        for i, c in enumerate(prof.inputs):
            if c.role == "resolver":
                assert c.joint is not None
                assert raw[i] == eng_to_counts(c, homes[c.joint])
            else:
                assert raw[i] > 0.0  # offset-binary counts of a live simulated sensor
        emu.remove_port()
        assert comp.read(1.0, raw) == BackendStatus.ERROR
        q = [i for i, c in enumerate(prof.inputs) if c.role == "resolver"]
        assert comp.channel_fault[q].tolist() == [FAULT_PORT] * 2
        assert not comp.channel_fault[[i for i in range(len(raw)) if i not in q]].any()
    finally:
        comp.close()
        emu.stop()


def test_ni_plus_serial_profile_is_paced_by_the_ni_clock() -> None:
    from daq.backends.serial_resolver import SerialResolverBackend
    from daq.profile import load_profile
    from tests.serial.conftest import ROOT

    prof = load_profile(ROOT / "hw_profiles" / "ni-serial-2dof.toml")
    made: dict[str, Backend] = {}

    def factory(p: Profile, dev: str, ins: list[Channel], outs: list[Channel]) -> Backend:
        # The real serial backend (construction needs no port); a paced fake for the NI card.
        b: Backend = (
            SerialResolverBackend(p, ins, outs) if dev == "serial" else Fake(dev, ins, outs)
        )
        if dev == "ni":
            b.paced_by_hardware = True
            b.wait_next_cycle = lambda: 3  # type: ignore[method-assign]
        made[dev] = b
        return b

    comp = CompositeBackend(prof, make_device=factory)
    assert set(made) == {"ni", "serial"}
    assert comp.paced_by_hardware and comp.wait_next_cycle() == 3
    assert [c.name for c in made["serial"].inputs] == ["q_1", "q_2"]  # type: ignore[attr-defined]
    assert [c.name for c in made["ni"].outputs] == [c.name for c in prof.outputs]  # type: ignore[attr-defined]
    with pytest.raises(NotImplementedError, match="no virtual time"):
        comp.advance(prof.period)


def test_power_passes_through_to_the_device_with_the_lines_and_not_the_serial_board() -> None:
    from daq.backends.serial_resolver import SerialResolverBackend
    from daq.profile import load_profile
    from daq.station.power import Power
    from tests.serial.conftest import ROOT

    base = load_profile(ROOT / "hw_profiles" / "ni-serial-2dof.toml")
    data = base.model_dump(exclude_none=True)
    data["hydraulics"] = {"pump_line": "Dev1/port0/line0", "low_pressure_pa": 2e6, "device": "ni"}
    prof = Profile.model_validate(data)
    levels: dict[str, list[int]] = {}

    class Lines(Fake):
        def write_power(self, level: int) -> BackendStatus:
            levels.setdefault(self.device, []).append(level)
            return BackendStatus.OK

    def factory(p: Profile, dev: str, ins: list[Channel], outs: list[Channel]) -> Backend:
        return SerialResolverBackend(p, ins, outs) if dev == "serial" else Lines(dev, ins, outs)

    comp = CompositeBackend(prof, make_device=factory)
    assert comp.write_power(Power.HIGH) == BackendStatus.OK
    assert levels == {"ni": [Power.HIGH]}  # the serial board has none: its default says OK
    data["hydraulics"]["device"] = "serial"
    on_serial = Profile.model_validate(data)
    with pytest.raises(BackendError, match="no digital outputs for \\[hydraulics\\]"):
        CompositeBackend(on_serial, make_device=factory)


def test_write_shunt_gives_each_device_its_inputs_share(prof: Profile) -> None:
    """The composite passes each device the mask of its own inputs; a device with no relays
    (the serial board) gets an all-off share and answers OK through the default."""
    masks: dict[str, list[bool]] = {}

    class Relays(Fake):
        def write_shunt(self, mask: np.ndarray) -> BackendStatus:
            masks[self.device] = mask.tolist()
            return BackendStatus.OK

    def factory(p: Profile, dev: str, ins: list[Channel], outs: list[Channel]) -> Backend:
        return Fake(dev, ins, outs) if dev == "serial" else Relays(dev, ins, outs)

    comp = CompositeBackend(prof, make_device=factory)
    names = [c.name for c in prof.inputs]
    mask = np.array([n == "p_rod_1" for n in names])
    assert comp.write_shunt(mask) == BackendStatus.OK
    sim = [c.name for c in Fake.instances["sim"].inputs]
    assert masks == {"sim": [n == "p_rod_1" for n in sim]}
    assert comp.write_shunt(np.array([n == "q_1" for n in names])) == BackendStatus.ERROR
