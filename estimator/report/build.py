"""`build_report`: a recorded run in, an HTML identification report with PNG figures out.

    result = build_report(Path("runs/id.rigrun"), Path("runs/val.rigrun"), None)
    print(result.html)

Steps: read the run(s) → batch IDIM-WLS → online RLS replay (convergence) → model validation
with the batch, the online and (simulator) the true parameters → figures → HTML.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daq.profile.plant import sim_plant
from daq.profile.schema import Profile
from estimator.batch import BatchResult
from estimator.report import figures, html
from estimator.report.analysis import (
    OUTPUT_INFO,
    ReportData,
    batch_identify,
    fit_table,
    identified_params,
    online_replay,
    parameter_table,
    run_closed_loop_validation,
    run_validation,
)
from estimator.report.runs import ReportError, load_run
from estimator.structure import Structure, batch_structure

log = logging.getLogger(__name__)

#: Rig time between convergence samples (s): the brief's ~0.5 s, finer on short runs.
MAX_SAMPLE_DT = 0.5
MIN_SAMPLE_DT = 0.05


@dataclass
class ReportResult:
    html: Path
    figures: dict[str, Path]
    parameter_table: list[dict[str, Any]]
    fit_table: list[dict[str, Any]]
    cross_validation: bool
    notes: list[str] = field(default_factory=list)
    #: The online replay's final estimate (what the report's online column shows).
    online: Any = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe summary (non-finite numbers become null)."""

        def clean(v: Any) -> Any:
            if isinstance(v, float) and not math.isfinite(v):
                return None
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, list):
                return [clean(x) for x in v]
            return str(v) if isinstance(v, Path) else v

        return clean(
            {
                "html": self.html,
                "figures": dict(self.figures),
                "parameters": self.parameter_table,
                "fit": self.fit_table,
                "cross_validation": self.cross_validation,
                "notes": self.notes,
            }
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, ensure_ascii=False)


class _Progress:
    """A rich progress bar on a TTY; silent otherwise (pipes, tests, `progress=False`)."""

    def __init__(self, enabled: bool, total: float) -> None:
        self.bar: Any = None
        self.task: Any = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            # On stderr: stdout carries the result (the HTML path or the JSON summary).
            self.bar = Progress(
                TextColumn("{task.description:<34}"),
                BarColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.task = self.bar.add_task("report", total=total)

    def step(self, what: str, advance: float = 0.0) -> None:
        if self.bar is not None:
            self.bar.update(self.task, description=what, advance=advance)

    @contextmanager
    def running(self) -> Iterator[_Progress]:
        if self.bar is None:
            yield self
            return
        with self.bar:
            yield self


def build_report(
    run: Path,
    validate: Path | None = None,
    out: Path | None = None,
    *,
    profile: Profile | str | Path | None = None,
    progress: bool = True,
    batch: BatchResult | None = None,
    online_structure: Structure | None = None,
) -> ReportResult:
    """Write `report.html` and its PNGs into `out` (default: `<run stem>-report/` beside the
    run) and return what was written. `profile` overrides the profile stored in the run(s).
    `batch`: the batch identification of `run` if the caller has it (not computed again);
    `online_structure`: the structure the online replay runs (estimator.structure; None: the
    one this batch chose, as `rigctl identify` hands it over, else the profile's).
    Raises `ReportError` (bad input, matplotlib missing) naming what is wrong."""
    figures.require_matplotlib()  # before minutes of computing
    run = Path(run)
    out = Path(out) if out is not None else run.with_name(run.stem + "-report")
    # Weights: read 1, batch 2, online replay 6, validation 3×1, figures 1 each, HTML 1.
    prog = _Progress(progress, 1 + 2 + 6 + 3 + 9 + 1)
    with prog.running():
        prog.step("reading the run(s)")
        ident = load_run(run, profile)
        valid = load_run(validate, profile, what="validation run") if validate else ident
        if validate is not None and valid.profile.rig.id != ident.profile.rig.id:
            raise ReportError(
                f"the validation run is from rig '{valid.profile.rig.id}', the identification "
                f"run from '{ident.profile.rig.id}'"
            )
        notes = ident.notes + (valid.notes if validate is not None else [])
        prog.step("batch identification (IDIM-WLS)", 1)
        if batch is None:
            batch = batch_identify(ident)
        notes.append(f"{ident.path.name}: {batch.data.summary(ident.period)}")
        notes += batch.notes
        notes += [f"warning: {w}" for w in batch.warnings]
        prog.step("online RLS replay", 2)
        dt = min(MAX_SAMPLE_DT, max(MIN_SAMPLE_DT, ident.duration / 100.0))
        last = [0.0]

        def on_chunk(done: int, total: int) -> None:
            frac = 6.0 * done / total
            prog.step("online RLS replay", frac - last[0])
            last[0] = frac

        if online_structure is None:
            chosen = batch_structure(batch.fits, f"the batch of {ident.path.name}")
            online_structure = None if chosen.empty() else chosen
        online, conv = online_replay(ident, dt, on_chunk, structure=online_structure)
        notes.append(f"online replay's structure: {online.structure}")
        notes += [f"warning: online: {w}" for w in online.warnings]
        truth = batch.truth if ident.is_simulated else None
        data = ReportData(ident, valid, validate is not None, batch, online, conv, truth, {}, notes)
        sets: dict[str, Any] = {}
        band = next((f.shape_value for f in batch.fits if f.shape_value is not None), None)
        for label, names, theta, shape in (
            ("batch", batch.names, batch.theta, band),
            ("online", online.names, online.theta, None),
        ):
            plant_names = [batch.plant_names.get(n, n) for n in names]
            params, why = identified_params(ident.params, plant_names, theta, shape, valid.oil_c)
            if params is None:
                notes.append(f"{label} parameters: {why}")
            else:
                sets[label] = params
        if ident.is_simulated and "batch" in sets:
            # The simulator's plant, a check of the validation path: the reference models'
            # parameters where they are the family identified, else its whole plant (every
            # effect on) — the real-rig family describes the effects too.
            sets["truth"] = (valid.params, None) if truth is not None else sim_plant(valid.profile)
        for label, params in sets.items():
            prog.step(f"validation ({label} θ)")
            r = run_validation(valid, params, label, notes)
            if r is not None:
                data.validation[label] = r
            truth_plant = label == "truth"
            if truth_plant:  # closed loop: the simulator's whole plant and sensors, every effect on
                params = sim_plant(valid.profile)
            cl = run_closed_loop_validation(valid, params, label, notes, truth_plant)
            if cl is not None:
                data.closed_loop[label] = cl
            prog.step(f"validation ({label} θ)", 1)
        if "batch" not in data.validation:
            data.validation.clear()  # every figure and table is anchored on the batch estimate
        out.mkdir(parents=True, exist_ok=True)
        prog.step("figures")
        figs = figures.draw_all(data, out, lambda: prog.step("figures", 1))
        params_rows = parameter_table(data)
        fits = fit_table(data) if data.validation else []
        prog.step("HTML")
        page = out / "report.html"
        page.write_text(html.render(data, figs, params_rows, fits), encoding="utf-8")
        prog.step("done", 1)
    log.info("report written: %s", page)
    return ReportResult(page, figs, params_rows, fits, validate is not None, notes, online)


__all__ = ["OUTPUT_INFO", "ReportError", "ReportResult", "build_report"]
