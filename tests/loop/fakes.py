"""Honest stand-ins for the loop tests: a small plant behind the Backend interface and tiny
runners with the `controller.runner` API.

The fake plant integrates q̇ = gain · (spool) per joint, with the spool a first-order lag of the
valve command, pressures that follow the valve (so a large command raises the cap pressure) and
every input quantised through the profile's own scaling (`eng_to_counts`). Faults are injected
per channel or per call so that each interlock can be made to fire by the *data*, not by poking
the loop.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import numpy as np

from controller.feedback import Feedback
from daq.backends.base import Backend, BackendStatus
from daq.profile.schema import LinearScaling, Profile
from daq.scaling import lsb


class FakeBackend(Backend):
    def __init__(self, profile: Profile, q_gain: float = 0.5, tau: float = 0.002) -> None:
        super().__init__(len(profile.inputs), len(profile.outputs))
        self.profile = profile
        self.inputs = profile.inputs
        self.joints = [j.name for j in profile.joints]
        self.q = np.array(profile.home_rad())
        self.spool = np.zeros(len(self.joints))
        self.q_gain = q_gain
        self.tau = tau
        self.last_volts = np.array([c.null_volts for c in profile.outputs])
        self.writes = 0
        #: What the last `write()` sent (`last_volts` also follows `write_null`, which the loop
        #: calls when `run()` returns).
        self.last_written = self.last_volts.copy()
        self.null_writes = 0
        self.opened = self.closed = False
        # Fault injection.
        self.override: dict[str, float] = {}  # channel → engineering value
        self.flag_channel: str | None = None
        self.read_error = False
        self.write_error = False
        self.valve_joint = [self.joints.index(str(c.joint)) for c in profile.outputs]
        self.output_of_joint = np.array(
            [self.valve_joint.index(j) for j in range(len(self.joints))]
        )
        self.names = [c.name for c in self.inputs]
        # counts = floor((eng − off)/gain + 0.5), gain and off folding scaling and converter.
        for c in self.inputs:
            assert isinstance(c.scaling, LinearScaling), "the fake handles linear channels only"
        self.gain = np.array([c.scaling.gain * lsb(c.converter) for c in self.inputs])  # type: ignore[union-attr]
        self.off = np.array(
            [
                c.scaling.gain * c.converter.min + c.scaling.offset  # type: ignore[union-attr]
                for c in self.inputs
            ]
        )
        self.full = np.array([float(1 << c.converter.bits) for c in self.inputs])
        self.wraps = np.array([c.converter.wraps for c in self.inputs])
        self._eng = np.zeros(len(self.inputs))
        self._v = np.zeros(len(self.joints))
        self._work = np.zeros(len(self.inputs))
        roles: dict[str, tuple[list[int], list[int]]] = {}
        for i, c in enumerate(self.inputs):
            chans, js = roles.setdefault(c.role, ([], []))
            chans.append(i)
            js.append(self.joints.index(c.joint) if c.joint else 0)
        self.by_role = {r: (np.array(c), np.array(j)) for r, (c, j) in roles.items()}
        self._wrapped = np.zeros(len(self.inputs))

    def open(self) -> None:
        self.opened = True

    def _eng_values(self) -> np.ndarray:
        """Physical value of every input channel (profile order), from the plant state."""
        v = self._v
        np.take(self.last_volts, self.output_of_joint, out=v)  # valve volts per joint
        eng, w = self._eng, self._work
        for role, (ch, j) in self.by_role.items():
            if role == "resolver":
                np.take(self.q, j, out=w[: len(j)])
            elif role == "lvdt":
                np.take(self.spool, j, out=w[: len(j)])
            elif role == "potentiometer":
                np.take(self.q, j, out=w[: len(j)])
                w[: len(j)] -= 0.6
                w[: len(j)] *= 0.03
            elif role in ("pressure_cap", "pressure_rod"):
                np.take(v, j, out=w[: len(j)])
                w[: len(j)] *= 2.0e5 if role == "pressure_cap" else -2.0e5
                w[: len(j)] += 3.4e6 if role == "pressure_cap" else 3.0e6
            else:
                w[: len(j)] = 40.0
            np.put(eng, ch, w[: len(j)])
        for name, value in self.override.items():
            eng[self.names.index(name)] = value
        return eng

    def read(self, t: float, raw_out: np.ndarray) -> BackendStatus:
        if self.read_error:
            return BackendStatus.ERROR
        # Quantise like the converter (scaling.eng_to_counts, vectorised for linear channels).
        eng = self._eng_values()
        np.subtract(eng, self.off, out=raw_out)
        np.divide(raw_out, self.gain, out=raw_out)
        np.add(raw_out, 0.5, out=raw_out)
        np.floor(raw_out, out=raw_out)
        np.mod(raw_out, self.full, out=self._wrapped)
        np.clip(raw_out, 0.0, self.full - 1.0, out=raw_out)
        np.copyto(raw_out, self._wrapped, where=self.wraps)
        self.channel_fault[:] = 0
        if self.flag_channel is not None:
            self.channel_fault[self.names.index(self.flag_channel)] = 1
        return BackendStatus.OK

    def write(self, t: float, volts: np.ndarray) -> BackendStatus:
        self.writes += 1
        self.last_volts[:] = volts
        self.last_written[:] = volts
        return BackendStatus.ERROR if self.write_error else BackendStatus.OK

    def write_null(self) -> None:
        self.null_writes += 1
        self.last_volts[:] = [c.null_volts for c in self.profile.outputs]

    def close(self) -> None:
        # Like a driver: closing does not touch the outputs. Nulling them is the loop's and the
        # service's job, which the exit-path tests check (a close() that nulled would hide it).
        self.closed = True

    def advance(self, dt: float) -> None:
        for o, j in enumerate(self.valve_joint):
            u = self.last_volts[o]
            self.spool[j] += (0.25 * u - self.spool[j]) * (dt / self.tau)
        self.q += self.q_gain * self.spool * dt


class CallLog(FakeBackend):
    """A FakeBackend that logs its output calls in order: "cmd" (a write of anything but the
    null volts), "null" (`write_null`, or a write of exactly the null volts) and "close".
    Repeats of the same entry are logged once, so a long run stays a short log."""

    def __init__(self, profile: Profile, **kw: float) -> None:
        super().__init__(profile, **kw)
        self.null = np.array([c.null_volts for c in profile.outputs])
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def _log(self, entry: str) -> None:
        with self.lock:
            if not self.calls or self.calls[-1] != entry:
                self.calls.append(entry)

    def write(self, t: float, volts: np.ndarray) -> BackendStatus:
        self._log("null" if np.array_equal(volts, self.null) else "cmd")
        return super().write(t, volts)

    def write_null(self) -> None:
        self._log("null")
        super().write_null()

    def close(self) -> None:
        self._log("close")
        super().close()

    def commanded(self) -> bool:
        with self.lock:
            return "cmd" in self.calls


def assert_nulled_before_close(calls: list[str]) -> None:
    """The valves were commanded, then nulled, then the backend closed, and nothing was
    commanded after the null (nor after the close)."""
    assert "cmd" in calls, f"the valves were never commanded: {calls}"
    assert calls.count("close") == 1, f"closed {calls.count('close')} times: {calls}"
    last_cmd = len(calls) - 1 - calls[::-1].index("cmd")
    close = calls.index("close")
    assert last_cmd < close, f"valves commanded after close: {calls}"
    assert "null" in calls[last_cmd:close], f"closed with the valves still commanded: {calls}"


class HoldP:
    """Hold the position captured at enable with a P law (what HoldRunner does, minimally)."""

    def __init__(self, kp: float = 8.0) -> None:
        self.kp = kp
        self.q0: np.ndarray | None = None
        self.enabled = 0

    def enable(self, fb: Feedback) -> None:
        self.q0 = fb.q.copy()
        self.enabled += 1

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
        assert self.q0 is not None
        np.copyto(ref_out, self.q0)
        np.subtract(self.q0, fb.q, out=volts_out)
        np.multiply(volts_out, self.kp, out=volts_out)
        return True

    def disable(self) -> None:
        self.q0 = None


class Ramp(HoldP):
    """Move every joint's reference at `rate` rad/s for `steps` cycles, then report done."""

    def __init__(self, rate: float, steps: int, period: float = 1e-3, kp: float = 8.0) -> None:
        super().__init__(kp)
        self.rate, self.steps, self.period = rate, steps, period
        self.k = 0

    def enable(self, fb: Feedback) -> None:
        super().enable(fb)
        self.k = 0

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
        assert self.q0 is not None
        self.k += 1
        np.add(self.q0, self.rate * self.k * self.period, out=ref_out)
        np.subtract(ref_out, fb.q, out=volts_out)
        np.multiply(volts_out, self.kp, out=volts_out)
        return self.k < self.steps


