"""The loop's timing while clients attack the service, against the same service idle, in one run.

    .venv/bin/python bench/loop_under_attack.py [--seconds 30] [--profile hw_profiles/sim-2dof.toml]

Two real-time runs of `rig-daq` (armed: the hold controller runs every cycle), each `--seconds`
long, with one honest telemetry subscriber that timestamps every sample message it receives:
1. idle: nobody else talks to the service;
2. attack: one process sends malformed commands on a DEALER socket as fast as the server takes
   them (8 outstanding), cycling random bytes (≤ 200 B), a ~500 kB map of small pairs and a
   100 000-deep nested array; another floods (un)subscriptions on a SUB socket (it is cut off and
   reconnects, which ZeroMQ does by itself).
3. attack, shared CPU: the same attack with the client processes free to run on the loop's CPU.

Where the clients run. The service keeps its own threads off the loop's CPU (`[realtime] cpu`;
`daq.loop.realtime.keep_off_cpu`, as the systemd unit's `CPUAffinity=0` does), and the rig PC
is meant to boot with that CPU isolated (`isolcpus=`, docs/operations.md), so no other process
is scheduled there. Phases 1 and 2 reproduce that: the clients (attackers and the honest
subscriber) are confined to the other CPUs, as on the rig PC or on other machines. Phase 3
shows what an unprepared PC costs: a SCHED_FIFO loop preempts the clients, but a client inside
a system call on its CPU delays its wake-up and evicts its caches.

Figures: skipped cycles and wake-up p99 of each run (from the service's `--status-out`), their
ratios attack/idle (target ≤ 1.2 both, judged on phase 2; both compared as (attack + 1)/(idle +
1), the histograms having 1 µs bins and a quiet loop's wake-up p99 being 0), the requests the
attacker got answered, and the honest subscriber's longest gap between two sample messages
(target ≤ 100 ms). The last line of output is the JSON of all of them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))
from loop_timing import _command  # noqa: E402

#: Requests the command attacker keeps in flight.
WINDOW = 8


def malformed_bodies(rng: random.Random) -> list[bytes]:
    import msgpack

    big_map = msgpack.packb(
        {"cmd": "run", "args": {"experiment": {f"k{i}": i for i in range(60_000)}}}
    )
    deep = b"\x81\xa3cmd" + b"\x91" * 100_000 + b"\x01"
    return [rng.randbytes(rng.randrange(1, 200)) for _ in range(64)] + [big_map, deep]


def command_attacker(endpoint: str, stop: Any, counts: Any) -> None:
    import zmq

    rng = random.Random(15)
    bodies = malformed_bodies(rng)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(endpoint)
    out = sent = answered = 0
    i = 0
    while not stop.is_set():
        while out < WINDOW:
            body = bodies[-2:][i % 2] if i % 4 == 0 else bodies[i % 64]  # 1 in 4 big/deep
            sock.send_multipart([b"", body])
            out += 1
            sent += 1
            i += 1
        if sock.poll(100):
            sock.recv_multipart()
            out -= 1
            answered += 1
    counts["sent"], counts["answered"] = sent, answered
    ctx.destroy(linger=0)


def subscription_flooder(endpoint: str, stop: Any, counts: Any) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.linger = 0
    sock.rcvhwm = 1
    sock.connect(endpoint)
    n = 0
    while not stop.is_set():
        topic = b"x%d" % (n % 1000)
        sock.subscribe(topic)
        sock.unsubscribe(topic)
        n += 2
    counts["subscriptions"] = n
    ctx.destroy(linger=0)


def honest_subscriber(endpoint: str, stop: Any, counts: Any) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.linger = 0
    sock.subscribe(b"samples")
    sock.connect(endpoint)
    last = None
    gap = 0.0
    messages = 0
    while not stop.is_set():
        if sock.poll(50):
            sock.recv_multipart()
            now = time.monotonic()
            if last is not None:
                gap = max(gap, now - last)
            last = now
            messages += 1
    counts["max_gap_ms"], counts["messages"] = gap * 1e3, messages
    ctx.destroy(linger=0)


def confined(target: Any, off_cpu: int | None, *args: Any) -> None:
    """Run a client `target` off the loop's CPU (None: wherever the scheduler puts it)."""
    if off_cpu is not None:
        rest = os.sched_getaffinity(0) - {off_cpu}
        if rest:
            os.sched_setaffinity(0, rest)
    target(*args)


