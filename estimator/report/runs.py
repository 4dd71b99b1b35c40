"""Recorded runs as the report needs them: the profile they were made with, the segment to
analyse, and the measured signals per joint.

The segment: identification and validation assume the physics held and the data is continuous.
Rows lost by the recorder (a jump in `Run.seq`) break every derivative, and rows outside RUNNING
(idle, faulted: valves nulled, arm possibly on an end stop) are not the experiment. So the
analysed segment is the longest block of consecutive rows that are all RUNNING — or, if the run
has no RUNNING row at all (a run recorded straight from a backend), the longest block of
consecutive rows.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from controller.plant.params import PlantParams
from daq.profile import ProfileError, load_profile, parse_profile, plant_params
from daq.profile.schema import Profile
from daq.recording import Run, RunFileError, read_run
from estimator.datause import STATE_RUNNING
from estimator.validation import Measured

#: Shortest segment worth identifying on (s).
MIN_SEGMENT_S = 2.0


class ReportError(Exception):
    """The report cannot be made: bad input (names what is wrong) or a missing extra."""


@dataclass
class RunData:
    path: Path
    run: Run
    profile: Profile
    profile_source: str
    params: PlantParams
    segment: slice
    notes: list[str] = field(default_factory=list)

    @property
    def period(self) -> float:
        return self.profile.period

    @property
    def rows(self) -> np.ndarray:
        """The analysed rows (M, width)."""
        return self.run.data[self.segment]

    @property
    def columns(self) -> dict[str, np.ndarray]:
        """Column name → analysed values (views, no copy)."""
        rows = self.rows
        return {n: rows[:, i] for i, n in enumerate(self.run.columns)}

    @property
    def calibration(self) -> dict[str, Any] | None:
        """The transducer calibration the run's header says was in force (None without)."""
        cal = self.run.meta.get("calibration")
        return cal if isinstance(cal, dict) else None

    @property
    def oil_c(self) -> float | None:
        """Mean measured oil temperature (°C) of the analysed rows where an oil law uses it
        (`[plant.oil]` and a temperature channel), else None."""
        return self.mean_oil_c()

    def mean_oil_c(self, rows: int | None = None) -> float | None:
        """`oil_c` over the analysed segment's first `rows` rows (None: all of them)."""
        ch = self.profile.oil_temperature
        if self.params.oil is None or ch is None:
            return None
        t = np.asarray(self.columns.get(f"eng.{ch.name}", [])[:rows], dtype=float)
        t = t[np.isfinite(t)]
        return float(np.mean(t)) if t.size else None

    @property
    def is_simulated(self) -> bool:
        return self.profile.backend.kind == "sim"

    @property
    def duration(self) -> float:
        return (self.segment.stop - self.segment.start) * self.period


def resolve_profile(run: Run, profile: Profile | str | Path | None) -> tuple[Profile, str]:
    """The profile given, else the one stored in the run file; (profile, where it came from)."""
    if isinstance(profile, Profile):
        return profile, "given"
    if profile is not None:
        try:
            return load_profile(profile), str(profile)
        except ProfileError as exc:
            raise ReportError(str(exc)) from None
    text = run.meta.get("profile")
    if not isinstance(text, str) or not text.strip():
        raise ReportError(
            f"{run.path.name} holds no profile text (recorded without one); pass the rig's "
            "profile with --profile"
        )
    try:
        return parse_profile(tomllib.loads(text), f"{run.path.name}:profile"), "stored in the run"
    except tomllib.TOMLDecodeError as exc:
        raise ReportError(f"{run.path.name}: the stored profile is not valid TOML: {exc}") from None
    except ProfileError as exc:
        raise ReportError(str(exc)) from None


def longest_block(ok: np.ndarray, seq: np.ndarray) -> slice:
    """Longest [i, j) with ok[i:j] all true and seq consecutive within it; empty if none."""
    ok = np.asarray(ok, dtype=bool)
    n = len(ok)
    if n == 0 or not ok.any():
        return slice(0, 0)
    # cont[k]: row k continues the block of row k-1.
    cont = np.zeros(n, dtype=bool)
    cont[1:] = ok[1:] & ok[:-1] & (np.diff(seq) == 1)
    starts = np.flatnonzero(ok & ~cont)
    last = np.ones(n, dtype=bool)
    last[:-1] = ~cont[1:]
    ends = np.flatnonzero(ok & last) + 1
    i = int(np.argmax(ends - starts))
    return slice(int(starts[i]), int(ends[i]))


