"""Export a run file to CSV, NumPy `.npz`, MATLAB `.mat` (scipy's savemat) or MCAP.

Values are exported exactly. CSV: a header of `name [unit]`, a first column `time [s]` counted
from the recording's first row, and every number in the shortest text that reads back to the
same float64 (Python's `repr`; whole numbers without a decimal point), so `0.1` stays `0.1` and
nothing is lost. npz and mat hold the float64 array itself. MCAP (`daq.bridge.mcap_export`, the
`live` extra) holds the live bridge's channels in display units, for Foxglove and PlotJuggler.
The output is written to a temporary name and renamed into place, so a failed export never
leaves a half-written file under the final name.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.io

from daq.recording.reader import Run, read_run

log = logging.getLogger(__name__)

FORMATS: tuple[str, ...] = ("csv", "npz", "mat", "mcap")


def export_run(
    path: str | Path, fmt: Literal["csv", "npz", "mat", "mcap"], out: Path | None = None
) -> Path:
    """Write the run at `path` as `fmt` to `out` (default: next to it); return the output path.

    `out` may be a directory. Raises `ValueError` for an unknown format, `RunFileError` if
    `path` is not a run file and `OSError` if the output cannot be written.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    path = Path(path)
    run = read_run(path)
    if out is None:
        out = path.with_suffix(f".{fmt}")
    elif Path(out).is_dir():
        out = Path(out) / f"{path.stem}.{fmt}"
    out = Path(out)
    if not run.complete:
        log.warning(
            "%s is incomplete (truncated=%s, lost=%d, corrupt records=%d, trailer=%s): "
            "exporting the %d intact rows",
            path,
            run.truncated,
            run.lost,
            len(run.corrupt_chunks),
            "yes" if run.trailer else "no",
            len(run.data),
        )
    tmp = out.with_name(f".{out.name}.part")
    try:
        with tmp.open("wb") as f:
            _WRITERS[fmt](run, f)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def number(x: float) -> str:
    """Shortest text that reads back as the same float64: `repr`, integers without `.0`
    (but `-0.0` keeps its sign)."""
    if x.is_integer() and abs(x) < 1e16 and (x != 0.0 or math.copysign(1.0, x) > 0):
        return str(int(x))
    return repr(x)


def _write_csv(run: Run, f: Any) -> None:
    header = ",".join(
        ["time [s]", *(f"{c} [{u}]" for c, u in zip(run.columns, run.units, strict=True))]
    )
    f.write(header.encode() + b"\n")
    t = run.data[:, run.columns.index("t")] if len(run.data) else np.zeros(0)
    rel = (t - t[0]).tolist() if len(t) else []
    lines = []
    for k, row in enumerate(run.data.tolist()):
        lines.append(",".join([number(rel[k]), *map(number, row)]))
        if len(lines) == 4096:
            f.write(("\n".join(lines) + "\n").encode())
            lines.clear()
    if lines:
        f.write(("\n".join(lines) + "\n").encode())


def _write_mcap(run: Run, f: Any) -> None:
    from daq.bridge.mcap_export import write_mcap

    write_mcap(run, f)


def _write_npz(run: Run, f: Any) -> None:
    np.savez(
        f,
        data=run.data,
        seq=run.seq,
        columns=np.array(run.columns),
        units=np.array(run.units),
        meta_json=np.array(json.dumps(_jsonable(run.meta))),
        events_json=np.array(json.dumps(_jsonable(run.events))),
    )


def _write_mat(run: Run, f: Any) -> None:
    signals = dict(zip(matlab_names(run.columns), run.data.T, strict=True))
    scipy.io.savemat(
        f,
        {
            "data": run.data,
            "seq": run.seq.astype(np.float64),
            "columns": np.array(run.columns, dtype=object),
            "units": np.array(run.units, dtype=object),
            "signals": signals,
            "meta_json": json.dumps(_jsonable(run.meta)),
            "events_json": json.dumps(_jsonable(run.events)),
        },
        do_compression=True,
        long_field_names=True,
        oned_as="column",
    )


_WRITERS = {"csv": _write_csv, "npz": _write_npz, "mat": _write_mat, "mcap": _write_mcap}


def matlab_names(columns: tuple[str, ...]) -> list[str]:
    """MATLAB struct field names for the columns: `raw.p_a` → `raw_p_a`, unique, ≤ 63 chars."""
    names: list[str] = []
    for col in columns:
        base = re.sub(r"\W", "_", col)
        if not base or not base[0].isalpha():
            base = "c_" + base
        base = base[:60]
        name, n = base, 2
        while name in names:
            name, n = f"{base}_{n}", n + 1
        names.append(name)
    return names


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, bytes):
        return obj.hex()
    if isinstance(obj, float) and not np.isfinite(obj):
        return str(obj)
    return obj
