"""NI-DAQmx backend: one AI task, one AO task, hardware-timed single point, hardware watchdog.

Task layout (docs/ni.md has the wiring and the reasoning):

- **AI task** `<rig>_ai`: one voltage channel per input, in the caller's order; terminal
  configuration from `Channel.terminal`, range = the channel's converter [min, max] (so DAQmx
  picks the gain whose range the profile describes); sample clock = the onboard clock at
  `rig.loop_rate_hz`, `HW_TIMED_SINGLE_POINT`. Its sample clock paces the loop:
  `wait_next_cycle` blocks in DAQmxWaitForNextSampleClock (`ni_waitclock`).
- **AO task** `<rig>_ao`: one voltage channel per valve, same mode and rate, clocked from
  `/<device>/ai/SampleClock` (or `[backend.ni].ao_clock_source`), so the command computed in
  cycle k is applied on clock edge k+1 — a fixed one-period output delay, no software jitter.
- **Watchdog** `<rig>_watchdog` (`nidaqmx.system.WatchdogTask`): expiration state = each valve's
  `null_volts` (0 V in every shipped profile), timeout `[backend.ni].watchdog_timeout_s`;
  refreshed (`reset_timer`) by every `write`/`write_null`, i.e. once per cycle: a loop that stops
  *commanding* — hung, crashed, killed — has its valves nulled by the card itself.

Scaling: the channels are plain volts (no DAQmx custom scales). The backend turns the calibrated
volts DAQmx returns into the converter counts of the Backend contract, and the loop applies the
profile's scaling (`daq.scaling`) as for every other backend: one calibration code path, raw
counts recorded identically for sim, NI and serial, and a table or polynomial checked by the
profile schema rather than re-expressed in DAQmx scale objects.

`nidaqmx` is imported inside `open()`: `import daq.backends.ni` works without the NI driver.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import numpy as np

from daq.backends import ni_waitclock
from daq.backends.base import Backend, BackendError, BackendStatus
from daq.profile.schema import Channel, Profile
from daq.station.power import Power, lines, power_lines

log = logging.getLogger(__name__)

_TERMINALS = {
    "default": "DEFAULT",
    "rse": "RSE",
    "nrse": "NRSE",
    "diff": "DIFF",
    "pseudo_diff": "PSEUDO_DIFF",
}
#: Timeout of the final on-demand null write in close(): long, it is the last word to the card.
_CLOSE_WRITE_TIMEOUT_S = 1.0


def _import_nidaqmx(device: str) -> Any:
    try:
        import nidaqmx
        import nidaqmx.constants
        import nidaqmx.stream_readers
        import nidaqmx.stream_writers
        import nidaqmx.system
        import nidaqmx.types
    except ImportError as exc:
        raise BackendError(
            f"NI device '{device}': the Python package 'nidaqmx' is not installed ({exc}); "
            "install it with `pip install nidaqmx`, or use a profile without [backend.ni]"
        ) from None
    return nidaqmx


def describe_daq_error(device: str, stage: str, exc: BaseException) -> str:
    """One line naming the device, what we were doing and what DAQmx (or its absence) said."""
    name = type(exc).__name__
    if name == "DaqNotFoundError":
        return (
            f"NI device '{device}': cannot {stage}: the NI-DAQmx driver (C library libnidaqmx / "
            "nicaiu.dll) is not installed on this machine. Install NI-DAQmx (ni.com/downloads; "
            "on Linux `python -m nidaqmx installdriver`), or run a simulated profile "
            "(backend kind 'sim')"
        )
    if name == "DaqNotSupportedError":
        return f"NI device '{device}': cannot {stage}: NI-DAQmx does not support this platform"
    code = getattr(exc, "error_code", None)
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else name
    return f"NI device '{device}': cannot {stage}: DAQmx error {code}: {detail}"


class NiBackend(Backend):
    """The NI card's share of a profile's channels, behind the `Backend` contract."""

    paced_by_hardware = True

    def __init__(self, profile: Profile, inputs: list[Channel], outputs: list[Channel]) -> None:
        super().__init__(len(inputs), len(outputs))
        cfg = profile.backend.ni
        if cfg is None:
            raise BackendError("the NI backend needs a [backend.ni] section in the profile")
        self.cfg = cfg
        self.device = cfg.device
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.rate = profile.rig.loop_rate_hz
        self.period = profile.period
        self.rig_id = profile.rig.id
        #: The station's power lines on this card ([hydraulics]; docs/ni.md): pump[, high].
        self.power_lines = power_lines(profile, "ni")
        #: The shunt calibration relays of this card's pressure channels (`Channel.shunt`):
        #: (index among this backend's inputs, digital line).
        self.shunt_lines = [
            (i, c.shunt.line) for i, c in enumerate(self.inputs) if c.shunt is not None
        ]
        self._check_channels()
        if cfg.watchdog_timeout_s < 5 * self.period:
            raise BackendError(
                f"[backend.ni].watchdog_timeout_s = {cfg.watchdog_timeout_s} s is under 5 loop "
                f"periods ({5 * self.period:g} s at {self.rate:g} Hz): the card would null the "
                "valves on ordinary jitter"
            )
        if cfg.clock_timeout_s < 2 * self.period:
            raise BackendError(
                f"[backend.ni].clock_timeout_s = {cfg.clock_timeout_s} s is under 2 loop periods "
                f"({2 * self.period:g} s at {self.rate:g} Hz)"
            )
        self.clock_source = cfg.ao_clock_source or f"/{self.device}/ai/SampleClock"
        # Volts → offset-binary counts, k = floor((v − min)/lsb + ½) clipped to the code range
        # (daq.scaling.units_to_counts, vectorised with preallocated arrays for the cycle).
        conv = [c.converter for c in self.inputs]
        self._ai_min = np.array([c.min for c in conv])
        self._ai_inv_lsb = np.array([(1 << c.bits) / (c.max - c.min) for c in conv])
        self._ai_top = np.array([float((1 << c.bits) - 1) for c in conv])
        self._volts_in = np.zeros(self.n_inputs)
        self._ao_min = np.array([c.converter.min for c in self.outputs])
        self._ao_max = np.array([c.converter.max for c in self.outputs])
        self._null = np.array([c.null_volts for c in self.outputs], dtype=np.float64)
        self._volts_out = np.zeros(self.n_outputs)
        self._period_ns = round(self.period * 1e9)
        self._power_state = np.zeros(len(self.power_lines), dtype=bool)
        self._shunt_index = np.array([i for i, _ in self.shunt_lines], dtype=np.intp)
        self._shunt_state = np.zeros(len(self.shunt_lines), dtype=bool)
        # Driver objects; all None while closed.
        self._nidaqmx: Any = None
        self._ai: Any = None
        self._ao: Any = None
        self._wd: Any = None
        self._do: Any = None
        self._do_writer: Any = None
        self._shunt_do: Any = None
        self._shunt_writer: Any = None
        self._reader: Any = None
        self._writer: Any = None
        self._waiter: ni_waitclock.SampleClockWaiter | None = None
        self._running = False
        self._stage = ""
        self._wait_failed = False
        self._last_wake_ns = 0
        #: Counters for the loop's status: cycles DAQmx flagged late, clocks missed, last error.
        self.late_cycles = 0
        self.missed_clocks = 0
        self.last_error_code = 0

    def _check_channels(self) -> None:
        if not self.inputs:
            raise BackendError(
                f"NI device '{self.device}': no analog input channel; the AI sample clock paces "
                "the loop, so an NI backend needs at least one"
            )
        dev = re.escape(self.device)
        for chans, kind in ((self.inputs, "ai"), (self.outputs, "ao")):
            for c in chans:
                if not re.fullmatch(rf"{dev}/{kind}\d+", c.physical):
                    raise BackendError(
                        f"channel '{c.name}': physical '{c.physical}' is not an {kind.upper()} "
                        f"line of NI device '{self.device}' (expected '{self.device}/{kind}N')"
                    )
        for line in self.power_lines:
            if not re.fullmatch(rf"{dev}/port\d+/line\d+", line):
                raise BackendError(
                    f"hydraulics: power line '{line}' is not a digital line of NI device "
                    f"'{self.device}' (expected '{self.device}/portN/lineM')"
                )
        taken = {line: "a hydraulics power line" for line in self.power_lines}
        for i, line in self.shunt_lines:
            name = self.inputs[i].name
            if not re.fullmatch(rf"{dev}/port\d+/line\d+", line):
                raise BackendError(
                    f"channel '{name}': shunt line '{line}' is not a digital line of NI device "
                    f"'{self.device}' (expected '{self.device}/portN/lineM')"
                )
            if line in taken:
                raise BackendError(f"channel '{name}': shunt line '{line}' is also {taken[line]}")
            taken[line] = f"channel '{name}''s shunt line"
        seen: dict[str, str] = {}
        for c in (*self.inputs, *self.outputs):
            if c.physical in seen:
                raise BackendError(
                    f"channels '{seen[c.physical]}' and '{c.name}' share '{c.physical}'"
                )
            seen[c.physical] = c.name

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> None:
        if self._ai is not None:
            raise BackendError(f"NI device '{self.device}' is already open")
        nidaqmx = _import_nidaqmx(self.device)
        self._nidaqmx = nidaqmx
        self._stage = "create the AI task"
        try:
            self._configure(nidaqmx)
        except BaseException as exc:
            self._shutdown()
            if isinstance(exc, Exception):
                raise BackendError(describe_daq_error(self.device, self._stage, exc)) from exc
            raise  # KeyboardInterrupt / SystemExit: cleaned up, propagate unchanged
        log.info(
            "NI %s: %d AI + %d AO at %g Hz (HW-timed single point), AO clock %s, watchdog %g s",
            self.device, self.n_inputs, self.n_outputs, self.rate, self.clock_source,
            self.cfg.watchdog_timeout_s,
        )  # fmt: skip

    def _configure(self, nidaqmx: Any) -> None:
        """Build the tasks; `self._stage` names the step for the error message."""
        c = nidaqmx.constants
        self._ai = nidaqmx.Task(f"{self.rig_id}_ai")
        for ch in self.inputs:
            self._stage = f"add AI channel {ch.physical} ('{ch.name}')"
            self._ai.ai_channels.add_ai_voltage_chan(
                ch.physical,
                name_to_assign_to_channel=ch.name,
                terminal_config=c.TerminalConfiguration[_TERMINALS[ch.terminal]],
                min_val=ch.converter.min,
                max_val=ch.converter.max,
                units=c.VoltageUnits.VOLTS,
            )
        self._stage = f"configure the AI sample clock at {self.rate:g} Hz"
        self._ai.timing.cfg_samp_clk_timing(
            self.rate, sample_mode=c.AcquisitionType.HW_TIMED_SINGLE_POINT
        )
        self._stage = "check the AI task's channel count"
        if self._ai.number_of_channels != self.n_inputs:
            raise BackendError(
                f"AI task has {self._ai.number_of_channels} channels, expected {self.n_inputs}"
            )
        # The array shape is checked once, here, instead of by a driver query every read.
        self._reader = nidaqmx.stream_readers.AnalogMultiChannelReader(self._ai.in_stream)
        self._reader.verify_array_shape = False
        self._stage = "load DAQmxWaitForNextSampleClock from the NI-DAQmx library"
        self._waiter = ni_waitclock.SampleClockWaiter(self._ai._handle)
        code = ni_waitclock.convert_late_errors_to_warnings(self._ai._handle)
        if code < 0:
            log.warning("NI %s: cannot make late cycles warnings (DAQmx %d)", self.device, code)
        if self.n_outputs:
            self._configure_outputs(nidaqmx, c)
        if self.power_lines:
            self._configure_power(nidaqmx, c)
        if self.shunt_lines:
            self._configure_shunt(nidaqmx, c)
        do_lines = self.power_lines + [line for _, line in self.shunt_lines]
        if self._wd is not None and do_lines:
            self._stage = "set the watchdog's DO expiration states (power off, shunts open)"
            self._wd.cfg_watchdog_do_expir_states(
                [
                    nidaqmx.types.DOExpirationState(
                        physical_channel=line, expiration_state=c.Level.LOW
                    )
                    for line in do_lines
                ]
            )

    def _do_task(self, nidaqmx: Any, c: Any, what: str, lines: list[str]) -> tuple[Any, Any]:
        """An on-demand DO task over `lines`, one channel per line, and its writer."""
        self._stage = f"create the {what} DO task"
        task = nidaqmx.Task(f"{self.rig_id}_{what}")
        for line in lines:
            self._stage = f"add DO line {line}"
            task.do_channels.add_do_chan(line, line_grouping=c.LineGrouping.CHAN_PER_LINE)
        writer = nidaqmx.stream_writers.DigitalMultiChannelWriter(task.out_stream, auto_start=True)
        writer.verify_array_shape = False
        return task, writer

    def _configure_shunt(self, nidaqmx: Any, c: Any) -> None:
        """An on-demand DO task over the shunt relays' lines, written open (low) now."""
        lines = [line for _, line in self.shunt_lines]
        self._shunt_do, self._shunt_writer = self._do_task(nidaqmx, c, "shunt", lines)
        self._stage = "open the shunt relays"
        self._shunt_state[:] = False
        self._shunt_writer.write_one_sample_one_line(
            self._shunt_state, timeout=_CLOSE_WRITE_TIMEOUT_S
        )

    def _configure_power(self, nidaqmx: Any, c: Any) -> None:
        """An on-demand DO task over the power lines, written off now; with a watchdog the
        lines also expire low (pump off) when the loop stops refreshing it (`_configure`)."""
        self._do, self._do_writer = self._do_task(nidaqmx, c, "power", list(self.power_lines))
        self._stage = "switch the power lines off"
        self._power_state[:] = False
        self._do_writer.write_one_sample_one_line(self._power_state, timeout=_CLOSE_WRITE_TIMEOUT_S)

    def _configure_outputs(self, nidaqmx: Any, c: Any) -> None:
        self._stage = "create the AO task"
        self._ao = nidaqmx.Task(f"{self.rig_id}_ao")
        for ch in self.outputs:
            self._stage = f"add AO channel {ch.physical} ('{ch.name}')"
            self._ao.ao_channels.add_ao_voltage_chan(
                ch.physical,
                name_to_assign_to_channel=ch.name,
                min_val=ch.converter.min,
                max_val=ch.converter.max,
                units=c.VoltageUnits.VOLTS,
            )
        self._stage = f"clock the AO task from {self.clock_source}"
        self._ao.timing.cfg_samp_clk_timing(
            self.rate, source=self.clock_source, sample_mode=c.AcquisitionType.HW_TIMED_SINGLE_POINT
        )
        self._stage = "check the AO task's channel count"
        if self._ao.number_of_channels != self.n_outputs:
            raise BackendError(
                f"AO task has {self._ao.number_of_channels} channels, expected {self.n_outputs}"
            )
        self._writer = self._ao_writer(self._ao, auto_start=False)
        self._stage = f"create the watchdog on {self.device}"
        self._wd = nidaqmx.system.WatchdogTask(
            self.device, task_name=f"{self.rig_id}_watchdog", timeout=self.cfg.watchdog_timeout_s
        )
        self._stage = "set the watchdog's AO expiration states"
        self._wd.cfg_watchdog_ao_expir_states(
            [
                nidaqmx.types.AOExpirationState(
                    physical_channel=ch.physical,
                    expiration_state=ch.null_volts,
                    output_type=c.WatchdogAOExpirState.VOLTAGE,
                )
                for ch in self.outputs
            ]
        )

    def _ao_writer(self, ao: Any, auto_start: bool) -> Any:
        writer = self._nidaqmx.stream_writers.AnalogMultiChannelWriter(
            ao.out_stream, auto_start=auto_start
        )
        writer.verify_array_shape = False  # checked once in _configure_outputs
        return writer

    def start(self) -> None:
        if self._ai is None:
            raise BackendError(f"NI device '{self.device}': start() before open()")
        stage = "start"
        try:
            if self._ao is not None:
                # HW-timed single-point AO: the first sample must be in place before the clock
                # runs; the AO task (the clock's consumer) starts before the AI task (its source).
                stage = "write the null volts before start"
                self._writer.write_one_sample(self._null, timeout=self.cfg.clock_timeout_s)
                stage = "start the AO task"
                self._ao.start()
            stage = "start the AI task"
            self._ai.start()
            if self._wd is not None:
                stage = "start the watchdog"
                self._wd.start()
        except BaseException as exc:
            self._shutdown()
            if isinstance(exc, Exception):
                raise BackendError(describe_daq_error(self.device, stage, exc)) from exc
            raise
        self._running = True
        self._last_wake_ns = time.monotonic_ns()

    # ------------------------------------------------------------------ the cycle

    def wait_next_cycle(self) -> int:
        """Block on the AI sample clock; return the clocks missed since the previous call.

        DAQmx says only *whether* the cycle was late; how many clocks went by is estimated from
        the host clock: ≥ 1 when late (≥ 3 when DAQmx says "3 or more"), else 0.
        """
        waiter = self._waiter
        if waiter is None or not self._running:
            raise BackendError(f"NI device '{self.device}': wait_next_cycle() before start()")
        code = waiter.wait(self.cfg.clock_timeout_s)
        now = time.monotonic_ns()
        elapsed, self._last_wake_ns = now - self._last_wake_ns, now
        late = waiter.is_late or code in ni_waitclock.LATE_CODES
        if code < 0 and code not in ni_waitclock.LATE_CODES:
            # Timeout or a dead device: report it through the next read, and keep the loop
            # paced by sleeping out one period instead of spinning on an erroring call.
            self.last_error_code = code
            self._wait_failed = True
            time.sleep(self.period)
            return 0
        if not late:
            return 0
        missed = max(1, (elapsed + self._period_ns // 2) // self._period_ns - 1)
        if code == ni_waitclock.ERROR_MISSED_3_OR_MORE_SAMPLE_CLOCKS:
            missed = max(missed, 3)
        self.late_cycles += 1
        self.missed_clocks += missed
        return int(missed)

    def read(self, t: float, raw_out: np.ndarray) -> BackendStatus:
        if self._wait_failed or self._reader is None:
            self._wait_failed = False
            self.channel_fault.fill(1)
            return BackendStatus.ERROR
        try:
            self._reader.read_one_sample(self._volts_in, timeout=self.cfg.clock_timeout_s)
        except Exception as exc:
            self.last_error_code = getattr(exc, "error_code", -1)
            self.channel_fault.fill(1)
            return BackendStatus.ERROR
        v = self._volts_in
        np.subtract(v, self._ai_min, out=raw_out)
        np.multiply(raw_out, self._ai_inv_lsb, out=raw_out)
        np.add(raw_out, 0.5, out=raw_out)
        np.floor(raw_out, out=raw_out)
        np.clip(raw_out, 0.0, self._ai_top, out=raw_out)
        self.channel_fault.fill(0)
        return BackendStatus.OK

    def write(self, t: float, volts: np.ndarray) -> BackendStatus:
        if self._writer is None:
            return BackendStatus.OK if self.n_outputs == 0 else BackendStatus.ERROR
        # The AO range is the converter's; DAQmx would reject (not clip) a value beyond it.
        np.clip(volts, self._ao_min, self._ao_max, out=self._volts_out)
        try:
            self._writer.write_one_sample(self._volts_out, timeout=self.cfg.clock_timeout_s)
            self._wd.reset_timer()
        except Exception as exc:
            self.last_error_code = getattr(exc, "error_code", -1)
            return BackendStatus.ERROR
        return BackendStatus.OK

    def write_power(self, level: int) -> BackendStatus:
        if not self.power_lines:
            return BackendStatus.OK
        if self._do_writer is None:
            return BackendStatus.ERROR
        pump, high = lines(Power(level))
        self._power_state[0] = pump
        if len(self._power_state) > 1:
            self._power_state[1] = high
        return self._write_lines(self._do_writer, self._power_state)

    def write_shunt(self, mask: np.ndarray) -> BackendStatus:
        on = np.asarray(mask, dtype=bool)
        if not self.shunt_lines:
            return BackendStatus.ERROR if on.any() else BackendStatus.OK
        if self._shunt_writer is None:
            return BackendStatus.ERROR
        served = np.zeros(len(on), dtype=bool)
        served[self._shunt_index] = True
        if np.any(on & ~served):
            return BackendStatus.ERROR  # a channel without a shunt line
        np.take(on, self._shunt_index, out=self._shunt_state)
        return self._write_lines(self._shunt_writer, self._shunt_state)

    def _write_lines(self, writer: Any, state: np.ndarray) -> BackendStatus:
        """One sample of a DO task's lines (rare: a power or shunt change); ERROR and the
        driver's code if it refuses."""
        try:
            writer.write_one_sample_one_line(state, timeout=self.cfg.clock_timeout_s)
        except Exception as exc:
            self.last_error_code = getattr(exc, "error_code", -1)
            return BackendStatus.ERROR
        return BackendStatus.OK

    def null_outputs_after_crash(self) -> str:
        """An on-demand AO task over the output channels, one null write, cleared. The dead
        process's tasks are released by the driver when it exits; its hardware watchdog
        (`watchdog_timeout_s`) drives the outputs to their null expiration states on its own
        within that timeout, so this write is the second line. If the driver refuses it (an
        expired watchdog must be cleared first), the error is raised and reported: the
        expiration states are null already."""
        nidaqmx = _import_nidaqmx(self.device)
        c = nidaqmx.constants
        try:
            with nidaqmx.Task(f"{self.rig_id}_null_after_crash") as task:
                for ch in self.outputs:
                    task.ao_channels.add_ao_voltage_chan(
                        ch.physical,
                        min_val=ch.converter.min,
                        max_val=ch.converter.max,
                        units=c.VoltageUnits.VOLTS,
                    )
                task.write([float(v) for v in self._null], auto_start=True)
        except Exception as exc:
            raise BackendError(describe_daq_error(self.device, "null after crash", exc)) from exc
        return f"NI {self.device}: {self.n_outputs} AO channel(s) written to null"

    def write_null(self) -> None:
        if self._writer is None:
            return
        try:
            self._writer.write_one_sample(self._null, timeout=self.cfg.clock_timeout_s)
            self._wd.reset_timer()
        except Exception as exc:
            self.last_error_code = getattr(exc, "error_code", -1)

    # ------------------------------------------------------------------ shutdown

    def close(self) -> None:
        """Valves to null, then stop and clear every task. Idempotent; never raises a DAQmx
        error (each step is attempted whatever the previous one did)."""
        self._shutdown()

    def _shutdown(self) -> None:
        ai, ao, wd, writer = self._ai, self._ao, self._wd, self._writer
        do, do_writer = self._do, self._do_writer
        shunt, shunt_writer = self._shunt_do, self._shunt_writer
        self._ai = self._ao = self._wd = self._do = self._do_writer = None
        self._shunt_do = self._shunt_writer = None
        self._reader = self._writer = self._waiter = None
        self._running = False
        if ai is None and ao is None and wd is None and do is None and shunt is None:
            return
        steps: list[tuple[str, Any]] = []
        if shunt_writer is not None:
            # Shunt relays open: a transducer left shunted reads a false pressure.
            steps.append(("open the shunt relays", lambda: self._shunts_open(shunt_writer)))
        if do_writer is not None:
            # 0. Pump off first: a station whose service stops drops its hydraulic power.
            steps.append(("switch the power lines off", lambda: self._power_off(do_writer)))
        if writer is not None:
            # 1. Null through the hardware-timed path: on the valves at the next clock edge
            #    while the AI clock still runs.
            steps.append(("write null volts (hardware-timed)", lambda: self._write_null(writer)))
        if ai is not None:
            steps.append(("stop the AI task", ai.stop))
        if ao is not None:
            steps.append(("stop the AO task", ao.stop))
            # 2. Null again on demand: takes effect at once, with or without a running clock
            #    (a cleared AO task leaves its line at the last value it wrote).
            steps.append(("write null volts (on demand)", lambda: self._write_null_now(ao)))
        for task, what in (
            (ai, "AI task"),
            (ao, "AO task"),
            (do, "power DO task"),
            (shunt, "shunt DO task"),
            (wd, "watchdog"),
        ):
            if task is not None:
                steps.append((f"close the {what}", task.close))
        interrupted: BaseException | None = None
        for what, step in steps:
            try:
                step()
            except Exception as exc:
                log.warning("NI %s: could not %s: %s", self.device, what, exc)
            except BaseException as exc:  # Ctrl-C mid-shutdown: finish nulling, then re-raise
                interrupted = interrupted or exc
        log.info("NI %s: valves nulled, tasks closed", self.device)
        if interrupted is not None:
            raise interrupted

    def _power_off(self, writer: Any) -> None:
        self._power_state[:] = False
        writer.write_one_sample_one_line(self._power_state, timeout=_CLOSE_WRITE_TIMEOUT_S)

    def _shunts_open(self, writer: Any) -> None:
        self._shunt_state[:] = False
        writer.write_one_sample_one_line(self._shunt_state, timeout=_CLOSE_WRITE_TIMEOUT_S)

    def _write_null(self, writer: Any) -> None:
        writer.write_one_sample(self._null, timeout=self.cfg.clock_timeout_s)

    def _write_null_now(self, ao: Any) -> None:
        ao.timing.samp_timing_type = self._nidaqmx.constants.SampleTimingType.ON_DEMAND
        self._ao_writer(ao, auto_start=True).write_one_sample(
            self._null, timeout=_CLOSE_WRITE_TIMEOUT_S
        )
