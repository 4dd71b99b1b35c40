"""Export a run file to CSV, NumPy `.npz` or MATLAB `.mat` (scipy's savemat).

Values are exported exactly: CSV with 17 significant digits (enough to round-trip any float64),
npz and mat as the float64 array itself. The output is written to a temporary name and renamed
into place, so a failed export never leaves a half-written file under the final name.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.io

from daq.recording.reader import Run, read_run

log = logging.getLogger(__name__)

FORMATS: tuple[str, ...] = ("csv", "npz", "mat")


def export_run(
    path: str | Path, fmt: Literal["csv", "npz", "mat"], out: Path | None = None
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


def _write_csv(run: Run, f: Any) -> None:
    header = ",".join(run.columns)
    np.savetxt(f, run.data, fmt="%.17g", delimiter=",", header=header, comments="")


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


_WRITERS = {"csv": _write_csv, "npz": _write_npz, "mat": _write_mat}


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
