"""The service against a subscription flood, a stall and kill -9 (issue 25, items 2 and 5).

Each part starts `rig-daq` on the simulator (sim-2dof) as a subprocess and looks at it from
outside, as a client or the operating system sees it:

- `flood(seconds)`: one local client floods subscribe/unsubscribe (a libzmq XSUB with no send
  limit, reconnecting 100 ms after each close) for `seconds`; the service's RSS is sampled every
  0.25 s, then for 10 s after the flood. Also: the flooder's connections opened and closed by the
  service (its socket monitor), whether its last one was still open 5 s after the flood, the
  service's ESTABLISHED connections on the telemetry port afterwards (/proc/net/tcp), and the
  rows an honest subscriber lost meanwhile.
- `stall(seconds)`: the service process is stopped (SIGSTOP) for `seconds` while the loop process
  runs on (profile: service heartbeat timeout 10 s, so the loop does not stop), then continued;
  a subscriber that keeps up counts the rows missing from what it received.
- `kill9(n)`: `n` times, the recording service is killed with SIGKILL at a random time 1–6 s
  into the run; the loop's published-row counter is read from the shared ring just before the
  kill, and the rows missing from the run file are counted (`lost = published − rows on file`).

    python bench/safety_flood_kill.py [--flood-s 120] [--stall-s 3] [--kills 20] [--virtual-kills 5]

`bench/safety_latency.py` imports this file for its `flood` and `kill9` parts. The last line
printed is JSON.
"""

from __future__ import annotations

import argparse
import glob
import json
import mmap
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import zmq  # noqa: E402

from daq.commands.client import CommandClient  # noqa: E402
from daq.recording import read_run  # noqa: E402
from daq.recording.writer import FLUSH_ROWS, POLL_S  # noqa: E402
from daq.telemetry import TelemetrySubscriber  # noqa: E402
from rigctl.session import free_endpoint  # noqa: E402

PROFILE = ROOT / "hw_profiles" / "sim-2dof.toml"
START_TIMEOUT_S = 60.0


# --------------------------------------------------------------------------- the service


def _profile(tmp: Path, heartbeat_ms: int | None) -> Path:
    if heartbeat_ms is None:
        return PROFILE
    text = PROFILE.read_text()
    text = re.sub(
        r"(?m)^\[interlocks\]\n", f"[interlocks]\nservice_heartbeat_ms = {heartbeat_ms}\n", text
    )
    path = tmp / "profile.toml"
    path.write_text(text)
    return path