def run_phase(
    profile: Path,
    seconds: float,
    attack: bool,
    extra: list[str] | None = None,
    off_cpu: int | None = None,
) -> dict[str, Any]:
    import subprocess
    import tempfile

    from rigctl.session import free_endpoint

    mpc = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp, mpc.Manager() as manager:
        status = Path(tmp) / "status.json"
        commands, telemetry = free_endpoint(), free_endpoint()
        cmd = [sys.executable, "-m", "daq.service", "--profile", str(profile), "--duration",
               str(seconds), "--status-out", str(status), "--run-dir", tmp, "--telemetry",
               telemetry, "--commands", commands, *(extra or [])]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = subprocess.Popen(cmd, env=env, cwd=tmp, stderr=subprocess.PIPE, text=True)
        armed = _command(commands, "arm", lambda: proc.poll() is None)
        stop = manager.Event()
        honest, attack_c, flood_c = manager.dict(), manager.dict(), manager.dict()
        clients: list[tuple[Any, tuple[Any, ...]]] = [
            (honest_subscriber, (telemetry, stop, honest))
        ]
        if attack:
            clients += [
                (command_attacker, (commands, stop, attack_c)),
                (subscription_flooder, (telemetry, stop, flood_c)),
            ]
        workers = [mpc.Process(target=confined, args=(f, off_cpu, *a)) for f, a in clients]
        for w in workers:
            w.start()
        _, stderr = proc.communicate(timeout=seconds * 5 + 300)
        stop.set()
        for w in workers:
            w.join(30)
        if proc.returncode != 0 or not status.exists():
            raise SystemExit(f"service failed ({proc.returncode}):\n{stderr[-3000:]}")
        result: dict[str, Any] = json.loads(status.read_text())
        t = result["timing"]
        return {
            "state": result["state"],
            "loop_process": result.get("loop_process"),
            "fault": (result.get("fault") or {}).get("message"),
            "arm_reply_ok": armed.get("ok"),
            "cycles": t["cycles"],
            "skipped_cycles": t["skipped_cycles"],
            "overruns": t["overruns"],
            "wake_p99_us": t["wake_latency_us"]["p99"],
            "compute_p50_us": t["compute_time_us"]["p50"],
            "honest_max_gap_ms": honest.get("max_gap_ms"),
            "honest_messages": honest.get("messages"),
            "attacker": dict(attack_c),
            "flooder": dict(flood_c),
            "flooders_cut_off": (result.get("telemetry") or {}).get("flooders_cut_off"),
            "commands": result.get("commands"),
        }


def ratios(idle: dict[str, Any], attack: dict[str, Any]) -> dict[str, Any]:
    skipped = (attack["skipped_cycles"] + 1) / (idle["skipped_cycles"] + 1)
    wake = (attack["wake_p99_us"] + 1) / (idle["wake_p99_us"] + 1)
    gap = attack["honest_max_gap_ms"]
    return {
        "skipped_ratio": skipped,
        "skipped_ratio_ok": skipped <= 1.2,
        "wake_p99_ratio": wake,
        "wake_p99_ratio_ok": wake <= 1.2,
        "honest_max_gap_ms": gap,
        "honest_gap_ok": gap is not None and gap <= 100.0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--profile", type=Path, default=ROOT / "hw_profiles/sim-2dof.toml")
    ap.add_argument(
        "--loop-thread",
        action="store_true",
        help="the loop as a thread of the service (layout before issue 15), for comparison",
    )
    ap.add_argument(
        "--no-shared-phase", action="store_true", help="skip phase 3 (clients on the loop's CPU)"
    )
    args = ap.parse_args(argv)
    extra = ["--loop-thread"] if args.loop_thread else []
    from daq.profile.loader import load_profile

    cpu = load_profile(args.profile).realtime.cpu
    off = cpu if cpu >= 0 else None
    idle = run_phase(args.profile, args.seconds, attack=False, extra=extra, off_cpu=off)
    print(f"idle: {idle}", flush=True)
    attack = run_phase(args.profile, args.seconds, attack=True, extra=extra, off_cpu=off)
    print(f"attack: {attack}", flush=True)
    figures: dict[str, Any] = {
        "seconds": args.seconds,
        "loop_layout": "thread" if args.loop_thread else "process",
        "loop_cpu": cpu,
        "idle": idle,
        "attack": attack,
        **ratios(idle, attack),
    }
    if not args.no_shared_phase:
        shared = run_phase(args.profile, args.seconds, attack=True, extra=extra)
        print(f"attack, clients on the loop's CPU too: {shared}", flush=True)
        figures["attack_shared_cpu"] = {**shared, **ratios(idle, shared)}
    figures["load_average"] = os.getloadavg()
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