@dataclass
class OpenedRun:
    """A run file read, its profile and the segment to analyse (before any plant's checks)."""

    path: Path
    run: Run
    profile: Profile
    profile_source: str
    segment: slice
    notes: list[str]


def load_run(
    path: str | Path, profile: Profile | str | Path | None = None, *, what: str = "run"
) -> RunData:
    """Read a run file and pick its profile and analysed segment; `ReportError` on bad input."""
    return run_data(open_run(path, profile, what=what))


def run_data(o: OpenedRun) -> RunData:
    """An opened run as the planar rigs' identification reads it (a `[plant]` profile)."""
    prof = o.profile
    if prof.plant is None:
        hint = (
            " (a [chain] machine: `rigctl identify` fits its base parameters instead, "
            "estimator.chain_batch)"
            if prof.chain is not None
            else ""
        )
        raise ReportError(
            f"profile '{prof.rig.id}' ({o.profile_source}) has no [plant] section: "
            f"identification needs the known geometry (areas, pins, volumes, stroke, supply "
            f"pressure){hint}"
        )
    return RunData(o.path, o.run, prof, o.profile_source, plant_params(prof), o.segment, o.notes)


def open_run(
    path: str | Path, profile: Profile | str | Path | None = None, *, what: str = "run"
) -> OpenedRun:
    """Read a run file, resolve its profile and pick the analysed segment: the longest
    continuous RUNNING block (else the longest continuous one), at least `MIN_SEGMENT_S`."""
    path = Path(path)
    if not path.is_file():
        raise ReportError(f"no such {what} file: {path}")
    try:
        run = read_run(path)
    except RunFileError as exc:
        raise ReportError(str(exc)) from None
    prof, source = resolve_profile(run, profile)
    notes: list[str] = []
    if not run.complete:
        notes.append(
            f"{path.name} is incomplete (rows lost {run.lost}, cut short {run.truncated}, "
            f"damaged records {len(run.corrupt_chunks)})"
        )
    if "state" not in run.columns:
        raise ReportError(f"{path.name} has no 'state' column: not a sample-layout recording")
    state = run.column("state")
    running = state == STATE_RUNNING
    if running.any():
        seg = longest_block(running, run.seq)
        if seg.stop - seg.start < len(state):
            notes.append(
                f"{path.name}: analysed rows {seg.start}–{seg.stop - 1} of {len(state)}, the "
                "longest continuous RUNNING block"
            )
    else:
        seg = longest_block(np.ones(len(state), dtype=bool), run.seq)
        notes.append(f"{path.name}: no RUNNING rows; analysed the longest continuous block")
    period = prof.period
    if (seg.stop - seg.start) * period < MIN_SEGMENT_S:
        raise ReportError(
            f"{path.name}: the analysable segment is {(seg.stop - seg.start) * period:.2f} s "
            f"long; at least {MIN_SEGMENT_S:.0f} s of continuous running data are needed"
        )
    return OpenedRun(path, run, prof, source, seg, notes)


def measured(rd: RunData) -> Measured:
    """The run's measured signals per joint for `estimator.validation.validate`."""
    cols = rd.columns
    prof = rd.profile

    def block(role: str, required: bool) -> np.ndarray | None:
        out = []
        for j in prof.joints:
            ch = prof.joint_channel(j.name, role)  # type: ignore[arg-type]
            if ch is None or f"eng.{ch.name}" not in cols:
                if required:
                    raise ReportError(
                        f"{rd.path.name}: validation needs a '{role}' channel on joint {j.name}"
                    )
                return None
            out.append(cols[f"eng.{ch.name}"])
        return np.stack(out, axis=1)

    t = cols["t"] - cols["t"][0]
    q, pc, pr, u = (block(r, True) for r in ("resolver", "pressure_cap", "pressure_rod", "lvdt"))
    assert q is not None and pc is not None and pr is not None and u is not None
    return Measured(t, q, pc, pr, u, block("potentiometer", False))


def recorded_experiment(rd: RunData) -> dict[str, Any] | None:
    """The `experiment` event (what the service ran: the experiment as sent, the gains it ran
    over) of the analysed segment: the one recorded nearest its first row, None if none was."""
    start = int(rd.run.seq[rd.segment.start]) if len(rd.run.seq) else 0
    found = [e for e in rd.run.events if e.get("kind") == "experiment" and "experiment" in e]
    if not found:
        return None
    return min(found, key=lambda e: abs(int(e.get("seq", 0)) - start))
