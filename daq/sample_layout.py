"""The columns of one cycle's sample row, shared by the loop, the recorder and telemetry."""

from __future__ import annotations

from dataclasses import dataclass

from daq.profile.schema import Profile

#: Columns every row starts with, in this order.
HEADER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("seq", "1"),  # executed-cycle counter, 0…N−1 without gaps
    ("t", "s"),  # cycle deadline, seconds since the run started
    ("state", "1"),  # daq.loop.states.State value
    ("fault", "1"),  # daq.loop.interlocks.Trip code of the latched fault, 0 = none
    ("flags", "1"),  # bit mask of the interlocks tripping in this cycle
    ("wake_latency", "s"),  # wake-up time minus deadline
    ("compute_time", "s"),  # read → outputs written
)


@dataclass(frozen=True)
class Column:
    name: str
    unit: str
    role: str  # "header", "raw", "eng", "cmd", "ref"
    channel: str | None = None
    joint: str | None = None


@dataclass(frozen=True)
class SampleLayout:
    columns: tuple[Column, ...]

    @classmethod
    def from_profile(cls, profile: Profile) -> SampleLayout:
        cols = [Column(n, u, "header") for n, u in HEADER_COLUMNS]
        inputs = profile.inputs
        cols += [Column(f"raw.{c.name}", "counts", "raw", c.name, c.joint) for c in inputs]
        cols += [Column(f"eng.{c.name}", c.scaling.units, "eng", c.name, c.joint) for c in inputs]
        cols += [Column(f"cmd.{c.name}", "V", "cmd", c.name, c.joint) for c in profile.outputs]
        cols += [Column(f"ref.{j.name}", "rad", "ref", None, j.name) for j in profile.joints]
        return cls(tuple(cols))

    @property
    def width(self) -> int:
        return len(self.columns)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def index(self, name: str) -> int:
        for i, c in enumerate(self.columns):
            if c.name == name:
                return i
        raise KeyError(f"no column '{name}' in the sample layout")

    def span(self, role: str) -> slice:
        """The contiguous block of columns with this role (raw, eng, cmd, ref)."""
        idx = [i for i, c in enumerate(self.columns) if c.role == role]
        if not idx:
            return slice(0, 0)
        return slice(idx[0], idx[-1] + 1)

    def to_dict(self) -> list[dict[str, str | None]]:
        return [
            {"name": c.name, "unit": c.unit, "role": c.role, "channel": c.channel, "joint": c.joint}
            for c in self.columns
        ]