class Constant(HoldP):
    """A fixed, non-null command on every joint's valve, with the reference kept on the measured
    position (no following error): outputs that only an exit path can bring back to null."""

    def __init__(self, volts: float = 0.5) -> None:
        super().__init__()
        self.volts = volts

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
        np.copyto(ref_out, fb.q)
        volts_out.fill(self.volts)
        return True


class Scripted(HoldP):
    """Outputs a fixed per-joint command after `after` steps (slew / NaN / amplitude tests)."""

    def __init__(self, volts: float, after: int = 3) -> None:
        super().__init__()
        self.volts, self.after, self.k = volts, after, 0

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
        super().step(fb, ref_out, volts_out)
        self.k += 1
        if self.k > self.after:
            volts_out.fill(self.volts)
        return True


def deg(x: float) -> float:
    return math.radians(x)


class DriveMirror:
    """What a valve driver was last told, readable from any process: a small file-backed array
    [writes, null_written_ns, volts…]. The loop process's backend writes it; the test reads it.
    Only the commanded outputs are mirrored — nothing of the plant (the truth stays inside)."""

    def __init__(self, path: str | Path, n_outputs: int) -> None:
        self.path = Path(path)
        if not self.path.exists():
            self.path.write_bytes(bytes(8 * (n_outputs + 2)))
        self.data = np.memmap(self.path, dtype=np.float64, mode="r+", shape=(n_outputs + 2,))

    @property
    def volts(self) -> np.ndarray:
        return np.array(self.data[2:])

    @property
    def writes(self) -> int:
        return int(self.data[0])

    def record(self, volts: np.ndarray, null: bool) -> None:
        self.data[2:] = volts
        if null:
            self.data[1] = time.monotonic_ns()
        self.data[0] += 1


class MirroredBackend(FakeBackend):
    """A FakeBackend whose outputs are mirrored to a `DriveMirror`, as a valve driver's state
    would be observable on the rig; `null_outputs_after_crash` writes null to the mirror the
    way a fresh driver handle would."""

    def __init__(self, profile: Profile, path: str) -> None:
        super().__init__(profile)
        self.null = np.array([c.null_volts for c in profile.outputs])
        self.mirror = DriveMirror(path, len(profile.outputs))

    def write(self, t: float, volts: np.ndarray) -> BackendStatus:
        status = super().write(t, volts)
        self.mirror.record(volts, bool(np.array_equal(volts, self.null)))
        return status

    def write_null(self) -> None:
        super().write_null()
        self.mirror.record(self.null, True)

    def null_outputs_after_crash(self) -> str:
        self.mirror.record(self.null, True)
        return f"{len(self.null)} output(s) written to null (mirror {self.mirror.path.name})"


class MirroredFactory:
    """Picklable backend factory for the loop process (`Service(backend_factory=…)`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)

    def __call__(self, profile: Profile) -> MirroredBackend:
        return MirroredBackend(profile, self.path)
