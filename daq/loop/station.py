"""The station in the loop: hydraulic power, the supply interlock, jogging, calibration swaps.

`LoopStation` holds the state (power level, supply check, the soft limits a jog widens) and
does the per-cycle part without allocating: one scalar comparison for the supply, a few
in-place numpy operations while a jog is active. `StationCommands` (a mixin of
`daq.loop.Loop`, like `LoopCommands`) handles the rare requests: `power`, `jog` and
`calibration`.

Rules (docs/operations.md, "Hydraulic power"):
- arming needs power on and, with a `supply` channel, the supply above
  `supply_arm_fraction` × the low stage's pressure (above the trip level below: hysteresis);
- a supply below that while ARMED or RUNNING trips `SUPPLY_LOST`: FAULT, valves null in that
  very cycle;
- `estop` drops power as well as nulling the valves;
- `power off` is refused while the valves are live (disarm first), `power` changes while
  RUNNING are refused (stop first), `power high` while a jog moves is refused;
- a jog runs at low pressure only; it may start outside the soft limits and move *toward* them:
  the soft limits are widened to where each joint stands and narrowed again as it comes in;
- a pressure transducer's shunt relay (`shunt`) closes only in IDLE with the power off; every
  state change, power change and e-stop opens them all, and `arm` is refused while one is
  closed: a shunted channel reads a false pressure, which no interlock may act on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from daq.backends.base import Backend, BackendStatus
from daq.loop.commands import LoopCommands
from daq.loop.interlocks import Interlocks, Trip
from daq.loop.mailbox import Request
from daq.loop.states import LATCHED_STATES, LIVE_STATES, State
from daq.profile.schema import Profile
from daq.station.power import Power, initial, stage_pressure
from daq.station.shunt import shunt_channels

#: A jog's soft limits start this far beyond where the joint stands (sensor noise, sag).
JOG_MARGIN_RAD = math.radians(0.5)


@dataclass(frozen=True)
class JogRequest:
    """What the service hands the loop for a jog: the runner built for it, the joint, the
    target angle (rad, inside the soft limits: checked by the service)."""

    runner: Any
    joint: int
    target: float


@dataclass(frozen=True)
class CalibrationSwap:
    """Per input channel: the offset and 1/gain the loop applies after the declared scaling
    (eng = (declared − offset) / gain), and the calibration's identity for the status."""

    offset: np.ndarray
    inv_gain: np.ndarray
    ident: str


