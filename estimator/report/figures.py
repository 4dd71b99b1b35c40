"""The report's PNG figures (matplotlib, Agg canvas: no display, no global pyplot state).

matplotlib is the optional extra `report`; `require_matplotlib()` fails with the install hint.
Each `fig_*` function writes one PNG into `out` and returns its path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from estimator.report.analysis import OUTPUT_INFO, ReportData
from estimator.report.runs import ReportError

DPI = 100
MEASURED = "#1f77b4"
MODEL = "#d62728"
ONLINE = "#2ca02c"


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    except ImportError:
        raise ReportError(
            "the report needs matplotlib (the optional extra 'report'): "
            "pip install 'hydrig[report]'  (or: pip install matplotlib)"
        ) from None


def _figure(w: float, h: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=DPI, layout="tight")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, format="png", dpi=DPI)
    return path


#: Time-series figures show at most this much of the run (s) at full resolution: thinning a
#: long run to fit 1000 px would alias the hydraulic oscillations into nonsense.
WINDOW_S = 20.0


def _window(t: np.ndarray) -> tuple[slice, str]:
    """The displayed part of a time series and a caption suffix saying so if it is partial."""
    n = int(np.searchsorted(t, t[0] + WINDOW_S)) if len(t) else 0
    if n >= len(t):
        return slice(None), ""
    return slice(0, n), f"  [first {WINDOW_S:.0f} s of {t[-1] - t[0]:.0f} s shown]"


def _grid(n: int, max_cols: int = 4) -> tuple[int, int]:
    cols = min(n, max_cols)
    return math.ceil(n / cols), cols


def fig_convergence(data: ReportData, out: Path) -> Path:
    """θ(t) of the online RLS over the run, with its ±2σ band, one panel per parameter,
    normalised by the truth (simulator) or by the final online estimate; the batch (WLS)
    estimate is the dashed line."""
    c = data.convergence
    n = len(c.names)
    nr, nc = _grid(n)
    fig = _figure(3.2 * nc, 2.3 * nr)
    axes = fig.subplots(nr, nc, squeeze=False, sharex=True)
    ref_kind = "truth" if data.truth is not None else "final online estimate"
    for i, name in enumerate(c.names):
        ax = axes[i // nc][i % nc]
        ref = c.theta[-1, i]
        if data.truth is not None and name in data.batch.names:
            ref = data.truth[data.batch.names.index(name)]
        ref = ref if ref != 0 and np.isfinite(ref) else 1.0
        y = c.theta[:, i] / ref
        band = 2.0 * c.sigma[:, i] / abs(ref)
        ax.fill_between(c.t, y - band, y + band, color=ONLINE, alpha=0.25, lw=0)
        ax.plot(c.t, y, color=ONLINE, lw=1.2, label="online RLS")
        ax.axhline(1.0, color="k", lw=0.8, ls=":")
        marks = [1.0]
        if name in data.batch.names:
            b = data.batch.theta[data.batch.names.index(name)] / ref
            ax.axhline(b, color=MODEL, lw=1.0, ls="--", label="batch WLS")
            marks.append(b)
        # Early on the diffuse start gives huge σ: scale the axis on the settled second half
        # (and keep the reference and batch lines in view).
        half = slice(len(y) // 2, None)
        settled = np.concatenate([(y - band)[half], (y + band)[half], marks])
        settled = settled[np.isfinite(settled)]
        lo, hi = (settled.min(), settled.max()) if len(settled) else (0.9, 1.1)
        span = max(hi - lo, 0.02)
        ax.set_ylim(max(lo - 0.3 * span, -2.0), min(hi + 0.3 * span, 4.0))
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
    for j in range(n, nr * nc):
        axes[j // nc][j % nc].set_visible(False)
    axes[0][0].legend(fontsize=7, loc="best")
    fig.supxlabel("rig time (s)", fontsize=9)
    fig.supylabel(f"θ / {ref_kind}  (band ±2σ)", fontsize=9)
    return _save(fig, out / "convergence.png")


def fig_output(data: ReportData, label: str, out: Path) -> Path:
    """Measured vs simulated model output per joint (Sakai Figs. 6–10 form)."""
    title, unit, scale = OUTPUT_INFO[label]
    primary = data.validation["batch"]
    nj = primary.measured[label].shape[1]
    fig = _figure(10.0, 2.6 * nj)
    axes = fig.subplots(nj, 1, squeeze=False, sharex=True)
    k, shown = _window(primary.t)
    for i in range(nj):
        ax = axes[i][0]
        ax.plot(
            primary.t[k],
            primary.measured[label][k, i] * scale,
            color=MEASURED,
            lw=1.0,
            label="measured",
        )
        ax.plot(
            primary.t[k],
            primary.simulated[label][k, i] * scale,
            color=MODEL,
            lw=1.0,
            ls="--",
            label="model (batch-identified θ)",
        )
        if "online" in data.validation:
            on = data.validation["online"]
            ax.plot(
                on.t[k],
                on.simulated[label][k, i] * scale,
                color=ONLINE,
                lw=0.8,
                ls=":",
                label="model (online θ)",
            )
        fit = primary.fit.get(f"{label}{i + 1}")
        fit_s = "n/a" if fit is None else f"{fit:.1f} %"
        ax.set_title(f"joint {i + 1}: {title}  (FIT {fit_s}){shown}", fontsize=10)
        ax.set_ylabel(unit)
    axes[0][0].legend(fontsize=8, loc="upper right")
    axes[-1][0].set_xlabel("time (s)")
    return _save(fig, out / f"validation_{label}.png")


def fig_torque(data: ReportData, out: Path) -> Path:
    """Joint torque from the measured pressures vs the inverse model on measured kinematics."""
    r = data.validation["batch"]
    nj = r.torque_measured.shape[1]
    fig = _figure(10.0, 2.6 * nj)
    axes = fig.subplots(nj, 1, squeeze=False, sharex=True)
    k, shown = _window(r.t)
    for i in range(nj):
        ax = axes[i][0]
        ax.plot(r.t[k], r.torque_measured[k, i], color=MEASURED, lw=1.0, label="from pressures")
        ax.plot(
            r.t[k],
            r.torque_predicted[k, i],
            color=MODEL,
            lw=1.0,
            ls="--",
            label="inverse model (batch θ)",
        )
        ax.set_title(
            f"joint {i + 1}: torque  (RMS residual {r.torque_rms[i]:.2f} N·m){shown}", fontsize=10
        )
        ax.set_ylabel("N·m")
    axes[0][0].legend(fontsize=8, loc="upper right")
    axes[-1][0].set_xlabel("time (s)")
    return _save(fig, out / "validation_torque.png")


def fig_residuals(data: ReportData, out: Path) -> Path:
    """Histograms of measured − model per output and joint, and of the torque residuals."""
    r = data.validation["batch"]
    labels = [lab for lab in OUTPUT_INFO if lab in r.measured]
    nj = r.torque_measured.shape[1]
    fig = _figure(3.4 * nj, 2.2 * (len(labels) + 1))
    axes = fig.subplots(len(labels) + 1, nj, squeeze=False)
    for row, lab in enumerate(labels):
        title, unit, scale = OUTPUT_INFO[lab]
        for i in range(nj):
            res = (r.measured[lab][:, i] - r.simulated[lab][:, i]) * scale
            _hist(axes[row][i], res, f"{title} {i + 1}", unit)
    for i in range(nj):
        res = r.torque_measured[:, i] - r.torque_predicted[:, i]
        _hist(axes[-1][i], res, f"torque {i + 1}", "N·m")
    fig.suptitle("residuals: measured − model (batch-identified θ)", fontsize=10)
    return _save(fig, out / "residuals.png")


def _hist(ax: Any, x: np.ndarray, title: str, unit: str) -> None:
    x = x[np.isfinite(x)]
    if len(x) == 0:
        ax.text(0.5, 0.5, "no finite residual", ha="center", transform=ax.transAxes)
    else:
        # Bins over the central 99 % so that a few start-up transients do not squash the rest.
        lo, hi = np.percentile(x, [0.5, 99.5])
        if hi <= lo:
            lo, hi = lo - 1.0, hi + 1.0
        ax.hist(x, bins=60, range=(lo, hi), color=MEASURED, alpha=0.8)
        ax.axvline(0.0, color="k", lw=0.8)
        outside = int(np.sum((x < lo) | (x > hi)))
        title += f"\nmean {np.mean(x):.3g}, sd {np.std(x):.3g} {unit}"
        if outside:
            title += f" ({outside} outside)"
    ax.set_title(title, fontsize=8)
    ax.set_xlabel(unit, fontsize=8)
    ax.tick_params(labelsize=7)


def fig_singular_values(data: ReportData, out: Path) -> Path:
    """Singular values of each model's observation matrix (normalised units), relative to the
    largest; the condition number is σ_max/σ_min (identifiability, thesis §4.3.5)."""
    fits = data.batch.fits
    fig = _figure(4.2 * len(fits), 3.2)
    axes = fig.subplots(1, len(fits), squeeze=False)
    for ax, f in zip(axes[0], fits, strict=True):
        sv = f.singular_values / f.singular_values[0]
        ax.semilogy(np.arange(1, len(sv) + 1), sv, "o-", color=MEASURED)
        ax.set_title(f"{f.name}: cond = {f.condition:.3g}", fontsize=10)
        ax.set_xlabel("index")
        ax.set_ylabel("σ_i / σ_max")
        ax.grid(True, which="both", alpha=0.3)
    return _save(fig, out / "singular_values.png")


def fig_timing(data: ReportData, out: Path) -> Path:
    """Loop timing of the whole identification run: wake-up latency and compute time (µs)."""
    run = data.ident.run
    fig = _figure(10.0, 3.2)
    axes = fig.subplots(1, 2, squeeze=False)[0]
    for ax, col in zip(axes, ("wake_latency", "compute_time"), strict=True):
        x = run.column(col) * 1e6 if col in run.columns else np.zeros(0)
        x = x[np.isfinite(x)]
        if len(x) == 0 or np.ptp(x) == 0.0:
            const = "" if len(x) == 0 else f" (all {x[0]:.0f} µs)"
            ax.text(0.5, 0.5, f"no spread recorded{const}", ha="center", transform=ax.transAxes)
        else:
            ax.hist(x, bins=80, color=MEASURED, log=True)
            p99 = np.percentile(x, 99)
            ax.axvline(p99, color=MODEL, ls="--", lw=1.0, label=f"p99 {p99:.0f} µs")
            if col == "compute_time":
                period = data.ident.period * 1e6
                ax.axvline(period, color="k", ls=":", lw=1.0, label=f"period {period:.0f} µs")
            ax.legend(fontsize=8)
        ax.set_title(col.replace("_", " "), fontsize=10)
        ax.set_xlabel("µs")
        ax.set_ylabel("cycles")
    return _save(fig, out / "timing.png")


#: Every figure the report draws, in report order: (key, function).
FIGURES: tuple[tuple[str, Callable[[ReportData, Path], Path]], ...] = (
    ("convergence", fig_convergence),
    ("torque", fig_torque),
    ("residuals", fig_residuals),
    ("singular_values", fig_singular_values),
    ("timing", fig_timing),
)


def draw_all(
    data: ReportData, out: Path, tick: Callable[[], None] | None = None
) -> dict[str, Path]:
    """Draw every figure the data allows; returns key → PNG path."""
    paths: dict[str, Path] = {}
    have_validation = "batch" in data.validation
    for key, fn in FIGURES:
        if key in ("torque", "residuals") and not have_validation:
            continue
        paths[key] = fn(data, out)
        if tick is not None:
            tick()
        if key == "convergence" and have_validation:
            for lab in OUTPUT_INFO:
                if lab in data.validation["batch"].measured:
                    paths[f"validation_{lab}"] = fig_output(data, lab, out)
                    if tick is not None:
                        tick()
    return paths
