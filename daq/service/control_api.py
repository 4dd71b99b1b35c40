"""Command handler: what each command of the command socket does (docs/protocol.md).

`ControlApi.handle(cmd, args, client)` runs on the command server's threads, never on the
loop's: `estop`, `stop` and `status` on its safety lane, the rest on its worker
(daq/commands/server.py), so two handlers may run at once. Everything expensive or allocating —
parsing and checking an experiment against the profile's limits, building a runner, building
new PID gains — happens here; the loop receives a finished object through its single-slot
mailbox and only swaps it in at the start of a cycle. `estop` therefore acts in the very next
cycle after the request arrives, whatever the worker is doing.

The limit check of an experiment that needs more than `CHECK_INLINE_SAMPLES` samples runs in a
worker process (`daq.service.check_worker`). `run` waits up to `CHECK_REPLY_S` for it; a check
still going then is answered `{checking: true, check: {...}}` and finishes asynchronously: when
it passes, the experiment starts (unless a `stop`, `estop` or `disarm` came in between, which
cancel it); its outcome is `status.check`. `stop`, `estop` and `disarm` cancel a check under
way; `stop` in ARMED with a check under way answers `{cancelled: <experiment>}`.

Refusals raise `CommandError(code, message)` with the protocol's codes: `invalid_state` (the
state machine says no), `rejected` (well formed but refused: limits, soft limits, unknown joint
content), `bad_args`, `recorder_error`, `internal` (the loop did not answer).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from daq.commands.errors import CommandError
from daq.loop import Loop
from daq.loop.mailbox import MailboxError
from daq.loop.states import Action, refusal
from daq.profile.schema import Profile
from daq.service.loop_supervisor import LoopProcess

log = logging.getLogger(__name__)

#: How long a command waits for the loop. A running loop answers within a cycle; in virtual time
#: it may be waiting on a recorder that a loaded machine slowed (two `rigctl identify` at once
#: failed 'arm' at 1 s). A loop that is really stuck is caught by the stall interlock well before
#: this, so the limit only decides how long a client waits; it stays under rigctl's 10 s.
LOOP_TIMEOUT_S = 5.0
#: Checks needing more samples than this run in the worker process (a few hundred ms inline).
CHECK_INLINE_SAMPLES = 200_000
#: How long `run` waits for a worker-process check before answering "checking".
CHECK_REPLY_S = 1.0


class RecorderLike(Protocol):
    def start(self, run_name: str | None = None) -> Any: ...

    def stop(self) -> Any: ...

    def event(self, kind: str, **payload: Any) -> None: ...

    @property
    def stats(self) -> Any: ...


# ------------------------------------------------------------------ controller glue


def joint_gains(profile: Profile) -> list[Any]:
    """`controller.pid.PidParams` per joint from `[joints.pid]`."""
    from controller.pid import PidParams

    return [PidParams.from_mapping(j.pid) for j in profile.joints]


def joint_limits(profile: Profile) -> list[Any]:
    """`controller.limits.JointLimits` per joint from `[joints.limits]` (degrees → rad), with
    the piston areas where the joint's pressures are measured (ΔP feedback possible)."""
    from controller.limits import JointLimits

    on = profile.interlocks.following_error
    return [
        dataclasses.replace(
            JointLimits.from_degrees(
                j.limits.soft_min_deg,
                j.limits.soft_max_deg,
                j.limits.max_velocity_deg_s,
                j.limits.max_acceleration_deg_s2,
                j.limits.valve_max_v,
                *(profile.dp_areas(j.name) or (0.0, 0.0)),
            ),
            following_error=math.radians(j.limits.following_error_deg) if on else math.inf,
            following_error_per_velocity=j.limits.following_error_per_velocity_s if on else 0.0,
        )
        for j in profile.joints
    ]


def make_hold_runner(profile: Profile, gains: Sequence[Any]) -> Any:
    """The service's hold with `gains`, each joint's ΔP gain its `hold_dp` where the gains
    have none (`dp` = 0): the hold damps the oil column, the runs' laws do not."""
    from controller.runner import HoldRunner

    held = [g.replace(dp=g.hold_dp) if g.dp == 0.0 and g.hold_dp > 0.0 else g for g in gains]
    return HoldRunner(held, joint_limits(profile), profile.period)


def controller_available() -> bool:
    try:
        import controller.runner  # noqa: F401
    except ImportError:
        return False
    return True