class Service:
    """`python -m daq.service` in real (or virtual) time, with its endpoints."""

    def __init__(
        self,
        tmp: Path,
        *,
        record: bool = False,
        virtual: bool = False,
        heartbeat_ms: int | None = None,
    ) -> None:
        self.tel, self.cmd = free_endpoint(), free_endpoint()
        self.run_dir = tmp / "runs"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "daq.service", "--profile", str(_profile(tmp, heartbeat_ms)),
                "--run-dir", str(self.run_dir), "--telemetry", self.tel, "--commands", self.cmd,
                "--no-mlock"]  # fmt: skip
        if record:
            args.append("--record")
        if virtual:
            args.append("--virtual-time")
        self.proc = subprocess.Popen(
            args, cwd=tmp, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.client = CommandClient(self.cmd, timeout=2.0)

    def status(self) -> dict[str, Any]:
        return self.client.request("status")

    def wait_running(self, rows: int = 100) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rig-daq exited with {self.proc.returncode}")
            try:
                s = self.status()
            except Exception:
                continue
            if s.get("ok") and int(s.get("seq", 0)) >= rows:
                return
            time.sleep(0.1)
        raise RuntimeError("rig-daq did not start")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def close(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        _unlink_segments(self.proc.pid)


def _unlink_segments(pid: int) -> None:
    """Shared-memory names a killed service could not remove."""
    for name in glob.glob(f"/dev/shm/hydrig-*-{pid}-*"):
        try:
            os.unlink(name)
        except OSError:
            pass


def _established(port: int) -> int:
    """ESTABLISHED TCP connections whose local port is `port` (IPv4, /proc/net/tcp)."""
    n = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        if int(local.split(":")[1], 16) == port and state == "01":
            n += 1
    return n


class _Watcher(threading.Thread):
    """A subscriber that keeps up: receives everything, counts rows and gaps."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(daemon=True)
        self.sub = TelemetrySubscriber(endpoint)
        self.stop = threading.Event()
        self.rows = 0
        self.largest_gap = 0

    def run(self) -> None:
        last_lost = 0
        while not self.stop.is_set():
            msg = self.sub.recv(0.2)
            if msg is None:
                continue
            self.rows += getattr(msg, "n", 0)
            if self.sub.lost_rows != last_lost:
                self.largest_gap = max(self.largest_gap, self.sub.lost_rows - last_lost)
                last_lost = self.sub.lost_rows

    def finish(self) -> dict[str, int]:
        self.stop.set()
        self.join(5.0)
        self.sub.close()
        return {"rows": self.rows, "lost_rows": self.sub.lost_rows, "largest_gap": self.largest_gap}


# --------------------------------------------------------------------------- flood


def _flooder(endpoint: str, seconds: float) -> dict[str, Any]:
    """Runs in a subprocess (`--flooder`): subscribe/unsubscribe of new topics as fast as libzmq
    takes them, for `seconds`; then waits up to 5 s for the service to close its connection."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.XSUB)
    sock.sndhwm = 0
    sock.linger = 0
    mon = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
    sock.connect(endpoint)
    out = {"sent": 0, "connections": 0, "closed_by_service": 0, "open_at_end": False}
    connected = False

    def events() -> None:
        nonlocal connected
        while mon.poll(0):
            ev = mon.recv_multipart()
            event = int.from_bytes(ev[0][:2], "little")
            if event == zmq.EVENT_CONNECTED:
                out["connections"] += 1
                connected = True
            elif event == zmq.EVENT_DISCONNECTED:
                out["closed_by_service"] += 1
                connected = False

    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        for i in range(n, n + 500):
            topic = b"flood-%d" % i
            sock.send(b"\x01" + topic)
            sock.send(b"\x00" + topic)
        n += 500
        out["sent"] += 1000
        events()
    sock.disconnect(endpoint)  # no reconnection from here on
    give_up = time.monotonic() + 5.0
    events()
    while connected and time.monotonic() < give_up:
        mon.poll(100)
        events()
    out["open_at_end"] = connected
    sock.disable_monitor()
    mon.close()
    sock.close()
    ctx.term()
    return out


def flood(seconds: float = 120.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        svc = Service(Path(tmp))
        try:
            svc.wait_running()
            watcher = _Watcher(svc.tel)
            watcher.start()
            time.sleep(2.0)
            base = svc.rss_mb()
            flooder = subprocess.Popen(
                [sys.executable, __file__, "--flooder", svc.tel, str(seconds)],
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            peak = base
            samples = []
            t0 = time.monotonic()
            while flooder.poll() is None:
                rss = svc.rss_mb()
                peak = max(peak, rss)
                samples.append((round(time.monotonic() - t0, 2), round(rss, 1)))
                time.sleep(0.25)
            out, _ = flooder.communicate()
            end = time.monotonic()
            after = []
            while time.monotonic() - end < 10.0:
                after.append(svc.rss_mb())
                time.sleep(0.25)
            telemetry = svc.status().get("telemetry", {})
            port = int(svc.tel.rsplit(":", 1)[1])
            established = _established(port)
            honest = watcher.finish()
            alive = svc.proc.poll() is None
        finally:
            svc.close()
    return {
        "seconds": seconds,
        "rss_base_mb": round(base, 1),
        "rss_peak_mb": round(peak, 1),
        "rss_growth_peak_mb": round(peak - base, 1),
        "rss_10s_after_mb": round(after[-1], 1),
        "rss_growth_10s_after_mb": round(after[-1] - base, 1),
        "flooder": json.loads(out.strip().splitlines()[-1]),
        "flooders_cut_off": telemetry.get("flooders_cut_off"),
        "flooders_closed": telemetry.get("flooders_closed"),
        # The honest subscriber's connection is the one expected; the flooder's are not.
        "established_on_telemetry_port_after": established - 1,
        "honest_subscriber": honest,
        "service_alive": alive,
        "rss_samples_every_s": samples[:: max(1, len(samples) // 24)],
    }


# --------------------------------------------------------------------------- stall


def stall(seconds: float = 3.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        # A heartbeat timeout above the stall: the loop runs on while the service is stopped.
        svc = Service(Path(tmp), heartbeat_ms=10_000)
        try:
            svc.wait_running()
            watcher = _Watcher(svc.tel)
            watcher.start()
            time.sleep(2.0)
            before = watcher.sub.lost_rows
            os.kill(svc.proc.pid, signal.SIGSTOP)
            time.sleep(seconds)
            os.kill(svc.proc.pid, signal.SIGCONT)
            time.sleep(3.0)
            telemetry = svc.status().get("telemetry", {})
            seen = watcher.finish()
        finally:
            try:
                os.kill(svc.proc.pid, signal.SIGCONT)
            except OSError:
                pass
            svc.close()
    return {
        "stall_s": seconds,
        "subscriber": seen,
        "lost_before_stall": before,
        "publisher_dropped_batches": telemetry.get("dropped_batches"),
        "publisher_lost_rows": telemetry.get("lost_rows"),
    }


# --------------------------------------------------------------------------- kill -9


def _published(pid: int) -> int:
    """The loop's published-row counter: the first 8 bytes of the service's ring segment."""
    (name,) = glob.glob(f"/dev/shm/hydrig-ring-{pid}-*")
    with open(name, "rb") as f, mmap.mmap(f.fileno(), 8, access=mmap.ACCESS_READ) as m:
        return int.from_bytes(m[:8], "little", signed=True)


def _one_kill(rng: random.Random, virtual: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        svc = Service(Path(tmp), record=True, virtual=virtual)
        try:
            svc.wait_running()
            time.sleep(rng.uniform(1.0, 6.0))
            published = _published(svc.proc.pid)
            os.kill(svc.proc.pid, signal.SIGKILL)
            svc.proc.wait(30)
            (path,) = svc.run_dir.glob("*.rigrun")
            # The loop process, which outlives its service, finishes the file (the null cycle,
            # the trailer; daq.recording.salvage): read it once it has, or after 10 s.
            deadline = time.monotonic() + 10.0
            run = read_run(path)
            while run.trailer is None and time.monotonic() < deadline:
                time.sleep(0.1)
                run = read_run(path)
        finally:
            svc.close()
    on_file = int(run.seq[-1]) + 1 if len(run.seq) else int(run.meta["first_seq"])
    gaps = int((len(run.seq) and (run.seq[-1] - run.seq[0] + 1 - len(run.seq))) or 0)
    return {
        "published": published,
        "rows_on_file": len(run.seq),
        "lost": max(0, published - on_file),
        "gaps_in_file": gaps,
        "corrupt_chunks": len(run.corrupt_chunks),
        "closed_by": (run.trailer or {}).get("closed_by"),
    }


def kill9(n: int = 20, *, virtual: bool = False, seed: int = 25) -> dict[str, Any]:
    rng = random.Random(seed)
    kills = [_one_kill(rng, virtual) for _ in range(n)]
    lost = [k["lost"] for k in kills]
    return {
        "kills": n,
        "virtual_time": virtual,
        "lost_max": max(lost),
        "lost_mean": round(sum(lost) / n, 1),
        "lost": lost,
        "files_with_gaps_or_damage": sum(
            1 for k in kills if k["gaps_in_file"] or k["corrupt_chunks"]
        ),
        # docs/recording.md: < FLUSH_ROWS buffered + the rows since the writer's last pass.
        "documented_bound_rows": (
            f"{FLUSH_ROWS - 1} + rows published in the last {POLL_S * 1e3:.0f} ms pass"
        ),
    }


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flood-s", type=float, default=120.0)
    ap.add_argument("--stall-s", type=float, default=3.0)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--virtual-kills", type=int, default=5)
    ap.add_argument("--flooder", nargs=2, metavar=("ENDPOINT", "SECONDS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.flooder:
        print(json.dumps(_flooder(args.flooder[0], float(args.flooder[1]))), flush=True)
        return
    result: dict[str, Any] = {"machine_load_1min": os.getloadavg()[0]}
    result["stall"] = stall(args.stall_s)
    print("stall", json.dumps(result["stall"]), file=sys.stderr, flush=True)
    result["kill9"] = kill9(args.kills)
    print("kill9", json.dumps(result["kill9"]), file=sys.stderr, flush=True)
    if args.virtual_kills:
        result["kill9_virtual"] = kill9(args.virtual_kills, virtual=True)
        print("kill9_virtual", json.dumps(result["kill9_virtual"]), file=sys.stderr, flush=True)
    result["flood"] = flood(args.flood_s)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
