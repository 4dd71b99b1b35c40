"""Safety under load: e-stop and status latency while a long experiment is being checked, a
starved service thread, and the last recorded row after either process is killed.

    .venv/bin/python bench/safety_latency.py [--parts estop,status,starve,lastrow,flood,kill9]
        [--tries 50] [--starve-seconds 45] [--hogs 4] [--profile hw_profiles/sim-2dof.toml]

Every part runs `rig-daq` (`python -m daq.service`, real time, the simulator) as a separate
process and talks to it through its command socket only, as an operator's client would.

- `estop`: `run` of a 172 800 s multisine (two segments of a day, frequencies 0.05·(1, √2, π) Hz:
  no common period) with the simulator's plant parameters loaded, so that the valve-capacity
  check must sample all 86 M points (minutes): the reply is "checking". After a random 0.1–0.6 s
  a second client sends `estop` and times the round trip (request → reply from the loop: state
  ESTOP). Repeated `--tries` times (reset, arm, run, estop). Reference, same run: `estop` on the
  idle armed rig. Target: p99 ≤ 10 ms while checking.
- `status`: `--tries` `status` requests, 50–150 ms apart, during one such check; reference:
  the same on the idle rig. Target: p99 ≤ 10 ms.
- `starve`: the service records; a telemetry subscriber keeps its publisher thread busy; that
  thread is put at SCHED_IDLE and `--hogs` CPU hogs (busy Python processes) run for
  `--starve-seconds`. Pass: the rig is still ARMED without a fault at the end, the loop having
  cycled throughout. Then, hogs still running, the loop process is killed: how long the heartbeat
  helper took to notice (its timestamp in the control segment), and how long until `status`
  answered with the fault. Reference (same run): the service with `--python-heartbeat-only`,
  the layout before the helper: whether, and after how long, the loop stopped itself.
- `lastrow`: recording and armed, the loop process is killed, then (second run) the service is
  killed (SIGKILL): is the last recorded row the null cycle (FAULT, PROCESS_LOST, null commands),
  and how many rows were lost.
- `flood`, `kill9`: in `bench/safety_flood_kill.py` when present (its `flood()` and `kill9()`,
  or `run_part(name, args)` → dict and `add_arguments(parser)` if it has them), otherwise
  skipped with a note.

The machine this runs on may be shared: latencies are given with a reference measured in the
same run. The last line of output is the JSON of every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

try:  # h25b's parts (subscription flood, kill -9 loss bound), if that module exists
    import safety_flood_kill as flood_kill  # type: ignore[import-not-found]
except ImportError:
    flood_kill = None

OWN_PARTS = ("estop", "status", "starve", "lastrow")
OTHER_PARTS = ("flood", "kill9")
IRRATIONAL = [[0.05, 0.05 * math.sqrt(2), 0.05 * math.pi]] * 2


def free_endpoint() -> str:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def multisine(seconds_per_segment: float, segments: int) -> dict[str, Any]:
    return {
        "name": "irrational-multisine",
        "home_deg": [40.0, 30.0],
        "segments": [
            {
                "name": f"day{i}",
                "duration_s": seconds_per_segment,
                "trajectory": {
                    "kind": "multisine",
                    "frequencies_hz": IRRATIONAL,
                    "amplitudes_deg": [[1.0, 0.7, 0.5]] * 2,
                },
                "controller": {"kind": "pid"},
            }
            for i in range(segments)
        ],
    }


def write_params(profile: Path, out: Path) -> Path:
    """The simulator's plant as a parameter file (what `rigctl identify` would write)."""
    from controller.paramfile import dump_params
    from daq.profile import load_profile
    from daq.profile.plant import plant_params

    prof = load_profile(profile)
    d = dump_params(plant_params(prof), {"rig": prof.rig.id})

    def val(v: Any) -> str:
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return repr(float(v)) if isinstance(v, float) else str(v)

    lines = [f"{k} = {val(v)}" for k, v in d.items() if not isinstance(v, dict | list)]
    for table in ("meta", "global"):
        lines.append(f"[{table}]")
        lines += [f"{k} = {val(v)}" for k, v in d[table].items()]
    for joint in d["joints"]:
        lines.append("[[joints]]")
        lines += [f"{k} = {val(v)}" for k, v in joint.items()]
    out.write_text("\n".join(lines) + "\n")
    return out


