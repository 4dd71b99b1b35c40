"""Command semantics of transducer calibrations: `calibration` (show), `calibration_apply`,
`calibration_revert` (docs/protocol.md; docs/operations.md, "Calibration").

Order of every change, so that nothing is applied half-way: parse and check the file against
the profile (no side effect), then the loop swaps its scaling corrections (refused outside IDLE:
nothing written), then the file and the `applied` list are written atomically; if writing
fails, the loop gets the previous corrections back and the command fails.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from daq.commands.errors import CommandError
from daq.loop.station import CalibrationSwap
from daq.station.calfile import Calibration, CalibrationError, parse
from daq.station.calstore import CalibrationStore

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


class CalibrationState:
    """The service's calibration: the store on disk and what the loop applies."""

    def __init__(self, api: Any, directory: str | Path) -> None:
        self.api = api
        self.profile = api.profile
        self.store = CalibrationStore(directory, self.profile)
        self.current: Calibration | None = None
        self.path: Path | None = None
        #: Called with the summary (or None) after every change (recordings' metadata).
        self.on_change: Callable[[dict[str, Any] | None], None] | None = None
        try:
            found = self.store.current()
        except (CalibrationError, OSError) as exc:
            # The service still starts (on the declared scaling) and says why, loudly.
            log.error("calibration in force not loaded, declared scaling used: %s", exc)
            found = None
        if found is not None:
            self.current, self.path = found
            self.api.loop.preset_calibration(self._swap(self.current, self.path))
            log.info("calibration %s in force", self.path)

    def summary(self) -> dict[str, Any] | None:
        if self.current is None:
            return None
        return self.current.summary(str(self.path) if self.path else "")

    def _swap(self, cal: Calibration | None, path: Path | None) -> CalibrationSwap:
        n = len(self.profile.inputs)
        if cal is None:
            return CalibrationSwap(np.zeros(n), np.ones(n), "")
        offset, inv_gain = cal.corrections(self.profile)
        return CalibrationSwap(offset, inv_gain, path.name if path else cal.sha256[:12])

    def _to_loop(self, cal: Calibration | None, path: Path | None, cmd: str) -> None:
        try:
            self.api._call_loop("calibration", self._swap(cal, path))
        except CommandError as exc:
            raise CommandError(exc.code, f"{cmd}: {exc.message}") from None

    def apply(self, cal: Calibration, cmd: str = "calibration_apply") -> dict[str, Any]:
        """Make `cal` the calibration in force (loop first, then disk)."""
        previous, previous_path = self.current, self.path
        self._to_loop(cal, None, cmd)
        try:
            path = self.store.save(cal)
            self.store.push(path)
        except (OSError, CalibrationError) as exc:
            self._to_loop(previous, previous_path, cmd)
            raise CommandError(
                "rejected", f"{cmd}: could not write the calibration: {exc}"
            ) from None
        self.current, self.path = cal, path
        self._changed()
        log.info("calibration %s applied", path)
        return {"calibration": self.summary()}

    def revert(self) -> dict[str, Any]:
        applied = self.store.applied()
        if not applied:
            raise CommandError("rejected", "calibration_revert: no calibration is in force")
        rest = applied[1:]
        cal: Calibration | None = None
        path: Path | None = None
        if rest:
            path = self.store.dir / rest[0]
            try:
                from daq.station.calfile import load

                cal = load(path, self.profile)
            except CalibrationError as exc:
                raise CommandError("rejected", f"calibration_revert: {exc}") from None
        self._to_loop(cal, path, "calibration_revert")
        self.store.pop()
        self.current, self.path = cal, path
        self._changed()
        return {"calibration": self.summary(), "reverted": applied[0]}

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.summary())


def calibration_handlers(api: Any, state: CalibrationState) -> dict[str, Handler]:
    def show(args: dict[str, Any], client: Any) -> dict[str, Any]:
        return {"calibration": state.summary(), "applied": state.store.applied()}

    def apply(args: dict[str, Any], client: Any) -> dict[str, Any]:
        source = str(args.get("source") or "(sent by a client)")
        try:
            cal = parse(args["text"], api.profile, source)
        except CalibrationError as exc:
            raise CommandError("rejected", f"calibration_apply: {exc}") from None
        return state.apply(cal)

    def revert(args: dict[str, Any], client: Any) -> dict[str, Any]:
        return state.revert()

    return {"calibration": show, "calibration_apply": apply, "calibration_revert": revert}
