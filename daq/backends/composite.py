"""One backend made of several devices: e.g. NI for analog, serial for resolvers, sim for the rest.

Each channel names its device (`Channel.device`). The composite builds one sub-backend per device
through `daq.backends.factory.make_device_backend`, and per cycle scatters/gathers the caller's
arrays with index arrays computed once here (numpy `take`/`put` with `out=`: no allocation).

When the simulator is one of the devices it receives *every* output channel, also those a real
device drives: a dry run (sim + serial, or sim + NI with the valves disconnected) then moves the
simulated plant with the same commands. Statuses are OR-ed: one device in ERROR is the cycle in
ERROR, and the per-channel faults of every device land in this backend's `channel_fault`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from daq.backends.base import Backend, BackendError, BackendStatus
from daq.profile.schema import Channel, DeviceName, Profile

log = logging.getLogger(__name__)

MakeDevice = Callable[[Profile, DeviceName, list[Channel], list[Channel]], Backend]

#: Fault code for every channel of a device whose read raised (a backend bug, not a rig fault).
FAULT_DEVICE_EXCEPTION = 255


class _Part:
    """One device: its backend, the caller-array indices it serves and its own buffers."""

    def __init__(
        self, device: DeviceName, backend: Backend, in_idx: list[int], out_idx: list[int]
    ) -> None:
        self.device = device
        self.backend = backend
        self.in_idx = np.asarray(in_idx, dtype=np.intp)
        self.out_idx = np.asarray(out_idx, dtype=np.intp)
        self.raw = np.zeros(len(in_idx))
        self.volts = np.zeros(len(out_idx))


class CompositeBackend(Backend):
    def __init__(
        self,
        profile: Profile,
        inputs: list[Channel] | None = None,
        outputs: list[Channel] | None = None,
        *,
        make_device: MakeDevice | None = None,
    ) -> None:
        # Default: the whole profile (what `factory.make_backend` passes).
        inputs = profile.inputs if inputs is None else inputs
        outputs = profile.outputs if outputs is None else outputs
        super().__init__(len(inputs), len(outputs))
        if make_device is None:
            from daq.backends.factory import make_device_backend  # the factory imports us

            make_device = make_device_backend
        devices = profile.backend.devices()
        self.parts: list[_Part] = []
        served_in: set[int] = set()
        served_out: set[int] = set()
        for dev in devices:
            in_idx = [i for i, c in enumerate(inputs) if profile.channel_device(c) == dev]
            if dev == "sim":
                out_idx = list(range(len(outputs)))  # the plant sees every valve command
            else:
                out_idx = [i for i, c in enumerate(outputs) if profile.channel_device(c) == dev]
            if not in_idx and not out_idx:
                continue
            backend = make_device(
                profile, dev, [inputs[i] for i in in_idx], [outputs[i] for i in out_idx]
            )
            self.parts.append(_Part(dev, backend, in_idx, out_idx))
            served_in.update(in_idx)
            served_out.update(out_idx)
        missing = [c.name for i, c in enumerate(inputs) if i not in served_in]
        missing += [c.name for i, c in enumerate(outputs) if i not in served_out]
        if missing:
            raise BackendError(f"composite backend: no device serves {', '.join(missing)}")
        paced = [p for p in self.parts if p.backend.paced_by_hardware]
        if len(paced) > 1:
            raise BackendError(
                "composite backend: more than one device paces the loop "
                f"({', '.join(p.device for p in paced)}); only one hardware clock can"
            )
        self._pacer = paced[0].backend if paced else None
        self.paced_by_hardware = self._pacer is not None
        sims = [p.backend for p in self.parts if p.device == "sim"]
        self._sim = sims[0] if sims else None

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        opened: list[Backend] = []
        try:
            for p in self.parts:
                p.backend.open()
                opened.append(p.backend)
        except BaseException:
            for b in reversed(opened):
                _close_quietly(b)
            raise

    def start(self) -> None:
        for p in self.parts:
            p.backend.start()

    def warm_up(self) -> None:
        for p in self.parts:
            p.backend.warm_up()

    def wait_next_cycle(self) -> int:
        if self._pacer is None:
            raise NotImplementedError("no device of this composite backend is paced by hardware")
        return self._pacer.wait_next_cycle()

    def read(self, t: float, raw_out: np.ndarray) -> BackendStatus:
        status = BackendStatus.OK
        for p in self.parts:
            # Also a device without inputs: the simulator moves its plant on inside read().
            try:
                s = p.backend.read(t, p.raw)
            except Exception:  # a backend must not raise here; contain it as a device fault
                p.backend.channel_fault[:] = FAULT_DEVICE_EXCEPTION
                s = BackendStatus.ERROR
            np.put(raw_out, p.in_idx, p.raw)
            np.put(self.channel_fault, p.in_idx, p.backend.channel_fault)
            if s != BackendStatus.OK:
                status = BackendStatus.ERROR
        return status

    def write(self, t: float, volts: np.ndarray) -> BackendStatus:
        status = BackendStatus.OK
        for p in self.parts:
            if not p.out_idx.size:
                continue
            np.take(volts, p.out_idx, out=p.volts)
            try:
                s = p.backend.write(t, p.volts)
            except Exception:  # contained like in read: the interlocks null the valves
                s = BackendStatus.ERROR
            if s != BackendStatus.OK:
                status = BackendStatus.ERROR
        return status

    def write_power(self, level: int) -> BackendStatus:
        """Every device: the one that carries [hydraulics]' lines switches them, the others
        have none (OK)."""
        status = BackendStatus.OK
        for p in self.parts:
            try:
                s = p.backend.write_power(level)
            except Exception:  # contained: the caller reports the failure
                s = BackendStatus.ERROR
            if s != BackendStatus.OK:
                status = BackendStatus.ERROR
        return status

    def write_shunt(self, mask: np.ndarray) -> BackendStatus:
        """Every device its own inputs' share of `mask` (the one with the relays' lines
        switches them; the others get an all-off share and answer OK)."""
        status = BackendStatus.OK
        for p in self.parts:
            try:
                s = p.backend.write_shunt(np.take(mask, p.in_idx))
            except Exception:  # contained: the caller reports the failure
                s = BackendStatus.ERROR
            if s != BackendStatus.OK:
                status = BackendStatus.ERROR
        return status

    def null_outputs_after_crash(self) -> str:
        """Each device in turn, every one attempted whatever the others did."""
        done = []
        for p in self.parts:
            if len(p.out_idx) == 0:
                continue
            try:
                done.append(f"{p.device}: {p.backend.null_outputs_after_crash()}")
            except (BackendError, OSError, RuntimeError) as exc:
                done.append(f"{p.device}: FAILED: {exc}")
        return "; ".join(done) or "no outputs on this backend"

    def write_null(self) -> None:
        for p in self.parts:
            try:
                p.backend.write_null()
            except Exception:  # must not raise; try every device
                log.exception("write_null failed on device %s", p.device)

    def close(self) -> None:
        self.write_null()  # every device's outputs at null before any device is released
        for p in reversed(self.parts):
            _close_quietly(p.backend)

    def between_cycles(self, t_next: float) -> None:
        for p in self.parts:
            p.backend.between_cycles(t_next)

    def advance(self, dt: float) -> None:
        if self._sim is None:
            raise NotImplementedError(
                "a composite backend without the simulator has no virtual time"
            )
        self._sim.advance(dt)


def _close_quietly(b: Backend) -> None:
    try:
        b.close()
    except Exception:  # close every device even if one fails
        log.exception("closing %s failed", type(b).__name__)