class Rig:
    """One `rig-daq` process and a client for it."""

    def __init__(self, args: argparse.Namespace, run_dir: Path, *extra: str) -> None:
        self.commands, self.telemetry = free_endpoint(), free_endpoint()
        self.run_dir = run_dir
        self._log = (run_dir / "service.log").open("ab")
        cmd = [sys.executable, "-m", "daq.service", "--profile", str(args.profile),
               "--commands", self.commands, "--telemetry", self.telemetry,
               "--run-dir", str(run_dir), *extra]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, cwd=run_dir, env=dict(os.environ, PYTHONPATH=str(ROOT)),
            stdout=subprocess.DEVNULL, stderr=self._log,
        )  # fmt: skip
        from daq.commands import CommandClient

        self.client = CommandClient(self.commands, timeout=60.0)
        self.status()  # waits until the service answers

    def request(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.client.request(cmd, args)

    def timed(self, cmd: str, args: dict[str, Any] | None = None) -> tuple[float, dict[str, Any]]:
        t0 = time.perf_counter()
        reply = self.client.request(cmd, args)
        return (time.perf_counter() - t0) * 1e3, reply

    def status(self) -> dict[str, Any]:
        return self.request("status")

    def close(self) -> int | None:
        self.client.close()
        self._log.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        return self.proc.returncode


def percentiles(ms: list[float]) -> dict[str, float]:
    import numpy as np

    a = np.asarray(ms)
    return {
        "n": len(ms),
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
        "max_ms": round(float(a.max()), 3),
    }


def _arm(rig: Rig) -> None:
    state = rig.status()["state"]
    if state in ("ESTOP", "FAULT"):
        assert rig.request("reset")["ok"]
    if rig.status()["state"] == "IDLE":
        reply = rig.request("arm")
        assert reply["ok"], reply


def _computing(rig: Rig) -> None:
    """Until the check process is sampling (not still importing at its first start)."""
    deadline = time.monotonic() + 60
    while rig.status()["check"]["progress"] <= 0.0:
        assert time.monotonic() < deadline, "the check never began"
        time.sleep(0.02)


def part_estop_status(args: argparse.Namespace, tmp: Path, parts: set[str]) -> dict[str, Any]:
    params = write_params(args.profile, tmp / "sim-params.toml")
    run_dir = tmp / "estop"
    run_dir.mkdir()
    rig = Rig(args, run_dir, "--params", str(params))
    rng = random.Random(1)
    out: dict[str, Any] = {}
    try:
        _arm(rig)
        # Reference: the idle armed rig.
        ref_estop, ref_status = [], []
        for _ in range(args.tries):
            ref_status.append(rig.timed("status")[0])
            time.sleep(rng.uniform(0.05, 0.15))
        for _ in range(args.tries if "estop" in parts else 0):
            _arm(rig)
            ms, reply = rig.timed("estop", {"reason": "bench reference"})
            assert reply["ok"] and reply["state"] == "ESTOP", reply
            ref_estop.append(ms)
        exp = multisine(86_400.0, 2)
        run_ms: list[float] = []
        if "status" in parts:
            _arm(rig)
            ms, reply = rig.timed("run", {"experiment": exp})
            assert reply.get("checking"), reply
            run_ms.append(ms)
            _computing(rig)
            during = []
            for _ in range(args.tries):
                time.sleep(rng.uniform(0.05, 0.15))
                ms, st = rig.timed("status")
                assert st["check"]["state"] == "checking", st["check"]
                during.append(ms)
            busy, idle = percentiles(during), percentiles(ref_status)
            out["status"] = {
                "checking": busy,
                "idle": idle,
                "p99_ratio": round(busy["p99_ms"] / idle["p99_ms"], 2),
                "check_progress_at_end": rig.status()["check"]["progress"],
            }
            assert rig.request("stop")["cancelled"] == exp["name"]
        if "estop" in parts:
            during, progress = [], []
            for _ in range(args.tries):
                _arm(rig)
                deadline = time.monotonic() + 30
                while rig.status()["check"] and rig.status()["check"]["state"] == "checking":
                    assert time.monotonic() < deadline, "the cancelled check did not end"
                    time.sleep(0.05)
                ms, reply = rig.timed("run", {"experiment": exp})
                assert reply.get("checking"), reply
                run_ms.append(ms)
                _computing(rig)
                time.sleep(rng.uniform(0.1, 0.6))
                st = rig.status()["check"]
                assert st["state"] == "checking", st
                progress.append(st["progress"])
                ms, reply = rig.timed("estop", {"reason": "bench"})
                assert reply["ok"] and reply["state"] == "ESTOP", reply
                during.append(ms)
            busy, idle = percentiles(during), percentiles(ref_estop)
            out["estop"] = {
                "checking": busy,
                "idle": idle,
                "p99_ratio": round(busy["p99_ms"] / idle["p99_ms"], 2),
                "check_progress_when_estopped": [min(progress), max(progress)],
            }
        samples = rig.status()["check"]["samples"]
        out["check"] = {"samples": samples, "run_reply_ms": percentiles(run_ms)}
        # The same experiment without parameters: the envelope proves it, nothing is sampled.
        rig.request("load_params", {"text": params.read_text(), "source": "again"})
    finally:
        rig.close()
    run_dir2 = tmp / "envelope"
    run_dir2.mkdir()
    rig = Rig(args, run_dir2)
    try:
        _arm(rig)
        ms, reply = rig.timed("run", {"experiment": multisine(86_400.0, 2)})
        out["check"]["without_params_run_reply_ms"] = round(ms, 2)
        out["check"]["without_params_checking"] = bool(reply.get("checking"))
        out["check"]["without_params_started"] = reply.get("state") == "RUNNING"
    finally:
        rig.close()
    return out


def _hog() -> None:
    while True:
        pass


def _subscribe(endpoint: str, stop: Any) -> None:
    import zmq

    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.linger = 0
    sub.subscribe(b"")
    sub.connect(endpoint)
    while not stop.is_set():
        if sub.poll(100):
            sub.recv_multipart()
    sub.close()
    ctx.term()


def _starve_once(args: argparse.Namespace, run_dir: Path, helper: bool) -> dict[str, Any]:
    from daq.commands import ServiceUnreachable

    extra = ["--record"] + ([] if helper else ["--python-heartbeat-only"])
    rig = Rig(args, run_dir, *extra)
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    sub = ctx.Process(target=_subscribe, args=(rig.telemetry, stop), daemon=True)
    sub.start()
    hogs: list[Any] = []
    out: dict[str, Any] = {"python_heartbeat_only": not helper}
    try:
        _arm(rig)
        st = rig.status()
        tid = st["threads"]["rig-telemetry"]
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        seq0, t0 = st["seq"], time.monotonic()
        hogs = [ctx.Process(target=_hog, daemon=True) for _ in range(args.hogs)]
        for h in hogs:
            h.start()
        time.sleep(args.starve_seconds)
        elapsed = time.monotonic() - t0
        out["cycles_expected"] = round(elapsed / 0.001)
        t_ask = time.monotonic()
        try:
            st = rig.status()
        except ServiceUnreachable:  # the loop stopped itself and rig-daq exited (exit 1)
            rig.proc.wait(30)
            lost = [ln for ln in (run_dir / "service.log").read_text().splitlines()
                    if "process lost" in ln]  # fmt: skip
            out.update(service_exit=rig.proc.returncode, process_lost=bool(lost),
                       fault_where=lost[0].split(": ", 1)[-1] if lost else None,
                       kept_running=False)  # fmt: skip
            if lost:
                fault_seq = int(lost[0].split("FAULT at seq ")[1].split(":")[0])
                out["stopped_after_cycles"] = fault_seq - seq0
            return out
        out["status_answer_ms_under_load"] = round((time.monotonic() - t_ask) * 1e3, 1)
        out["state_after"] = st["state"]
        fault = st["fault"] or {}
        out["fault_after"] = fault.get("name")
        out["fault_where"] = fault.get("where")
        out["loop_alive"] = st["loop_process"]["alive"]
        out["cycles_during"] = st["seq"] - seq0
        out["overruns"] = st["timing"]["overruns"]
        out["process_lost"] = fault.get("name") == "PROCESS_LOST"
        # Running = the loop process alive and cycling throughout, not stopped by a lost
        # heartbeat (a stall trip of the VM itself latches FAULT but the loop runs on).
        out["kept_running"] = out["loop_alive"] and not out["process_lost"]
        if helper and out["kept_running"]:
            # Hogs still running: kill the loop process and time who notices.
            pid = st["loop_process"]["pid"]
            killed = time.monotonic_ns()
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while True:
                st = rig.status()
                if (st["fault"] or {}).get("name") == "PROCESS_LOST":
                    break  # (a stall trip of the VM may have latched another fault before)
                if time.monotonic() > deadline:
                    break
            answered = time.monotonic_ns()
            h = st["loop_process"]["heartbeat_helper"] or {}
            noticed = h.get("loop_stalled_at_ns")
            out["loop_kill_noticed_by_helper_ms"] = (
                round((noticed - killed) * 1e-6, 1) if noticed else None
            )
            out["loop_kill_in_status_ms"] = round((answered - killed) * 1e-6, 1)
    finally:
        for h in hogs:
            h.kill()
        stop.set()
        sub.join(5)
        rig.close()
    return out


def part_starve(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {
        "hogs": args.hogs,
        "seconds": args.starve_seconds,
        "cpus": os.cpu_count(),
    }
    for helper in (True, False):
        run_dir = tmp / ("starve-helper" if helper else "starve-python-only")
        run_dir.mkdir()
        out["helper" if helper else "python_heartbeat_only"] = _starve_once(args, run_dir, helper)
    return out


def _last_row(run_dir: Path) -> dict[str, Any]:
    from daq.loop.interlocks import Trip
    from daq.loop.states import State
    from daq.recording import read_run

    (path,) = sorted(run_dir.glob("*.rigrun"))
    run = read_run(path)
    cmd = [i for i, c in enumerate(run.columns) if c.startswith("cmd.")]
    last = run.data[-1]
    gaps = int((run.seq[1:] - run.seq[:-1] != 1).sum()) if len(run.seq) > 1 else 0
    return {
        "rows": len(run.seq),
        "lost": run.lost,
        "gaps": gaps,
        "last_state": State(int(last[2])).name,
        "last_fault": Trip(int(last[3])).name,
        "last_cmd_null": bool((last[cmd] == 0.0).all()),
        "last_row_is_null_cycle": bool(
            last[2] == State.FAULT and last[3] == Trip.PROCESS_LOST and (last[cmd] == 0.0).all()
        ),
        "closed_by": (run.trailer or {}).get("closed_by", "service"),
    }


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except (OSError, IndexError):
        return True
    return state in "ZX"


def part_lastrow(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for victim in ("loop", "service"):
        run_dir = tmp / f"lastrow-{victim}"
        run_dir.mkdir()
        rig = Rig(args, run_dir, "--record")
        try:
            _arm(rig)
            time.sleep(2.0)  # rows on disk and rows in the recorder's buffer
            loop_pid = rig.status()["loop_process"]["pid"]
            if victim == "loop":
                os.kill(loop_pid, signal.SIGKILL)
                rig.proc.wait(60)  # rig-daq exits 1 after the loop's death
            else:
                rig.proc.kill()
                rig.proc.wait(60)
                deadline = time.monotonic() + 60
                while not _gone(loop_pid) and time.monotonic() < deadline:
                    time.sleep(0.01)
        finally:
            rig.close()
        out[f"{victim}_kill"] = {**_last_row(run_dir), "exit_code": rig.proc.returncode}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--parts", default=",".join(OWN_PARTS + OTHER_PARTS))
    p.add_argument("--tries", type=int, default=50)
    p.add_argument("--starve-seconds", type=float, default=45.0)
    p.add_argument("--hogs", type=int, default=4)
    p.add_argument("--profile", type=Path, default=ROOT / "hw_profiles" / "sim-2dof.toml")
    p.add_argument("--workdir", type=Path, default=None, help="keep run files and logs here")
    if flood_kill is not None and hasattr(flood_kill, "add_arguments"):
        flood_kill.add_arguments(p)
    args = p.parse_args()
    args.profile = args.profile.resolve()
    parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    unknown = parts - set(OWN_PARTS + OTHER_PARTS)
    if unknown:
        p.error(f"unknown parts {sorted(unknown)}; known: {', '.join(OWN_PARTS + OTHER_PARTS)}")
    result: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "load": os.getloadavg()}}
    with tempfile.TemporaryDirectory(prefix="safety-latency-") as d:
        tmp = Path(d) if args.workdir is None else args.workdir.resolve()
        tmp.mkdir(parents=True, exist_ok=True)
        for name, fn in (("estop/status", part_estop_status), ("starve", part_starve),
                         ("lastrow", part_lastrow)):  # fmt: skip
            if not parts & set(name.split("/")):
                continue
            try:  # one part failing must not lose the others' figures
                if name == "estop/status":
                    result.update(part_estop_status(args, tmp, parts))
                else:
                    result[name] = fn(args, tmp)  # type: ignore[call-arg]
            except Exception as exc:
                result[name] = {"error": f"{type(exc).__name__}: {exc}"}
        for name in OTHER_PARTS:
            if name not in parts:
                continue
            if flood_kill is None:
                result[name] = {"skipped": "bench/safety_flood_kill.py is not present"}
            elif hasattr(flood_kill, "run_part"):
                result[name] = flood_kill.run_part(name, args)
            else:  # its functions `flood(seconds)` and `kill9(n)`, with their defaults
                result[name] = getattr(flood_kill, name)()
    result["machine"]["load_after"] = os.getloadavg()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