class LoopStation:
    def __init__(self, profile: Profile, interlocks: Interlocks) -> None:
        self.hydraulics = profile.hydraulics
        self.power = initial(profile)
        supply = profile.supply_channel
        names = [c.name for c in profile.inputs]
        self.supply_index = names.index(supply.name) if supply is not None else -1
        self.supply_name = supply.name if supply is not None else ""
        hyd = profile.hydraulics
        low = stage_pressure(profile, Power.LOW)
        self.supply_min = hyd.supply_min_fraction * low if hyd is not None else 0.0
        self.supply_arm = hyd.supply_arm_fraction * low if hyd is not None else 0.0
        self.check_supply = hyd is not None and supply is not None
        # The per-cycle comparison through preallocated arrays (no scalar objects per cycle).
        self._idx = np.array([max(self.supply_index, 0)], dtype=np.intp)
        self._val = np.zeros(1)
        self._min = np.array([self.supply_min])
        self._ok = np.zeros(1, dtype=bool)
        il = interlocks
        self.soft_min = il.soft_min.copy()  # the profile's, restored after a jog
        self.soft_max = il.soft_max.copy()
        self._tmp = np.zeros_like(self.soft_min)
        self.jogging = False
        self.jog_runner: Any = None
        #: Valves opened with the power off (calibration: chambers to tank): no soft limits
        #: (the valves can only let the arm down to rest) and no supply check.
        self.draining = False
        self.calibration = ""  # identity of the calibration the scaler applies ("" = none)
        #: Shunt relays closed, a bit per `daq.station.shunt.shunt_channels` entry.
        self.shunt = 0
        chans = shunt_channels(profile)
        self.shunt_names = [c.name for c in chans]
        self._shunt_inputs = [names.index(n) for n in self.shunt_names]
        self._n_inputs = len(names)
        # What a closed relay adds to a reading, and the highest reading no interlock trips on
        # (the channel's valid_max; a chamber's pressure limit when that is lower).
        limit = {j.name: j.limits.max_pressure_pa for j in profile.joints}
        self.shunt_equivalent = [c.shunt.equivalent_pa for c in chans if c.shunt is not None]
        self.shunt_limit = [
            min(c.valid_max, limit[c.joint] if c.joint and c.role != "supply" else math.inf)
            for c in chans
        ]

    def shunt_mask(self, bits: int) -> np.ndarray:
        """`bits` as the backend's boolean per input channel (rare path: allocates)."""
        mask = np.zeros(self._n_inputs, dtype=bool)
        for k, i in enumerate(self._shunt_inputs):
            mask[i] = bool(bits >> k & 1)
        return mask

    def shunt_overrange(self, bits: int, eng: np.ndarray) -> str | None:
        """Why closing the relays in `bits` would trip an interlock (a channel not at zero
        load: its reading plus the shunt's equivalent above its limit — the pressure interlock
        trips above it, not at it — or not a number), or None."""
        for k, name in enumerate(self.shunt_names):
            reading = float(eng[self._shunt_inputs[k]])
            if bits >> k & 1 and not reading + self.shunt_equivalent[k] <= self.shunt_limit[k]:
                return (
                    f"{name} reads {reading / 1e6:.3g} MPa: shunted it would read above its "
                    f"limit {self.shunt_limit[k] / 1e6:.3g} MPa (a shunt calibration is made at "
                    "zero load: drain the chambers first)"
                )
        return None

    def shunted(self, bits: int | None = None) -> list[str]:
        bits = self.shunt if bits is None else bits
        return [n for k, n in enumerate(self.shunt_names) if bits >> k & 1]

    def supply_low(self, eng: np.ndarray) -> bool:
        """The supply below its limit (or NaN) in this cycle's scaled inputs."""
        if not self.check_supply:
            return False
        np.take(eng, self._idx, out=self._val)
        np.greater_equal(self._val, self._min, out=self._ok)
        return not self._ok[0]

    def narrow(self, q: np.ndarray, il: Interlocks) -> None:
        """While jogging: pull the widened soft limits in behind each joint as it moves toward
        the profile's range, never past the profile's own limits."""
        tmp = self._tmp
        np.subtract(q, JOG_MARGIN_RAD, out=tmp)
        np.maximum(il.soft_min, tmp, out=il.soft_min)
        np.minimum(il.soft_min, self.soft_min, out=il.soft_min)
        np.add(q, JOG_MARGIN_RAD, out=tmp)
        np.minimum(il.soft_max, tmp, out=il.soft_max)
        np.maximum(il.soft_max, self.soft_max, out=il.soft_max)

    def widen(self, q: np.ndarray, il: Interlocks) -> None:
        np.minimum(self.soft_min, q - JOG_MARGIN_RAD, out=il.soft_min)
        np.maximum(self.soft_max, q + JOG_MARGIN_RAD, out=il.soft_max)

    def restore(self, il: Interlocks) -> None:
        np.copyto(il.soft_min, self.soft_min)
        np.copyto(il.soft_max, self.soft_max)
        self.jogging = self.draining = False
        self.jog_runner = None

    def to_dict(self) -> dict[str, Any]:
        return station_dict(self.power, self.jogging, self.shunted())


def station_dict(power: int, jogging: bool, shunted: list[str] | None = None) -> dict[str, Any]:
    """What `status` shows of the station (the loop thread's and the loop process's alike):
    `shunt`, the channels whose shunt relay is closed (their readings are not pressures)."""
    return {"power": Power(power).name, "jogging": bool(jogging), "shunt": list(shunted or [])}


