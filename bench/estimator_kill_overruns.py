"""Why killing the estimator raises the loop's overruns: the same armed real-time run four ways.

    .venv/bin/python bench/estimator_kill_overruns.py [--kills 40] [--every 1.0]

Each phase is a fresh `rig-daq` (real time, the simulator, the profile's real-time settings:
the loop SCHED_FIFO on `[realtime] cpu`, the service's threads kept off it), armed (the hold
controller runs every cycle) for `kills × every` seconds:

- `baseline`: nothing else runs;
- `estimator_unpinned`: `rig-estimator` is started as `rigctl identify` started it (no CPU
  affinity: it may run on the loop's CPU) and SIGKILLed `every` s later, `kills` times;
- `estimator_pinned`: the same, the estimator confined to the CPUs other than the loop's (as
  the systemd unit's `CPUAffinity=0`, and `rigctl identify` now);
- `python_unpinned`: the control — a Python process importing what the estimator imports
  (numpy, scipy, the estimator package) but never connecting to the service, started and
  SIGKILLed the same way without affinity.

Figures: overruns and skipped cycles per phase (from `status`); with `--rounds N` the phases
run N times interleaved, and each phase's median overruns is compared with the baseline's
(the spread between rounds of one phase is the host's noise). The last line is the JSON.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PROFILE = ROOT / "hw_profiles" / "sim-2dof.toml"


def free_endpoint() -> str:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def phase(name: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from daq.commands import CommandClient
    from daq.profile import load_profile

    loop_cpu = load_profile(PROFILE).realtime.cpu
    others = sorted(set(os.sched_getaffinity(0)) - {loop_cpu}) or None
    run_dir = tmp / name
    run_dir.mkdir(parents=True)
    cmd, tel = free_endpoint(), free_endpoint()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    log = (run_dir / "rig-daq.log").open("wb")
    daq = subprocess.Popen(
        [sys.executable, "-m", "daq.service", "--profile", str(PROFILE), "--commands", cmd,
         "--telemetry", tel, "--run-dir", str(run_dir)],
        env=env, cwd=run_dir, stdout=subprocess.DEVNULL, stderr=log,
    )  # fmt: skip
    client = CommandClient(cmd, timeout=60)
    try:
        assert client.request("arm")["ok"]
        time.sleep(2.0)  # past the start's transients
        s0 = client.request("status")["timing"]
        t0 = time.monotonic()
        for _ in range(args.kills if name != "baseline" else 0):
            if name.startswith("estimator"):
                argv = [sys.executable, "-m", "estimator.service", "--profile", str(PROFILE),
                        "--telemetry", tel, "--publish", free_endpoint(), "--param-file",
                        str(run_dir / "params.toml"), "--no-resume"]  # fmt: skip
            else:
                argv = [sys.executable, "-c", "import numpy, scipy.linalg, estimator.service, "
                        "time; time.sleep(60)"]  # fmt: skip
            pin = others if name.endswith("_pinned") else None
            p = subprocess.Popen(
                argv, env=env, cwd=run_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                preexec_fn=functools.partial(os.sched_setaffinity, 0, pin) if pin else None,
            )  # fmt: skip
            time.sleep(args.every)
            p.send_signal(signal.SIGKILL)
            p.wait()
        if name == "baseline":
            time.sleep(args.kills * args.every)
        s1 = client.request("status")
        elapsed = time.monotonic() - t0
    finally:
        client.close()
        daq.send_signal(signal.SIGTERM)
        daq.wait(60)
        log.close()
    t1 = s1["timing"]
    return {
        "seconds": round(elapsed, 1),
        "overruns": t1["overruns"] - s0["overruns"],
        "skipped": t1["skipped_cycles"] - s0["skipped_cycles"],
        "wake_p99_us": t1["wake_latency_us"].get("p99"),
        "compute_p99_us": t1["compute_time_us"].get("p99"),
        "compute_max_us": t1["compute_time_us"].get("max"),
        "state": s1["state"],
        "rt": (s1.get("rt") or {}).get("applied"),
        "loop_cpu": loop_cpu,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--kills", type=int, default=40)
    p.add_argument("--every", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=1, help="repeat the phases, interleaved")
    p.add_argument("--workdir", type=Path, default=None, help="keep the runs and logs here")
    p.add_argument(
        "--phases", default="baseline,estimator_unpinned,estimator_pinned,python_unpinned"
    )
    args = p.parse_args()
    out: dict[str, Any] = {"cpus": os.cpu_count(), "load": os.getloadavg()}
    names = [n.strip() for n in args.phases.split(",") if n.strip()]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="estimator-kill-") as d:
        tmp = Path(d) if args.workdir is None else args.workdir
        tmp.mkdir(parents=True, exist_ok=True)
        for r in range(args.rounds):  # interleaved: slow drifts of the host hit every phase
            for name in names:
                runs[name].append(phase(name, args, tmp / f"round{r}"))
    for name in names:
        counts = sorted(x["overruns"] for x in runs[name])
        out[name] = {"overruns": counts, "median": counts[len(counts) // 2], "runs": runs[name]}
    if "baseline" in out:
        base = out["baseline"]["median"]
        for name in names:
            out[name]["median_vs_baseline"] = round((out[name]["median"] + 1) / (base + 1), 2)
    out["load_after"] = os.getloadavg()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