def describe_profile(profile: Profile, loop: Loop | LoopProcess) -> dict[str, Any]:
    """Channels, joints with their limits and gains, interlocks, layout: what `describe`
    returns and what telemetry's `meta` carries beside the columns."""
    return {
        "rig": profile.rig.id,
        "description": profile.rig.description,
        "period": profile.period,
        "virtual_time": loop.virtual_time,
        "backend": profile.backend.kind,
        "columns": loop.layout.to_dict(),
        "channels": [
            {
                "name": c.name,
                "role": c.role,
                "joint": c.joint,
                "direction": "output" if c.is_output else "input",
                "units": c.scaling.units,
                "valid_min": c.valid_min,
                "valid_max": c.valid_max,
                "null_volts": c.null_volts if c.is_output else None,
            }
            for c in profile.channels
        ],
        "joints": [
            {
                "name": j.name,
                "home_deg": j.home_deg,
                "limits": j.limits.model_dump(),
                "pid": j.pid.model_dump(),
            }
            for j in profile.joints
        ],
        "interlocks": profile.interlocks.model_dump(),
    }


# ------------------------------------------------------------------ the handler


class ControlApi:
    def __init__(
        self,
        loop: Loop | LoopProcess,
        *,
        status: Callable[[], dict[str, Any]] | None = None,
        recorder: RecorderLike | None = None,
        on_describe: Callable[[], None] | None = None,
        params: Any | None = None,
        on_params: Callable[[Any], None] | None = None,
        calibration_dir: str | Path | None = None,
    ) -> None:
        """`status`: the service's full status (defaults to the loop's); `recorder`: for
        record_start/stop; `on_describe`: e.g. telemetry's `request_meta`; `params`: plant
        parameters for model-based experiment segments (None: such segments are refused), a
        `daq.param_set.ParamSet` or bare `PlantParams`; `on_params(param_set)`: called after
        `load_params` replaced them (the service puts the set into the recordings' metadata)."""
        self.loop = loop
        self.profile = loop.profile
        self._status = status or loop.status
        self.recorder = recorder
        self.on_describe = on_describe
        #: Forwards the events the loop has already posted (the service's housekeeping): the
        #: recorder must take them before its trailer, or a `record_stop` sent right after an
        #: experiment ends cuts `experiment_done` and the last state change from the file.
        self.before_record_stop: Callable[[], None] | None = None
        self.param_set: Any = params if hasattr(params, "summary") else None
        self.params: Any = self.param_set.params if self.param_set is not None else params
        self.on_params = on_params
        #: A [chain] profile's machine as it declares it: the model-based laws' plant when no
        #: parameters are loaded (no parameter file describes a chain yet). On the simulated
        #: chain it is the simulator's plant itself (docs/excavator.md).
        self._chain = self.profile.chain_model()[0] if self.profile.chain is not None else None
        self.gains: list[Any] | None = joint_gains(self.profile) if controller_available() else None
        #: Long limit checks (made at the first one that needs it).
        self.checker: Any = None
        #: Bumped by stop/estop/disarm: a run whose check began before must not start after.
        self._generation = 0
        #: Held while a checked run is posted to the loop and while stop/disarm cancel: a stop
        #: answered before the post is never overtaken by it (estop does not wait on it).
        self._start_lock = threading.Lock()
        self._check_lock = threading.Lock()
        self._handlers: dict[str, Callable[[dict[str, Any], Any], dict[str, Any]]] = {
            "status": lambda a, c: self._status(),
            "describe": self._describe,
            "arm": lambda a, c: self._transition("arm", None),
            "disarm": lambda a, c: self._cancelling("disarm"),
            "stop": lambda a, c: self._cancelling("stop"),
            "reset": lambda a, c: self._transition("reset", None),
            "estop": self._estop,
            "run": self._run,
            "set_gains": self._set_gains,
            "record_start": self._record_start,
            "record_stop": self._record_stop,
            "load_params": self._load_params,
            "params": self._params,
        }
        from daq.service.calibration_api import CalibrationState, calibration_handlers
        from daq.service.station_api import station_handlers

        self._handlers.update(station_handlers(self))
        #: Transducer calibrations: the store on disk, the one in force (daq.station).
        self.calibration = CalibrationState(
            self,
            calibration_dir if calibration_dir is not None else self.profile.calibration.directory,
        )
        self._handlers.update(calibration_handlers(self, self.calibration))
        from daq.service.procedures import ProcedureRunner

        #: The calibration procedure under way or last run (daq.service.procedures).
        self.procedures = ProcedureRunner(self)
        self._handlers["calibrate"] = lambda a, c: self.procedures.start(a)
        self._handlers["calibrate_status"] = lambda a, c: self.procedures.report()

    def handle(self, cmd: str, args: dict[str, Any], client: Any = None) -> dict[str, Any]:
        fn = self._handlers.get(cmd)
        if fn is None:
            raise CommandError("unknown_command", f"unknown command '{cmd[:64]}'")
        return fn(args, client)

    # -------------------------------------------------------------- loop commands

    def _call_loop(self, kind: str, payload: Any = None) -> dict[str, Any]:
        try:
            req = self.loop.request(kind, payload, timeout=LOOP_TIMEOUT_S)
        except MailboxError as exc:
            raise CommandError("internal", f"{kind}: {exc}") from None
        if not req.ok:
            raise CommandError(req.data.get("code", "rejected"), req.reason)
        return {"state": req.data.get("state"), "seq": req.data.get("seq")}

    def _transition(self, kind: str, payload: Any) -> dict[str, Any]:
        reason = refusal(self.loop.state, Action[kind.upper()])
        if reason is not None:  # answered without bothering the loop
            raise CommandError("invalid_state", reason)
        return self._call_loop(kind, payload)

    def _estop(self, args: dict[str, Any], client: Any) -> dict[str, Any]:
        who = getattr(client, "name", "local")
        reason = str(args.get("reason") or "")
        log.warning("E-STOP requested by %s%s", who, f": {reason}" if reason else "")
        # No lock here: a run posted just before is e-stopped by this; one after is refused.
        self._generation += 1
        self._cancel_check("estop")
        return self._call_loop("estop", f"by {who}" + (f": {reason}" if reason else ""))

    def _cancelling(self, kind: str) -> dict[str, Any]:
        """`stop` / `disarm`: cancel a check under way (its run never starts), then act."""
        with self._start_lock:
            self._generation += 1
            job = self._cancel_check(kind)
            if job is not None and kind == "stop" and refusal(self.loop.state, Action.STOP):
                return {"state": self.loop.state.name, "seq": self.loop.seq,
                        "cancelled": job.experiment}  # fmt: skip
            return self._transition(kind, None)

    def _cancel_check(self, why: str) -> Any:
        checker = self.checker
        if checker is None:
            return None
        job = checker.cancel(f"cancelled by {why}")
        if job is not None:
            log.warning("limit check of '%s' cancelled by %s", job.experiment, why)
        return job

    def check_status(self) -> dict[str, Any] | None:
        """The latest worker-process check (`status.check`), None before the first."""
        job = None if self.checker is None else self.checker.current
        return None if job is None else job.summary()

    def close(self) -> None:
        if self.checker is not None:
            self.checker.close()

    def _run(self, args: dict[str, Any], client: Any) -> dict[str, Any]:
        reason = refusal(self.loop.state, Action.RUN)
        if reason is not None:
            raise CommandError("invalid_state", reason)
        if self.gains is None:
            raise CommandError("rejected", "run: the controller package is not available")
        if self.checker is not None and self.checker.busy():
            job = self.checker.current
            raise CommandError(
                "invalid_state",
                f"run: the limit check of '{job.experiment}' is under way "
                f"({100 * job.progress():.0f} %); wait for it, or `stop` cancels it",
            )
        generation = self._generation
        from controller.experiment import Experiment, ExperimentError

        limits = joint_limits(self.profile)
        try:
            exp = Experiment.from_dict(args["experiment"])
        except (ExperimentError, ValueError, TypeError, KeyError) as exc:
            raise CommandError("rejected", f"run: experiment: {exc}") from None
        if exp.n_joints != len(limits):
            raise CommandError(
                "rejected", f"run: the experiment has {exp.n_joints} joints, the rig {len(limits)}"
            )
        try:  # gains and valve-sine values: cheap, so before the limit check samples anything
            exp.check_ranges(limits, self.profile.period)
        except ExperimentError as exc:
            raise CommandError("rejected", f"run: experiment: {exc}") from None
        params = self.params
        from controller.checks import check_cost

        samples = check_cost(exp, limits, params)
        if samples <= CHECK_INLINE_SAMPLES:
            violations = self._check(exp, limits)
            if violations:
                raise CommandError("rejected", refusal_message(violations, self.profile))
            return self._start(exp, limits, params, generation, args["experiment"])
        return self._run_checked(exp, limits, params, generation, samples, args["experiment"])

    def _run_checked(
        self,
        exp: Any,
        limits: list[Any],
        params: Any,
        generation: int,
        samples: int,
        source: Any,
    ) -> dict[str, Any]:
        """The check in the worker process; the reply within `CHECK_REPLY_S` either way."""
        from daq.service.check_worker import CheckWorker

        if self.checker is None:
            self.checker = CheckWorker()
        answered = threading.Event()  # set once `run` has replied "checking"

        def done(job: Any) -> None:
            with self._check_lock:
                if not answered.is_set():
                    return  # `run` is still waiting: it acts on the outcome itself
            try:
                self._after_check(job, exp, limits, params, generation, source)
            except CommandError:
                pass  # logged, and in `status.check`: nobody is waiting for a reply
            if self.recorder is not None:
                self.recorder.event("limit_check", **job.summary())

        try:
            job = self.checker.submit(exp, limits, params, samples, done)
        except RuntimeError as exc:
            raise CommandError("invalid_state", f"run: {exc}") from None
        log.info("limit check of '%s' (%d samples) in the worker process", job.experiment, samples)
        finished = job.done.wait(CHECK_REPLY_S)
        with self._check_lock:
            if not finished and not job.done.is_set():
                answered.set()
                return {
                    "state": self.loop.state.name,
                    "seq": self.loop.seq,
                    "experiment": job.experiment,
                    "checking": True,
                    "check": job.summary(),
                }
        return self._after_check(job, exp, limits, params, generation, source)

    def _after_check(
        self, job: Any, exp: Any, limits: list[Any], params: Any, generation: int, source: Any
    ) -> dict[str, Any]:
        """Start the run of a passed check (from `run`, or later from the watcher thread)."""
        try:
            if job.state == "refused":
                raise CommandError("rejected", refusal_message(job.violations, self.profile))
            if job.state != "passed":
                raise CommandError(
                    "rejected", f"run: the limit check was {job.state}: {job.message}".rstrip(": ")
                )
            out = self._start(exp, limits, params, generation, source)
        except CommandError as exc:
            if job.state == "passed":
                job.state = "start_refused"
            job.message = exc.message
            log.warning("experiment '%s' not started: %s", job.experiment, exc.message)
            raise
        job.state = "started"
        log.info("experiment '%s' started after its limit check", job.experiment)
        return out

    def _start(
        self, exp: Any, limits: list[Any], params: Any, generation: int, source: Any
    ) -> dict[str, Any]:
        """Build the runner and hand it to the loop, unless a stop came since `generation`;
        `source`: the experiment as sent (recorded with the run)."""
        from controller.experiment import ExperimentError
        from controller.runner import ExperimentRunner

        assert self.gains is not None  # `run` refused without the controller package
        try:  # checked already: the runner need not check again
            model = params if params is not None else self._chain
            runner = ExperimentRunner(
                exp, self.gains, limits, self.profile.period, model, check=False
            )
        except (ExperimentError, ValueError) as exc:
            raise CommandError("rejected", f"run: {exc}") from None
        with self._start_lock:
            if self._generation != generation:
                raise CommandError(
                    "rejected",
                    "run: a stop, estop or disarm arrived while the experiment was being "
                    "checked; it was not started",
                )
            out = self._call_loop("run", runner)
        if self.recorder is not None:
            # What drove the run, for closed-loop validation (estimator.validation_closed_loop):
            # the experiment as sent and the gains it was run over.
            self.recorder.event(
                "experiment",
                name=getattr(exp, "name", ""),
                experiment=source,
                gains=[dataclasses.asdict(g) for g in self.gains],
                params_sha256=None if self.param_set is None else self.param_set.sha256,
            )
        out["experiment"] = getattr(exp, "name", "")
        out["duration_s"] = float(getattr(runner, "total_duration", 0.0))
        stats = self.recorder.stats if self.recorder is not None else None
        path = getattr(stats, "path", None)
        if getattr(stats, "active", False) and path is not None:
            out["recording"] = str(Path(path).resolve())  # where this run's rows go
        return out

    def _check(self, exp: Any, limits: list[Any]) -> list[Any]:
        try:
            from controller.checks import check_experiment
        except ImportError:  # older controller: no limit checker; the loop's interlocks remain
            log.warning("controller.checks not available: experiment limits not pre-checked")
            return []
        return list(check_experiment(exp, limits, self.params))

    def _set_gains(self, args: dict[str, Any], client: Any) -> dict[str, Any]:
        if self.gains is None:
            raise CommandError("rejected", "set_gains: the controller package is not available")
        names = [j.name for j in self.profile.joints]
        joint = args["joint"]
        if joint not in names:
            raise CommandError("bad_args", f"set_gains: no joint '{joint}' (joints: {names})")
        j = names.index(joint)
        from controller.pid import gain_problems, gain_ranges

        ranges = gain_ranges(joint_limits(self.profile)[j], self.profile.period)
        problems = gain_problems(args["gains"], ranges)
        if problems:
            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            raise CommandError("bad_args", f"set_gains: joint {joint}: gains.{problems[0]}{more}")
        try:
            new = dataclasses.replace(
                self.gains[j], **{k: float(v) for k, v in args["gains"].items()}
            )
        except (TypeError, ValueError) as exc:
            raise CommandError("bad_args", f"set_gains: {exc}") from None
        refused = self.profile.dp_gain_refused(joint, new)
        if refused is not None:
            key, value, why = refused
            raise CommandError("bad_args", f"set_gains: joint {joint}: {key} = {value:g}: {why}")
        gains = list(self.gains)
        gains[j] = new
        out = self._call_loop("set_gains", make_hold_runner(self.profile, gains))
        self.gains = gains
        out["joint"] = joint
        out["gains"] = dataclasses.asdict(new)
        return out

    # -------------------------------------------------------------- plant parameters

    def params_summary(self) -> dict[str, Any] | None:
        """The current parameter set for `status` (None: no parameters)."""
        if self.param_set is not None:
            return dict(self.param_set.summary())
        return None if self.params is None else {"source": "(given in-process)"}

    def _load_params(self, args: dict[str, Any], client: Any) -> dict[str, Any]:
        # A running experiment's runner holds the old parameters: swapping them under it would
        # leave its feed-forward and its pre-run check disagreeing with `status`.
        state = self.loop.state.name
        if state not in ("IDLE", "ARMED"):
            raise CommandError(
                "invalid_state",
                f"load_params: refused in state {state}; parameters load in IDLE or ARMED "
                "(stop the experiment first)",
            )
        from daq.param_set import parse_param_set

        source = str(args.get("source") or "(sent by a client)")
        try:
            new = parse_param_set(args["text"], source, self.profile)
        except (ValueError, ImportError) as exc:
            raise CommandError("rejected", f"load_params: {source}: {exc}") from None
        self.param_set, self.params = new, new.params
        log.info("plant parameters loaded from %s (sha256 %s)", source, new.sha256[:12])
        if self.on_params is not None:
            self.on_params(new)
        return {"params": new.summary()}

    def _params(self, args: dict[str, Any], client: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"params": self.params_summary(), "values": None}
        if self.params is not None:
            from controller.paramfile import dump_params

            values = dump_params(self.params)
            out["values"] = {"global": values["global"], "joints": values["joints"]}
        return out

    # -------------------------------------------------------------- other commands

    def _describe(self, args: dict[str, Any], client: Any) -> dict[str, Any]:
        if self.on_describe is not None:
            self.on_describe()
        out = describe_profile(self.profile, self.loop)
        if self.gains is not None:
            out["gains"] = [dataclasses.asdict(g) for g in self.gains]
        return out

    def _record_start(self, args: dict[str, Any], client: Any) -> dict[str, Any]:
        if self.recorder is None:
            raise CommandError("recorder_error", "record_start: recording is not available")
        try:
            path = self.recorder.start(args.get("name"))
        except (RuntimeError, ValueError, OSError) as exc:
            raise CommandError("recorder_error", f"record_start: {exc}") from None
        stats = self.recorder.stats
        if getattr(stats, "error", None):
            raise CommandError("recorder_error", f"record_start: {stats.error}")
        if args.get("note"):
            self.recorder.event("note", text=args["note"])
        return {"path": str(Path(path).resolve())}

    def _record_stop(self, args: dict[str, Any], client: Any) -> dict[str, Any]:
        if self.recorder is None:
            raise CommandError("recorder_error", "record_stop: recording is not available")
        if self.before_record_stop is not None:
            self.before_record_stop()
        stats = self.recorder.stop()
        return recorder_stats_dict(stats)


def refusal_message(violations: Sequence[Any], profile: Profile) -> str:
    """`run`'s refusal: every violation, one per line, in the file's units and joint names
    (the same lines `rigctl check` prints)."""
    from controller.checks import describe

    names = [j.name for j in profile.joints]
    lines = "\n  ".join(describe(v, names) for v in violations)
    return f"run: {len(violations)} violation(s) of the profile's limits:\n  {lines}"


def recorder_stats_dict(stats: Any) -> dict[str, Any]:
    if stats is None:
        return {}
    if dataclasses.is_dataclass(stats) and not isinstance(stats, type):
        d = dataclasses.asdict(stats)
    else:
        d = dict(stats)
    return {
        k: (
            str(v.resolve())  # absolute: the service's directory is not the client's
            if isinstance(v, Path)
            else str(v)
            if v is not None and not isinstance(v, int | float | str | bool)
            else v
        )
        for k, v in d.items()
    }
