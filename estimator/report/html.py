"""The report page: one self-contained HTML file (inline CSS, no script, no external resource)
whose <img> tags point at the PNGs beside it by relative name, so the directory can be copied
or zipped as a whole."""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from estimator.report.analysis import OUTPUT_INFO, ReportData

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .8em 0; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: right; }
th { background: #f0f0f0; } td.l, th.l { text-align: left; }
.note { background: #fff7d6; border-left: 4px solid #e0b000; padding: .4em .8em; margin: .4em 0; }
.warn { background: #fde2e2; border-left: 4px solid #c00; padding: .4em .8em; margin: .4em 0; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: .85em; color: #555; }
"""


def fmt(v: Any, spec: str = ".4g") -> str:
    if v is None:
        return "—"
    if isinstance(v, float | np.floating) and not math.isfinite(float(v)):
        return "∞" if v == math.inf else "—"
    return format(v, spec)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    """Cells are already-escaped HTML; the first `left` columns are left-aligned."""
    head = "".join(
        f'<th class="l">{h}</th>' if i < left else f"<th>{h}</th>" for i, h in enumerate(headers)
    )
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="l">{c}</td>' if i < left else f"<td>{c}</td>" for i, c in enumerate(r)
        )
        + "</tr>"
        for r in rows
    )
    head = f"<tr>{head}</tr>" if any(headers) else ""  # key/value tables: no header
    return f"<table>{head}{body}</table>"


def figure(path: Path, caption: str) -> str:
    return (
        f'<figure><img src="{escape(path.name)}" alt="{escape(caption)}">'
        f"<figcaption>{escape(caption)}</figcaption></figure>"
    )


def param_section(rows: list[dict[str, Any]], truth: bool) -> str:
    headers = ["parameter", "unit", "batch WLS", "%σ", "online RLS", "%σ"]
    if truth:
        headers += ["truth (simulator)", "batch error %", "online error %"]
    cells = []
    for r in rows:
        # Not identifiable from this run: the profile's value, never shown as measured.
        measured = r.get("identifiable", True)
        c = [
            escape(r["name"]),
            escape(r["unit"]),
            fmt(r["batch"]),
            fmt(r["batch_sigma_pct"], ".2f") if measured else "prior",
            fmt(r["online"]),
            fmt(r["online_sigma_pct"], ".2f") if measured else "prior",
        ]
        if truth:
            c += [
                fmt(r["truth"]),
                fmt(r["batch_err_pct"], "+.2f"),
                fmt(r["online_err_pct"], "+.2f"),
            ]
        cells.append(c)
    return table(headers, cells, left=2)


def fit_section(rows: list[dict[str, Any]], sets: list[str]) -> str:
    names = {
        "batch": "batch-identified θ",
        "online": "online θ",
        "truth": "true θ (simulator)",
        "truth_noise_free": "true θ, without the run's noise",
    }
    # The true plant's closed-loop row without the run's own sensor noise: what a perfect
    # model scores against that noise (estimator.report.analysis.run_closed_loop_validation).
    cols = sets + [f"{s}_noise_free" for s in sets if any(f"{s}_noise_free" in r for r in rows)]
    headers = ["output", "measure"] + [escape(names.get(s, s)) for s in cols]
    cells = []
    for r in rows:
        lab = r["output"].rstrip("0123456789")
        title = OUTPUT_INFO[lab][0] + " " + r["output"][len(lab) :] if lab in OUTPUT_INFO else ""
        out = escape(r["output"]) + (f" <small>({escape(title)})</small>" if title else "")
        spec = ".1f" if r["kind"].startswith("FIT") else ".3g"
        cells.append([out, escape(r["kind"])] + [fmt(r.get(s), spec) for s in cols])
    return table(headers, cells, left=2)


def events_section(data: ReportData) -> str:
    run = data.ident.run
    t0 = run.data[0, run.columns.index("t")] if len(run.data) else 0.0
    seq_to_t = (
        dict(zip(run.seq.tolist(), (run.column("t") - t0).tolist(), strict=True))
        if len(run.data) < 5_000_000
        else {}
    )
    rows = []
    for e in run.events:
        seq = e.get("seq")
        t = seq_to_t.get(seq) if isinstance(seq, int) else None
        rest = {k: v for k, v in e.items() if k not in ("kind", "seq", "wall")}
        detail = ", ".join(f"{k}={v}" for k, v in rest.items())
        rows.append(
            [
                escape(str(e.get("kind", "?"))),
                fmt(seq, "d") if isinstance(seq, int) else "—",
                fmt(t, ".3f"),
                escape(detail),
            ]
        )
    out = (
        table(["event", "seq", "t (s)", "details"], rows, left=1)
        if rows
        else "<p>No events recorded in this run.</p>"
    )
    # The fault column is the loop's own record: list each new trip code it shows.
    if "fault" in run.columns and len(run.data):
        f = run.column("fault")
        idx = np.flatnonzero((f != 0) & (np.concatenate([[0.0], f[:-1]]) != f))
        if len(idx):
            trips = [
                [
                    fmt(int(run.seq[i]), "d"),
                    fmt(float(run.column("t")[i] - t0), ".3f"),
                    escape(_trip_name(int(f[i]))),
                ]
                for i in idx[:200]
            ]
            out += "<p>Fault trips in the rows' <code>fault</code> column:</p>"
            out += table(["seq", "t (s)", "trip"], trips, left=0)
        else:
            out += "<p>No fault tripped during the run (the <code>fault</code> column is 0).</p>"
    return out


def _trip_name(code: int) -> str:
    try:
        from daq.loop.interlocks import Trip  # type: ignore[import-not-found, unused-ignore]

        return f"{Trip(code).name} ({code})"
    except (ImportError, ValueError):
        return f"trip code {code}"


def timing_stats(data: ReportData) -> str:
    run = data.ident.run
    rows = []
    for col in ("wake_latency", "compute_time"):
        if col not in run.columns or not len(run.data):
            continue
        x = run.column(col) * 1e6
        rows.append(
            [
                escape(col),
                fmt(float(np.mean(x)), ".1f"),
                fmt(float(np.percentile(x, 99)), ".1f"),
                fmt(float(np.max(x)), ".1f"),
            ]
        )
    return table(["column", "mean µs", "p99 µs", "max µs"], rows)


def render(
    data: ReportData,
    figs: dict[str, Path],
    params: list[dict[str, Any]],
    fits: list[dict[str, Any]],
) -> str:
    rd, vd = data.ident, data.valid
    p: list[str] = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Identification "
        f"report: {escape(rd.path.name)}</title><style>{CSS}</style></head><body>"
    ]
    p.append(f"<h1>Identification report: {escape(rd.path.name)}</h1>")
    info = [
        ["rig", escape(rd.profile.rig.id)],
        ["backend", escape(rd.profile.backend.kind)],
        ["profile", escape(rd.profile_source)],
        ["identification run", escape(rd.path.name)],
        [
            "rows in run / analysed",
            f"{len(rd.run.data)} / {rd.segment.stop - rd.segment.start} ({rd.duration:.2f} s)",
        ],
        ["run complete", "yes" if rd.run.complete else "<b>no</b>"],
        [
            "validation run",
            escape(vd.path.name) + ("" if data.cross_validation else " (the same run)"),
        ],
        ["generated", _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")],
    ]
    p.append(table(["", ""], info, left=2))
    for n in data.notes:
        p.append(f'<div class="note">{escape(n)}</div>')

    p.append("<h2>Identified parameters</h2>")
    p.append(
        "<p>Batch: IDIM weighted least squares over the analysed segment. Online: the RLS "
        "after replaying the segment. %σ = 100·σ/|θ| (Gautier eq. 19)."
        + (" Truth: the simulator's plant parameters." if data.truth is not None else "")
        + "</p>"
    )
    p.append(param_section(params, data.truth is not None))
    if "convergence" in figs:
        p.append(
            figure(
                figs["convergence"],
                "Online RLS convergence of every parameter with its "
                "±2σ band; dashed: batch WLS estimate",
            )
        )

    p.append("<h2>Model validation</h2>")
    if not data.cross_validation:
        p.append(
            '<div class="warn">Validated on the identification run itself: this is '
            "<b>not cross-validation</b>. Pass a different run with --validate.</div>"
        )
    if data.validation:
        p.append(
            f"<p>The identified model is simulated from the measured initial state of "
            f"{escape(vd.path.name)}, driven by the measured spool positions; FIT = "
            "100 (1 − ‖y − ŷ‖ / ‖y − mean y‖).</p>"
        )
        if data.closed_loop:
            p.append(
                "<p>FIT % closed loop: each model simulated with the run's own controller, "
                "gains and reference from the measured initial state (DIDIM). On the "
                "simulator the true plant's row replays the run's own sensor noise through "
                "its true transducers: it checks the validation path itself (a perfect "
                "path scores 100 %). Its row without that noise is what a perfect model "
                "can score against the run's noise, the floor the identified models are "
                "judged against.</p>"
            )
        p.append(fit_section(fits, list(data.validation)))
        for lab in OUTPUT_INFO:
            if f"validation_{lab}" in figs:
                p.append(
                    figure(figs[f"validation_{lab}"], f"Measured vs model: {OUTPUT_INFO[lab][0]}")
                )
        if "torque" in figs:
            p.append(
                figure(
                    figs["torque"],
                    "Joint torques: from the measured pressures vs the inverse model",
                )
            )
        if "residuals" in figs:
            p.append(figure(figs["residuals"], "Residual histograms (measured − model)"))
    else:
        p.append("<p>No model validation (see the notes above).</p>")

    p.append("<h2>Identifiability</h2>")
    cond = [
        [
            escape(f.name),
            fmt(f.condition, ".4g"),
            str(f.rows),
            escape("; ".join(f.unidentifiable) or "none"),
        ]
        for f in data.batch.fits
    ]
    p.append(
        table(["model", "condition number", "equations", "unidentifiable directions"], cond, left=1)
    )
    sv = [
        [escape(f.name), escape(" ".join(fmt(float(s), ".3g") for s in f.singular_values))]
        for f in data.batch.fits
    ]
    p.append(table(["model", "singular values (normalised units)"], sv, left=2))
    if "singular_values" in figs:
        p.append(figure(figs["singular_values"], "Singular values of the observation matrices"))

    p.append("<h2>Loop timing and events</h2>")
    p.append(timing_stats(data))
    if "timing" in figs:
        p.append(figure(figs["timing"], "Loop timing histograms of the identification run"))
    p.append(events_section(data))
    p.append("</body></html>\n")
    return "\n".join(p)
