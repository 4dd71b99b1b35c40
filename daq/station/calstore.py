"""Where a rig's calibrations live: `<directory>/<rig>/`, one file per calibration
(`<rig>-<UTC stamp>.toml`) and `applied`, the names applied so far, newest first — the first is
in force, `revert` goes back to the next. Every write is atomic (daq.station.calfile)."""

from __future__ import annotations

from pathlib import Path

from daq.profile.schema import Profile
from daq.station.calfile import Calibration, CalibrationError, file_name, load, write_atomic

APPLIED = "applied"


class CalibrationStore:
    def __init__(self, directory: str | Path, profile: Profile) -> None:
        self.profile = profile
        self.dir = Path(directory) / profile.rig.id

    def applied(self) -> list[str]:
        path = self.dir / APPLIED
        if not path.exists():
            return []
        return [n for n in path.read_text().split() if n]

    def current(self) -> tuple[Calibration, Path] | None:
        """The calibration in force (checked against the profile), or None."""
        names = self.applied()
        if not names:
            return None
        path = self.dir / names[0]
        return load(path, self.profile), path

    def save(self, cal: Calibration) -> Path:
        """Write `cal` under a new name (never over an existing file); its path."""
        base = file_name(cal)
        path = self.dir / base
        k = 1
        while path.exists():
            path = self.dir / base.replace(".toml", f"-{k}.toml")
            k += 1
        write_atomic(path, cal.dumps())
        return path

    def push(self, path: Path) -> None:
        if path.parent.resolve() != self.dir.resolve():
            raise CalibrationError(f"{path}: not in this rig's calibration directory {self.dir}")
        write_atomic(self.dir / APPLIED, "\n".join([path.name, *self.applied()]) + "\n")

    def pop(self) -> list[str]:
        """Drop the calibration in force from the applied list; the list that remains."""
        rest = self.applied()[1:]
        write_atomic(self.dir / APPLIED, "\n".join(rest) + ("\n" if rest else ""))
        return rest
