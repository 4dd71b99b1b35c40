"""The model structure the batch chose, handed to the online estimator.

The real-rig family (estimator.models_lin) is linear only once some constants are fixed: the
Coulomb band v_ε (a `LinearModel.shape`) and each valve's null offset b₀ and lap d (its
`switches`, which metering edges are open). The batch chooses them from the data by least
residual (estimator.shape_search); the online estimator cannot search (one RLS per candidate
would multiply its cost) and runs what it is given. Given nothing it runs the profile's
`[estimator] coulomb_band_m_s`, `valve_null_offset_v`, `valve_lap_v`, else the family's own
(5 mm/s, b₀ = d = 0) — on a valve with a 7 mV null offset and a 7 mV underlap that put the
online estimate 37–66 % off where the batch was within a few per cent.

So the batch writes what it chose into the `[structure]` table of its parameter file
(`batch_structure`, estimator.paramfile), and the online estimator takes it from there
(`read_structure`; `rig-estimator --structure FILE`, and `rigctl identify` replays the
identification run through the online estimator on the structure its own batch chose). A
structure read from a file overrides the profile's keys; the estimate says which it ran
(`describe`).

The parameters the batch flagged (not measured: held at the profile's value along a weak
direction, or fitted but conditional on the structure, as the stiction bumps and null flows)
are handed over too, with the values the batch used (`held_names`, `held_values`), and the
online estimator holds them there (estimator.chain.ModelChain.hold): left free, the RLS moved
them along the directions the data do not resolve and took the measured parameters with them
(the realistic rig's Coulomb levels 3–5 % off online where the batch was within 2 %).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: The `[estimator]` keys a structure sets (estimator.shape_search.with_configured_*).
KEYS = ("coulomb_band_m_s", "valve_null_offset_v", "valve_lap_v")
#: The parameters the batch did not measure and the values it used, which no profile key sets.
HELD_KEYS = ("held_names", "held_values")


@dataclass(frozen=True)
class Structure:
    """The constants that make the family linear, and where they came from."""

    coulomb_band_m_s: float | None = None
    valve_null_offset_v: tuple[float, ...] | None = None
    valve_lap_v: tuple[float, ...] | None = None
    source: str = "profile"
    #: The parameters the batch flagged, by name, and the values it used (SI units).
    held: tuple[tuple[str, float], ...] = ()

    def table(self) -> dict[str, Any]:
        """The `[structure]` table (None values left out by the writer)."""
        return {
            "coulomb_band_m_s": self.coulomb_band_m_s,
            "valve_null_offset_v": None
            if self.valve_null_offset_v is None
            else list(self.valve_null_offset_v),
            "valve_lap_v": None if self.valve_lap_v is None else list(self.valve_lap_v),
            "held_names": [n for n, _ in self.held] or None,
            "held_values": [v for _, v in self.held] or None,
        }

    def empty(self) -> bool:
        return all(v is None for v in self.table().values())

    def held_values(self) -> dict[str, float]:
        return dict(self.held)


def batch_structure(fits: Sequence[Any], source: str) -> Structure:
    """The structure a batch chose: the fits' `shape_value` (the Coulomb band) and
    `switch_value` ([b₀; d] per joint), where a model has them, and every parameter it flagged
    (`identifiable` false) with the value it used (estimator.wls.ModelFit)."""
    band: float | None = None
    b0: tuple[float, ...] | None = None
    lap: tuple[float, ...] | None = None
    held: list[tuple[str, float]] = []
    for fit in fits:
        if fit.shape_value is not None:
            band = float(fit.shape_value)
        if fit.switch_value is not None:
            v = np.asarray(fit.switch_value, dtype=float)
            b0, lap = tuple(map(float, v[0])), tuple(map(float, v[1]))
        held += [
            (str(n), float(t))
            for n, t, ok in zip(fit.names, fit.theta, fit.identifiable, strict=True)
            if not ok
        ]
    return Structure(band, b0, lap, source, tuple(held))


def read_structure(path: str | Path, n_joints: int) -> Structure:
    """The `[structure]` table of a parameter file; ValueError naming the file and key when
    it has none or a value is out of range."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the structure: {exc}") from None
    table = data.get("structure")
    if not isinstance(table, Mapping) or not table:
        raise ValueError(
            f"{path}: no [structure] table (the batch's parameter file has one: "
            "`rigctl identify` writes batch-params.toml)"
        )
    unknown = sorted(set(table) - set(KEYS) - set(HELD_KEYS))
    if unknown:
        raise ValueError(
            f"{path}: [structure] has unknown key(s) {unknown}; allowed: {KEYS + HELD_KEYS}"
        )
    band = table.get("coulomb_band_m_s")
    if band is not None and not (isinstance(band, int | float) and 0.0 < band < math.inf):
        raise ValueError(f"{path}: [structure] coulomb_band_m_s = {band!r}: need a number > 0")
    vecs: list[tuple[float, ...] | None] = []
    for key in KEYS[1:]:
        v = table.get(key)
        if v is None:
            vecs.append(None)
            continue
        ok = isinstance(v, list) and all(
            isinstance(x, int | float) and math.isfinite(x) and abs(x) < 1.0 for x in v
        )
        if not ok or len(v) != n_joints:
            raise ValueError(
                f"{path}: [structure] {key} = {v!r}: need {n_joints} numbers in (−1, 1) V, "
                "one per joint"
            )
        vecs.append(tuple(float(x) for x in v))
    held = _read_held(path, table)
    return Structure(None if band is None else float(band), vecs[0], vecs[1], str(path), held)


