"""`rig-daq`: the service. Profile → backend → loop, plus recorder, telemetry, command socket and
systemd notification around it: two processes, the loop alone in one of them.

    python -m daq.service --profile hw_profiles/sim-2dof.toml [--virtual-time] [--duration S]
                          [--record] [--run-dir DIR] [--params FILE] [-v]

Processes (issue 15, docs/architecture.md): the loop process (`daq.loop.process_main`: backend,
scaling, interlocks, controller step, the row into the shared ring; real-time priority) and this
one, whose threads are `rig-loop-supervisor` (heartbeat to the loop, watches it die),
`rig-housekeeping` (forwards the loop's events to the recorder and telemetry, logs overruns at
most once a second), and those of the parts it wires (recorder writer, telemetry publisher,
command server, systemd watchdog feeder), all wired by `daq.service.rig_service.Service`.
`--loop-thread` runs the loop as a thread of this process instead (the layout before issue 15,
kept for comparison benches).

Exit: SIGTERM, SIGINT or the end of `--duration` stop the loop (valves to null), drain the
recorder, close the backend; the exit code is 0 unless the loop itself failed (an exception in a
cycle, or a loop that would not stop) — a latched interlock FAULT is the rig doing its job.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from daq.backends.base import BackendError
from daq.commands.errors import CommandError
from daq.loop import realtime as rt
from daq.param_set import read_param_set
from daq.profile.loader import ProfileError, load_profile
from daq.profile.schema import Profile
from daq.service import scripted_runs
from daq.service.housekeeping import optional
from daq.service.rig_service import DEFAULT_SPIN_US, Service

__all__ = ["Service", "build_parser", "main"]

log = logging.getLogger("daq.service")


# ---------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rig-daq", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", required=True, help="hardware profile (TOML)")
    p.add_argument(
        "--virtual-time",
        action="store_true",
        help="no waiting: the simulated plant advances one period per cycle",
    )
    p.add_argument(
        "--duration", type=float, default=None, help="stop after this many seconds of loop time"
    )
    p.add_argument("--record", action="store_true", help="record from the first cycle")
    p.add_argument(
        "--arm",
        action="store_true",
        help="arm once the loop runs, so that it holds every joint at home (--virtual-time "
        "only: a real rig is armed by its operator, `rigctl arm`)",
    )
    p.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="EXPERIMENT",
        help="arm, run this experiment file (repeat for several, in order) as `rigctl run "
        "--wait` would, and stop when the last has ended; exit 4 if one is refused or the rig "
        "faults (--virtual-time only, as --arm)",
    )
    p.add_argument("--run-dir", default=None, help="recording directory (overrides the profile)")
    p.add_argument(
        "--calibration-dir",
        default=None,
        help="transducer calibrations (overrides [calibration].directory)",
    )
    p.add_argument("--rt-priority", type=int, default=None, help="SCHED_FIFO priority (0 = off)")
    p.add_argument("--cpu", type=int, default=None, help="pin the loop thread (-1 = any)")
    p.add_argument("--no-mlock", action="store_true", help="do not lock memory")
    p.add_argument(
        "--spin-us",
        type=float,
        default=None,
        help=f"sleep until this many µs before each deadline, then busy-wait (real time only; "
        f"default: the profile's [realtime] spin_us, {DEFAULT_SPIN_US:g}; 0 = pure sleep)",
    )
    p.add_argument(
        "--loop-thread",
        action="store_true",
        help="run the loop as a thread of the service process, not in a process of its own "
        "(the layout before issue 15; for comparison benches)",
    )
    p.add_argument(
        "--python-heartbeat-only",
        action="store_true",
        help="no heartbeat helper process: the service's heartbeat to the loop comes from a "
        "Python thread alone, so a starved thread holding the interpreter lock can stop the "
        "rig (the layout before the helper; for comparison benches)",
    )
    p.add_argument("--no-network", action="store_true", help="no telemetry, no command socket")
    p.add_argument("--telemetry", default=None, help="telemetry endpoint (overrides the profile)")
    p.add_argument("--commands", default=None, help="command endpoint (overrides the profile)")
    p.add_argument(
        "--params",
        # The unit sets it from /etc/rig/daq.env (systemd/rig-daq.service): an empty value is
        # "no parameters", like leaving the option out.
        default=os.environ.get("RIG_PARAMS") or None,
        help="plant-parameter file (TOML) for model-based segments and the pre-run check; "
        "checked against the profile like `rigctl params load` (default: $RIG_PARAMS; "
        "docs/operations.md)",
    )
    p.add_argument(
        "--status-out",
        default=None,
        help="write the final status (timing statistics) as JSON here at exit",
    )
    p.add_argument("-v", "--verbose", action="count", default=0)
    return p


def _rt_settings(args: argparse.Namespace, profile: Profile) -> rt.RtSettings | None:
    explicit = args.rt_priority is not None or args.cpu is not None
    if args.virtual_time and not explicit:
        # Virtual time never sleeps: at SCHED_FIFO, pinned, it would hold a CPU at 100 % for
        # the whole run, and its timing is meaningless anyway.
        return None
    r = profile.realtime
    priority = r.priority if args.rt_priority is None else args.rt_priority
    cpu = r.cpu if args.cpu is None else args.cpu
    lock = r.lock_memory and not args.no_mlock and not args.virtual_time
    return rt.RtSettings(
        priority=priority, cpu=cpu, lock_memory=lock, cpu_latency_us=r.cpu_latency_us
    )


def _configure_logging(verbosity: int) -> ModuleType | None:
    mod = optional("daq.journal_logging", None)
    if mod is not None:
        mod.configure_logging(verbosity)
    else:
        logging.basicConfig(
            level=logging.DEBUG if verbosity > 0 else logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    return mod


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.arm and not args.virtual_time:
        parser.error("--arm needs --virtual-time (a real rig is armed by its operator)")
    if args.run and not args.virtual_time:
        parser.error("--run needs --virtual-time (a real rig's runs are its operator's)")
    logmod = _configure_logging(args.verbose)
    try:
        profile = load_profile(args.profile)
        profile_text = Path(args.profile).read_text(encoding="utf-8")
        experiments = scripted_runs.load_experiments(args.run)
    except (ProfileError, ValueError) as exc:
        log.error("%s", exc)
        return 2
    if logmod is not None:
        logmod.set_rig_id(profile.rig.id)
    from daq.backends.factory import make_backend

    try:
        params = read_param_set(args.params, profile) if args.params else None
    except (OSError, ValueError, ImportError) as exc:
        log.error("--params %s: %s", args.params, exc)
        return 2
    rt_settings = _rt_settings(args, profile)
    if rt_settings is not None and rt_settings.cpu >= 0 and not args.loop_thread:
        # Before any thread exists (zmq's I/O threads, the recorder): they inherit it.
        cpus = rt.keep_off_cpu(rt_settings.cpu)
        if cpus is not None:
            log.info("service on CPU %s, the loop on CPU %d", sorted(cpus), rt_settings.cpu)
    try:
        backend = None
        if args.loop_thread:  # otherwise the loop process makes it (and checks virtual time)
            backend = make_backend(profile)
            if args.virtual_time and backend.paced_by_hardware:
                raise BackendError("--virtual-time needs a simulated backend, not hardware")
        service = Service(
            profile,
            backend,
            loop_process=not args.loop_thread,
            profile_text=profile_text,
            virtual_time=args.virtual_time,
            run_dir=args.run_dir,
            calibration_dir=args.calibration_dir,
            rt_settings=rt_settings,
            spin_us=profile.realtime.spin_us if args.spin_us is None else args.spin_us,
            network=not args.no_network,
            telemetry_endpoint=args.telemetry,
            command_endpoint=args.commands,
            params=params,
            heartbeat_helper=not args.python_heartbeat_only,
        )
    except (BackendError, ValueError, OSError) as exc:
        log.error("cannot start: %s", exc)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        service.start(args.duration, record=args.record)
    except (BackendError, OSError, RuntimeError) as exc:
        log.error("cannot start: %s", exc)
        service.shutdown()
        return 2
    log.info(
        "running %s (%s)", profile.rig.id, "virtual time" if args.virtual_time else "real time"
    )
    if args.arm or experiments:
        # Through the command handler, as `rigctl arm` would: the loop takes it at its next
        # cycle (the cycles before it are IDLE, valves null) and refuses it if it must.
        try:
            reply = service.api.handle("arm", {}, None)
            log.info("armed at cycle %s", reply.get("seq"))
        except CommandError as exc:
            log.error("--arm refused: %s", exc)
            stop.set()
    runs = None
    if experiments and not stop.is_set():
        runs = scripted_runs.start(service.api, service.loop.finished, experiments, stop)
    service.wait(stop)
    if runs is not None:
        runs[0].join(10.0)
    code = service.shutdown()
    failure = runs[1][0] if runs is not None and runs[1] else None
    if failure is not None:
        log.error("--run: %s", failure)
        code = code or scripted_runs.EXIT_RUN_FAILED
    elif runs is not None:
        log.info("--run: %d experiment(s) ended fault-free", len(experiments))
    if args.status_out:
        Path(args.status_out).write_text(json.dumps(service.status(), default=str, indent=1))
    return code


if __name__ == "__main__":
    sys.exit(main())