class StationCommands(LoopCommands):
    """Mixin of `daq.loop.Loop`: the attributes below are created by `Loop.__init__`."""

    station: LoopStation
    backend: Backend
    scaler: Any
    #: The scaled inputs of the cycle being run (the row's eng slice).
    eng_now: np.ndarray

    def _station_cycle(self, eng: np.ndarray) -> None:
        """Per cycle, after the input checks: the supply interlock and a jog's limits."""
        st = self.station
        if self.state in LIVE_STATES:
            if st.supply_low(eng) and not st.draining:
                self.interlocks.trip(
                    Trip.SUPPLY_LOST, st.supply_name, float(eng[st.supply_index]), st.supply_min
                )
            if st.jogging:
                st.narrow(self.fb.q, self.interlocks)
        elif st.jogging or st.draining:
            st.restore(self.interlocks)

    def _set_state(self, new: State) -> None:
        """Every state change (arm, drain, jog, fault, e-stop, …) opens the shunt relays
        first: the readings a live or latched rig acts on must be pressures. So does a
        repeated one (a second e-stop) while a relay is still closed — the backend could not
        open it the first time, and an operator's e-stop is the moment to try again."""
        if self.station.shunt:
            self._set_shunt(0)
        super()._set_state(new)

    def _set_shunt(self, bits: int) -> bool:
        """Switch the shunt relays to `bits`; False if the backend could not (the state kept
        is then the one before, so that `arm` stays refused while a relay may be closed)."""
        st = self.station
        ok = self.backend.write_shunt(st.shunt_mask(bits)) == BackendStatus.OK
        if ok and bits != st.shunt:
            previous, st.shunt = st.shunt, bits
            self._event("shunt", on=st.shunted(bits), previous=st.shunted(previous))
        return ok

    def _set_power(self, level: Power) -> bool:
        """Switch the lines; False if the backend could not. A level change opens the shunt
        relays first (they close only with the power off)."""
        if level != self.station.power and self.station.shunt:
            self._set_shunt(0)
        ok = self.backend.write_power(int(level)) == BackendStatus.OK
        if ok and level != self.station.power:
            previous, self.station.power = self.station.power, level
            self._event("power", power=level.name, previous=previous.name)
        return ok

    def _drop_power(self) -> None:
        """E-stop: power off (a station without [hydraulics] has no lines to switch). The
        shunt relays, closed only in IDLE, open with the state change to ESTOP."""
        if self.station.hydraulics is not None:
            self._set_power(Power.OFF)

    def _station_refusal(self) -> str | None:
        """Why `arm` is refused by the station (a shunt closed, power off, supply not built),
        or None."""
        if self.station.shunt:
            on = ", ".join(self.station.shunted())
            return (
                f"arm refused: shunt calibration relay closed on {on}: a shunted channel reads "
                "a false pressure; open it first (shunt off)"
            )
        if self.station.power == Power.OFF:
            return "arm refused: hydraulic power is off; switch it on first (power low|high)"
        return self._supply_refusal(self.eng_now)

    def _supply_refusal(self, eng: np.ndarray) -> str | None:
        st = self.station
        if not st.check_supply:
            return None
        supply = float(eng[st.supply_index])
        if not supply >= st.supply_arm:  # NaN refuses too
            return (
                f"arm refused: supply pressure {supply / 1e6:.2f} MPa on {st.supply_name} is "
                f"below {st.supply_arm / 1e6:.2f} MPa; wait for it to build"
            )
        return None

    def _handle_station(self, req: Request) -> None:
        kind = req.kind
        if kind == "power":
            self._power_command(req)
        elif kind == "jog":
            self._jog_command(req)
        elif kind == "drain":
            self._drain_command(req)
        elif kind == "shunt":
            self._shunt_command(req)
        else:
            self._calibration_command(req)

    def _power_command(self, req: Request) -> None:
        level = Power(int(req.payload))
        st = self.station
        if st.hydraulics is None:
            req.finish(False, "power: the profile has no [hydraulics] section", code="rejected")
            return
        if self.state in LATCHED_STATES and level != Power.OFF:
            req.finish(
                False, f"power {level.name.lower()} refused: {self.state.name} is latched; reset "
                "first", code="invalid_state",
            )  # fmt: skip
            return
        if level == Power.OFF and self.state in LIVE_STATES:
            req.finish(
                False, f"power off refused in {self.state.name}: disarm first (or estop)",
                code="invalid_state",
            )  # fmt: skip
            return
        if st.draining and level != Power.OFF:
            req.finish(
                False, f"power {level.name.lower()} refused while the valves drain: disarm "
                "first", code="invalid_state",
            )  # fmt: skip
            return
        if self.state == State.RUNNING and level != st.power:
            req.finish(False, "power change refused in RUNNING: stop first", code="invalid_state")
            return
        moving = self.active is st.jog_runner and not getattr(st.jog_runner, "done", True)
        if level == Power.HIGH and st.jogging and moving:
            req.finish(
                False, "power high refused while a jog moves: jogging is at low pressure only",
                code="invalid_state",
            )  # fmt: skip
            return
        if not self._set_power(level):
            req.finish(False, f"power {level.name.lower()}: the backend could not switch the "
                       "lines", code="rejected")  # fmt: skip
            return
        req.finish(True, "", state=self.state.name, seq=self.seq, power=level.name)

    def _jog_command(self, req: Request) -> None:
        jr: JogRequest = req.payload
        st = self.station
        if self.state not in (State.IDLE, State.ARMED):
            req.finish(
                False, f"jog refused in {self.state.name}: jog needs IDLE or ARMED",
                code="invalid_state",
            )  # fmt: skip
            return
        if st.power != Power.LOW:
            req.finish(
                False, f"jog refused: power is {st.power.name}; jogging runs at low pressure "
                "only (power low)", code="rejected",
            )  # fmt: skip
            return
        il = self.interlocks
        if not st.soft_min[jr.joint] <= jr.target <= st.soft_max[jr.joint]:
            req.finish(
                False, f"jog refused: target {math.degrees(jr.target):.2f}° of joint "
                f"{il.joint_names[jr.joint]} is outside its soft limits "
                f"[{math.degrees(st.soft_min[jr.joint]):.2f}°, "
                f"{math.degrees(st.soft_max[jr.joint]):.2f}°]; a jog only moves toward them",
                code="rejected",
            )  # fmt: skip
            return
        if self.state == State.IDLE:
            reason = self._supply_refusal(self.eng_now)
            if reason is not None:
                req.finish(False, reason.replace("arm refused", "jog refused"), code="rejected")
                return
        st.widen(self.fb.q, il)
        error = self._switch_runner(jr.runner)
        if error is not None:
            st.restore(il)
            if self.state == State.ARMED:
                self._hold_or_fault()
            req.finish(False, f"jog refused: the controller failed to {error}", code="rejected")
            return
        st.jogging, st.jog_runner = True, jr.runner
        self._set_state(State.ARMED)
        self._event("jog", joint=il.joint_names[jr.joint], target=jr.target)
        req.finish(True, "", state=self.state.name, seq=self.seq)

    def _drain_command(self, req: Request) -> None:
        """IDLE, power off → ARMED with the given runner opening the valves (calibration)."""
        st = self.station
        if self.state != State.IDLE:
            req.finish(
                False, f"drain refused in {self.state.name}: needs IDLE", code="invalid_state"
            )
            return
        if st.hydraulics is None or st.power != Power.OFF:
            req.finish(
                False, "drain refused: the valves open to drain only with the hydraulic power "
                "off", code="rejected",
            )  # fmt: skip
            return
        il = self.interlocks
        il.soft_min.fill(-np.inf)
        il.soft_max.fill(np.inf)
        st.draining = True
        error = self._switch_runner(req.payload)
        if error is not None:
            st.restore(il)
            req.finish(False, f"drain refused: the runner failed to {error}", code="rejected")
            return
        self._set_state(State.ARMED)
        self._event("drain")
        req.finish(True, "", state=self.state.name, seq=self.seq)

    def _shunt_command(self, req: Request) -> None:
        """Payload (on, bits): close (on) or open the relays of the channels in `bits`."""
        on, bits = bool(req.payload[0]), int(req.payload[1])
        st = self.station
        what = f"shunt {'on' if on else 'off'}"
        if on:
            if self.state != State.IDLE:
                req.finish(
                    False, f"{what} refused in {self.state.name}: a shunt closes in IDLE only, "
                    "with the hydraulic power off (disarm and power off first)",
                    code="invalid_state",
                )  # fmt: skip
                return
            if st.power != Power.OFF:
                why = "" if st.hydraulics is not None else (
                    " (the profile has no [hydraulics]: power is implicitly on)"
                )  # fmt: skip
                req.finish(
                    False, f"{what} refused: hydraulic power is {st.power.name}{why}; a shunt "
                    "calibration reads the transducers at zero load (power off, let the supply "
                    "decay)", code="rejected",
                )  # fmt: skip
                return
            reason = st.shunt_overrange(bits & ~st.shunt, self.eng_now)
            if reason is not None:
                req.finish(False, f"{what} refused: {reason}", code="rejected")
                return
        new = st.shunt | bits if on else st.shunt & ~bits
        if not self._set_shunt(new):
            self._set_shunt(0)
            req.finish(
                False, f"{what}: the backend could not switch the shunt relays", code="rejected"
            )
            return
        req.finish(True, "", state=self.state.name, seq=self.seq, shunt=st.shunted())

    def _calibration_command(self, req: Request) -> None:
        swap: CalibrationSwap = req.payload
        if self.state != State.IDLE:
            req.finish(
                False, f"calibration refused in {self.state.name}: a calibration is applied "
                "in IDLE only (the hold would jump)", code="invalid_state",
            )  # fmt: skip
            return
        self.scaler.set_correction(swap.offset, swap.inv_gain)
        self.station.calibration = swap.ident
        self._event("calibration", ident=swap.ident)
        req.finish(True, "", state=self.state.name, seq=self.seq, calibration=swap.ident)