def _read_held(path: Path, table: Mapping[str, Any]) -> tuple[tuple[str, float], ...]:
    """`held_names` and `held_values`: both or neither, as many names (distinct) as finite
    numbers."""
    names, values = table.get("held_names"), table.get("held_values")
    if names is None and values is None:
        return ()
    ok = (
        isinstance(names, list)
        and isinstance(values, list)
        and len(names) == len(values)
        and all(isinstance(n, str) and n for n in names)
        and len(set(names)) == len(names)
        and all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in values
        )
    )
    if not ok:
        raise ValueError(
            f"{path}: [structure] held_names = {names!r}, held_values = {values!r}: need two "
            "lists of the same length, distinct parameter names and finite numbers"
        )
    assert isinstance(names, list) and isinstance(values, list)
    return tuple((str(n), float(v)) for n, v in zip(names, values, strict=True))


class WithStructure:
    """The profile's `[estimator]` settings with a structure's keys in their place (what
    estimator.online.configure_models reads by attribute)."""

    def __init__(self, cfg: Any, structure: Structure) -> None:
        self._cfg = cfg
        self._table = structure.table()

    def __getattr__(self, name: str) -> Any:
        if name in KEYS and self._table.get(name) is not None:
            return self._table[name]
        return getattr(self._cfg, name, None)


def describe(structure: Structure | None, cfg: Any = None) -> str:
    """What the online estimator runs, in words: the structure and where it came from."""
    if structure is None or structure.empty():
        given = {k: getattr(cfg, k, None) for k in KEYS}
        if all(v is None for v in given.values()):
            return "the family's own structure (no batch structure given, none in the profile)"
        structure = Structure(
            given["coulomb_band_m_s"],
            given["valve_null_offset_v"],
            given["valve_lap_v"],
            "the profile's [estimator]",
        )
    parts = []
    if structure.coulomb_band_m_s is not None:
        parts.append(f"Coulomb band {structure.coulomb_band_m_s * 1e3:.3g} mm/s")
    if structure.valve_null_offset_v is not None:
        parts.append(
            "null offset ["
            + ", ".join(f"{v * 1e3:.2f}" for v in structure.valve_null_offset_v)
            + "] mV"
        )
    if structure.valve_lap_v is not None:
        parts.append("lap [" + ", ".join(f"{v * 1e3:.2f}" for v in structure.valve_lap_v) + "] mV")
    if structure.held:
        parts.append(
            f"{len(structure.held)} parameters held at the batch's values "
            f"({', '.join(n for n, _ in structure.held)})"
        )
    return f"{', '.join(parts)} (from {structure.source})"
