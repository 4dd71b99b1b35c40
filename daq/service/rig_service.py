"""The `rig-daq` service object: profile → backend → loop, with the recorder, telemetry,
command socket and systemd notification wired around it (the command line is `daq.service`).

Two layouts of the loop (issue 15):
- `loop_process=True` (what `rig-daq` runs): the loop, with its backend, runs in a process of
  its own (`daq.service.loop_supervisor.LoopProcess`, `daq.loop.process_main`); this process
  keeps commands, telemetry, recording, notify and housekeeping, and reaches the loop only
  through shared memory. The backend is built in the loop process by `backend_factory`.
- `loop_process=False`: the loop runs as a thread of this process with the `backend` given
  (unit tests that inspect a fake backend in-process; `rig-daq --loop-thread` for comparison).

Each optional part sits behind `daq.service.housekeeping.optional()`: a part whose module is not
installed is skipped with one log line, so the loop runs without it.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daq.backends.base import Backend
from daq.loop import DEFAULT_RING_CAPACITY, Loop
from daq.loop import realtime as rt
from daq.profile.schema import Profile
from daq.service.control_api import (
    ControlApi,
    controller_available,
    describe_profile,
    joint_gains,
    make_hold_runner,
    recorder_stats_dict,
)
from daq.service.housekeeping import Housekeeping, optional
from daq.service.loop_supervisor import LoopProcess

log = logging.getLogger("daq.service")

#: GIL switch interval while the loop runs. The loop thread needs the GIL the moment it wakes;
#: a thread holding it is asked to drop it after this long (CPython's default is 5 ms: five
#: whole cycles). Shorter costs the other threads a little throughput. See bench/loop_timing.py.
SWITCH_INTERVAL_S = 100e-6
#: Real time: sleep until this long before each deadline, then spin. The kernel wakes a
#: SCHED_FIFO sleeper some 10–60 µs late on this VM (cyclictest p99 28–44 µs, p99.9 48–133 µs)
#: and the interpreter adds its own wake-up cost (GIL, frame) on top; spinning the last 150 µs
#: absorbs both, so the cycle starts within a µs or two of its deadline, for ~15 % of the loop's
#: own (isolated) CPU. 50 µs was enough on a quiet machine but not while clients hammered the
#: service from the other CPU: bench/loop_under_attack.py wake-up p99 5 → 23 µs with 50 µs,
#: 0 → 0 µs with 150 µs (issue 15, same VM, same day).
DEFAULT_SPIN_US = 150.0
#: How long shutdown waits for the loop thread before giving up on it.
STOP_TIMEOUT_S = 3.0


class Service:
    def __init__(
        self,
        profile: Profile,
        backend: Backend | None,
        *,
        loop_process: bool = False,
        backend_factory: Callable[[Profile], Backend] | None = None,
        profile_text: str | None = None,
        virtual_time: bool = False,
        run_dir: str | Path | None = None,
        rt_settings: rt.RtSettings | None = None,
        spin_us: float = 0.0,
        network: bool = True,
        telemetry_endpoint: str | None = None,
        command_endpoint: str | None = None,
        params: Any | None = None,
        heartbeat_helper: bool = True,
        calibration_dir: str | Path | None = None,
    ) -> None:
        """`params`: plant parameters (a `daq.param_set.ParamSet`, or bare `PlantParams`) for
        model-based experiment segments; None refuses such segments until `load_params`.
        `loop_process`: run the loop in its own process, its backend made there by
        `backend_factory` (default `daq.backends.factory.make_backend`); `backend` must then
        be None. `heartbeat_helper`: see `LoopProcess`."""
        self.profile = profile
        self.backend = backend
        hold = make_hold_runner(profile, joint_gains(profile)) if controller_available() else None
        if hold is None:
            log.warning("controller package not available: the rig can be monitored, not armed")
        self.rt_report: dict[str, list[str]] | None = None
        self.loop: Loop | LoopProcess
        if loop_process:
            if backend is not None:
                raise ValueError("loop_process: the backend is made in the loop process")
            if backend_factory is None:
                from daq.backends.factory import make_backend

                backend_factory = make_backend
            self.loop = LoopProcess(
                profile,
                backend_factory,
                hold=hold,
                virtual_time=virtual_time,
                ring_capacity=DEFAULT_RING_CAPACITY,
                spin_us=spin_us,
                rt_settings=rt_settings,
                heartbeat_helper=heartbeat_helper,
            )
        else:
            if backend is None:
                raise ValueError("a loop thread needs a backend")
            self.loop = Loop(
                profile,
                backend,
                hold=hold,
                virtual_time=virtual_time,
                ring_capacity=DEFAULT_RING_CAPACITY,
                spin_us=spin_us,
            )
            if rt_settings is not None:
                self.loop.rt_setup = lambda: self._apply_rt(rt_settings)
        directory = Path(run_dir) if run_dir is not None else Path(profile.recording.directory)
        self.recorder = self._make_recorder(directory, profile_text)
        if isinstance(self.loop, LoopProcess) and self.recorder is not None:
            # If this process dies while recording, the loop process closes the run file
            # from the shared ring, ending it with the null cycle (daq/recording/salvage.py).
            from daq.recording.salvage import salvage_from_loop

            self.loop.orphan_hook = salvage_from_loop
            self.recorder.on_file = self.loop.link.set_run_path
        self._zmq_ctx: Any = None
        self.telemetry: Any = None
        self.commands: Any = None
        self.api = ControlApi(
            self.loop,
            status=self.status,
            recorder=self.recorder,
            on_describe=self._request_meta,
            params=params,
            on_params=self._params_loaded,
            calibration_dir=calibration_dir,
        )
        self._params_loaded(None)
        self.api.calibration.on_change = self._calibration_changed
        self._calibration_changed(self.api.calibration.summary(), event=False)
        if network:
            self._make_network(telemetry_endpoint, command_endpoint)
        self.housekeeping = Housekeeping(
            self.loop, sinks=[s for s in (self.recorder, self.telemetry) if s is not None]
        )
        self.api.before_record_stop = self.housekeeping.forward_events
        self.notifier: Any = None
        self.watchdog: Any = None

    # ------------------------------------------------------------------ parts

    def _apply_rt(self, settings: rt.RtSettings) -> None:
        self.rt_report = rt.apply(settings).to_dict()

    def _make_recorder(self, directory: Path, profile_text: str | None) -> Any:
        mod = optional("daq.recording", "recording")
        if mod is None:
            return None
        p = self.profile
        meta = {"rig": p.rig.id, "period": p.period, "virtual_time": self.loop.virtual_time}
        return mod.Recorder(
            self.loop.ring,
            self.loop.layout,
            directory,
            meta,
            quota_bytes=p.recording.quota_bytes,
            min_free_bytes=p.recording.min_free_bytes,
            profile_text=profile_text,
        )

    def _make_network(self, telemetry_endpoint: str | None, command_endpoint: str | None) -> None:
        tel_mod = optional("daq.telemetry", "telemetry")
        cmd_mod = optional("daq.commands", "command socket")
        if tel_mod is None and cmd_mod is None:
            return
        import zmq

        net = self.profile.network
        auth = None
        if net.keys_dir is not None:
            sec = importlib.import_module("daq.security")
            auth = sec.CurveConfig.from_keys_dir(net.keys_dir)
        self._zmq_ctx = zmq.Context()
        desc = describe_profile(self.profile, self.loop)
        if tel_mod is not None:
            self.telemetry = tel_mod.TelemetryPublisher(
                self._zmq_ctx,
                telemetry_endpoint or net.telemetry,
                self.loop.ring,
                self.loop.layout,
                rig_id=self.profile.rig.id,
                period=self.profile.period,
                batch=net.telemetry_batch,
                status_fn=self.status,
                meta_extra={
                    "joints": desc["joints"],
                    "profile": {k: v for k, v in desc.items() if k != "columns"},
                },
                auth=auth,
            )
        if cmd_mod is not None:
            self.commands = cmd_mod.CommandServer(
                self._zmq_ctx, command_endpoint or net.commands, self.api.handle, auth=auth
            )

    def _params_loaded(self, param_set: Any) -> None:
        """Every recording started from now on names the parameter set in its metadata; one
        under way gets an event (parameters load only in IDLE/ARMED, never mid-experiment)."""
        summary = self.api.params_summary()
        if self.recorder is not None:
            self.recorder.meta["params"] = summary
            if param_set is not None:
                self.recorder.event("params_loaded", **(summary or {}))

    def _calibration_changed(self, summary: dict[str, Any] | None, event: bool = True) -> None:
        """Every recording started from now on carries the calibration in force in its header;
        one under way gets an event (calibrations change only in IDLE)."""
        if self.recorder is not None:
            self.recorder.meta["calibration"] = summary
            if event:
                self.recorder.event("calibration_applied", calibration=summary)

    def _request_meta(self) -> None:
        if self.telemetry is not None:
            self.telemetry.request_meta()

    # ------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        s = self.loop.status()
        s["rig"] = self.profile.rig.id
        s["rt"] = self.loop.rt_report if isinstance(self.loop, LoopProcess) else self.rt_report
        s["recorder"] = recorder_stats_dict(self.recorder.stats) if self.recorder else None
        s["params"] = self.api.params_summary()
        s["check"] = self.api.check_status()
        cal = self.api.calibration.summary()
        s["calibration"] = (
            None if cal is None else {k: cal[k] for k in ("source", "created_utc", "sha256")}
        )
        if self.telemetry is not None:
            s["telemetry"] = self.telemetry.stats.as_dict()
        if self.commands is not None:
            s["commands"] = {
                "requests": self.commands.requests,
                "errors": self.commands.errors,
                "lane": self.commands.lane_requests,
                "busy": self.commands.busy,
            }
        s["housekeeping"] = self.housekeeping.stats()
        # Native thread ids by name: what `top -H`, `chrt -p` and perf show for this process.
        s["threads"] = {t.name: t.native_id for t in threading.enumerate()}
        return s

    def status_line(self) -> str:
        loop, timing = self.loop, self.loop.timing
        fault = loop.fault
        text = f"{loop.state.name} seq={loop.seq} overruns={timing.overruns}"
        if fault is not None:
            text += f" fault={fault.message}"
        if self.recorder is not None and self.recorder.stats.active:
            text += " recording"
        return text

    # ------------------------------------------------------------------ lifecycle

    def start(self, duration: float | None = None, record: bool = False) -> None:
        """Open the backend, bind sockets, start recording if asked, then the loop."""
        if isinstance(self.loop, LoopProcess):
            self.loop.low_water = self._recorder_position
            self.loop.on_crash = self._loop_crashed
            # The loop process first (backend open and warm, waiting for go): a command that
            # arrives once the socket is bound finds a loop to answer it.
            self.loop.prepare(duration)
        else:
            assert self.backend is not None
            self.backend.open()
            self.backend.start()
            self.loop.warm_up()
        if self.telemetry is not None:
            self.telemetry.start()
        if self.commands is not None:
            self.commands.start()
        if record:
            if self.recorder is None:
                raise RuntimeError("--record: the recording package is not available")
            path = self.recorder.start()
            error = self.recorder.stats.error
            if error:
                raise RuntimeError(f"--record: {error}")
            log.info("recording to %s", path)
        self.housekeeping.start()
        if not self.loop.virtual_time and isinstance(self.loop, Loop):
            sys.setswitchinterval(SWITCH_INTERVAL_S)
        self.loop.start(duration)
        self._start_notify()

    def _recorder_position(self) -> int | None:
        """The next row the recorder will write, if it is recording (virtual time: the loop
        process waits for it rather than lap it)."""
        return None if self.recorder is None else self.recorder.position

    def _loop_crashed(self, text: str) -> None:
        if self.notifier is not None:
            self.notifier.status(text)

    def _start_notify(self) -> None:
        mod = optional("daq.sdnotify", "systemd notify")
        if mod is None:
            return
        self.notifier = mod.Notifier.from_env()
        deadline = time.monotonic() + 30.0
        while self.loop.cycles == 0 and not self.loop.finished.is_set():
            if time.monotonic() > deadline:
                log.error("the loop has not completed a cycle in 30 s; not reporting READY")
                return
            time.sleep(0.001)
        self.notifier.ready(self.status_line())
        self.watchdog = mod.WatchdogFeeder(
            self.notifier, heartbeat=lambda: self.loop.cycles, status_text=self.status_line
        ).start()

    def wait(self, stop: threading.Event) -> None:
        """Until `stop` is set (signal) or the loop ends on its own (duration, failure)."""
        while not stop.wait(0.05):
            if self.loop.finished.is_set():
                return

    def shutdown(self) -> int:
        """Valves null, loop stopped, recorder drained, backend closed. Returns the exit code."""
        if self.notifier is not None:
            self.notifier.stopping(self.status_line())
        if self.commands is not None:
            self.commands.stop()
        self.api.close()  # a limit check under way is abandoned
        self.loop.stop()
        stopped = self.loop.join(STOP_TIMEOUT_S)
        failed = self.loop.error is not None
        if not stopped:
            # The loop is stuck (e.g. in a driver call). Safety first: null the valves from
            # here. A loop thread is a daemon and dies with the process; a loop process is
            # killed, and its supervisor nulls the valves through a fresh backend handle.
            log.error("the loop did not stop within %.1f s; nulling the valves", STOP_TIMEOUT_S)
            if isinstance(self.loop, LoopProcess):
                self.loop.kill()
                self.loop.join(STOP_TIMEOUT_S)
            else:
                assert self.backend is not None
                self.backend.write_null()
            failed = True
        failed = failed or self.loop.error is not None
        sys.setswitchinterval(0.005)
        self.housekeeping.stop()  # forwards the last events to the recorder and telemetry
        if self.recorder is not None:
            stats = self.recorder.stop()
            if stats is not None and getattr(stats, "path", None) is not None:
                log.info("recording closed: %s", recorder_stats_dict(stats))
        if self.telemetry is not None:
            self.telemetry.stop()
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.backend is not None:
            self.backend.close()
        if self._zmq_ctx is not None:
            self._zmq_ctx.term()
        if isinstance(self.loop, LoopProcess):
            self.loop.close()  # the readers have stopped: remove the shared segments' names
        if self.loop.error is not None:
            log.error("the loop failed: %s", self.loop.error)
        timing = self.loop.timing.snapshot()
        log.info(
            "stopped: %d cycles, state %s, overruns %d",
            self.loop.seq,
            self.loop.state.name,
            timing["overruns"],
        )
        return 1 if failed else 0
