"""Transducer calibration files: per rig and date, TOML, written atomically (docs/operations.md,
"Calibration").

A calibration states, per input channel, how the sensor differs from the scaling the profile
declares for it, as measured by a procedure (daq/station/procedures): the declared reading is

    declared = gain · true + offset           (engineering units; the MTS "zero" and "Delta K")

with the 1σ of each, the method, the time and the oil temperature at which it was made. The loop
applies the inverse, true = (declared − offset) / gain, in its scaling layer
(`daq.scaling.ChannelScaler.set_correction`): one code path for every backend.

    rig = "sim2dofreal"
    created_utc = "2026-11-25T18:40:00Z"

    [channels.p_cap_1]
    offset = 29876.0          # engineering units (Pa)
    gain = 1.0041
    sigma_offset = 310.0
    sigma_gain = 0.0004
    method = "pressure_zero"
    time_utc = "2026-11-25T18:39:12Z"
    oil_c = 22.4
    residual = 1250.0         # optional: the fit's RMS residual, engineering units
    pivot = 0.0               # optional: the true value the offset was measured at

The pivot says how the offset's and the gain's errors go together: an offset measured at one
true value x₀ with the gain kept (a one-point calibration) absorbs the gain's error there, so a
gain error δg moves a reading at x by δg·(x − x₀), not δg·x. It is 0 for a zero made at zero
load; the oil_temperature procedure's is the reference temperature. Only the uncertainty
propagation uses it (estimator.sensor_sigma); the correction the loop applies does not.

A file for another rig, a channel the profile does not have (or an output), a gain outside
0.8–1.25, a non-finite number: refused with the key named, and nothing is applied.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from daq.profile.schema import Profile

GAIN_MIN, GAIN_MAX = 0.8, 1.25
FILE_KEYS = {"rig", "created_utc", "note", "channels"}
CHANNEL_KEYS = {
    "offset", "gain", "sigma_offset", "sigma_gain", "method", "time_utc", "oil_c", "residual",
    "pivot",
}  # fmt: skip
METHODS = (
    "pressure_zero", "pressure_span", "pressure_shunt", "position", "valve_null",
    "oil_temperature", "manual",
)  # fmt: skip


class CalibrationError(ValueError):
    """A calibration file is malformed or does not fit the rig; the message names the key."""


@dataclass(frozen=True)
class ChannelCal:
    offset: float = 0.0
    gain: float = 1.0
    sigma_offset: float = 0.0
    sigma_gain: float = 0.0
    method: str = "manual"
    time_utc: str = ""
    oil_c: float | None = None
    residual: float | None = None
    #: The true value the offset was measured at (see the module's text).
    pivot: float = 0.0


@dataclass(frozen=True)
class Calibration:
    rig: str
    created_utc: str
    channels: dict[str, ChannelCal] = field(default_factory=dict)
    note: str = ""

    # ------------------------------------------------------------------ text

    def dumps(self) -> str:
        lines = [
            '# hydrig transducer calibration (docs/operations.md, "Calibration"):',
            "# declared = gain · true + offset per channel, in its engineering units.",
            f"rig = {_s(self.rig)}",
            f"created_utc = {_s(self.created_utc)}",
        ]
        if self.note:
            lines.append(f"note = {_s(self.note)}")
        for name, c in self.channels.items():
            lines += ["", f"[channels.{name}]"]
            lines += [f"offset = {c.offset!r}", f"gain = {c.gain!r}"]
            lines += [f"sigma_offset = {c.sigma_offset!r}", f"sigma_gain = {c.sigma_gain!r}"]
            lines += [f"method = {_s(c.method)}", f"time_utc = {_s(c.time_utc)}"]
            if c.oil_c is not None:
                lines.append(f"oil_c = {c.oil_c!r}")
            if c.residual is not None:
                lines.append(f"residual = {c.residual!r}")
            if c.pivot != 0.0:
                lines.append(f"pivot = {c.pivot!r}")
        return "\n".join(lines) + "\n"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.dumps().encode()).hexdigest()

    def merged(self, newer: Calibration) -> Calibration:
        """This calibration with `newer`'s channels replacing (or adding to) its own."""
        return Calibration(
            self.rig, newer.created_utc, {**self.channels, **newer.channels}, newer.note
        )

    def summary(self, source: str = "") -> dict[str, Any]:
        """For `status`, `calibration` and every run's header."""
        return {
            "rig": self.rig,
            "created_utc": self.created_utc,
            "source": source,
            "sha256": self.sha256,
            "channels": {
                n: {k: v for k, v in vars(c).items() if v is not None}
                for n, c in self.channels.items()
            },
        }

    # ------------------------------------------------------------------ applying

    def corrections(self, profile: Profile) -> tuple[np.ndarray, np.ndarray]:
        """(offset, 1/gain) per input channel of the profile, in profile order (0, 1 where
        the calibration says nothing)."""
        names = [c.name for c in profile.inputs]
        offset = np.zeros(len(names))
        inv_gain = np.ones(len(names))
        for name, c in self.channels.items():
            i = names.index(name)
            offset[i] = c.offset
            inv_gain[i] = 1.0 / c.gain
        return offset, inv_gain


def _s(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def now_utc() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------- reading and checking


def parse(text: str, profile: Profile, source: str = "<text>") -> Calibration:
    """A calibration from TOML text, checked against `profile`; CalibrationError otherwise."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CalibrationError(f"{source}: not TOML: {exc}") from None
    return from_dict(data, profile, source)


def from_dict(data: dict[str, Any], profile: Profile, source: str) -> Calibration:
    unknown = sorted(set(data) - FILE_KEYS)
    if unknown:
        raise CalibrationError(
            f"{source}: unknown key(s) {', '.join(unknown)} "
            f"(allowed: {', '.join(sorted(FILE_KEYS))})"
        )
    rig = data.get("rig")
    if rig != profile.rig.id:
        raise CalibrationError(
            f"{source}: made for rig {rig!r}, this rig is {profile.rig.id!r}; a calibration "
            "belongs to one rig's transducers"
        )
    chans = data.get("channels")
    if not isinstance(chans, dict) or not chans:
        raise CalibrationError(f"{source}: needs a [channels.NAME] table for at least one channel")
    inputs = {c.name: c for c in profile.inputs}
    out: dict[str, ChannelCal] = {}
    for name, entry in chans.items():
        where = f"{source}: channels.{name}"
        if name not in inputs:
            outputs = {c.name for c in profile.outputs}
            what = "an output (outputs are not calibrated)" if name in outputs else "not a channel"
            raise CalibrationError(
                f"{where}: {what} of rig {profile.rig.id!r} (inputs: {', '.join(inputs)})"
            )
        if not isinstance(entry, dict):
            raise CalibrationError(f"{where}: expected a table")
        out[name] = _channel(entry, where)
    created = data.get("created_utc", "")
    if not isinstance(created, str):
        raise CalibrationError(f"{source}: created_utc must be a string")
    note = data.get("note", "")
    return Calibration(str(rig), created, out, str(note))


def _channel(entry: dict[str, Any], where: str) -> ChannelCal:
    unknown = sorted(set(entry) - CHANNEL_KEYS)
    if unknown:
        raise CalibrationError(
            f"{where}: unknown key(s) {', '.join(unknown)} "
            f"(allowed: {', '.join(sorted(CHANNEL_KEYS))})"
        )

    def num(key: str, default: float | None) -> float | None:
        v = entry.get(key, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise CalibrationError(f"{where}.{key}: expected a finite number, got {v!r}")
        return float(v)

    offset = num("offset", 0.0)
    gain = num("gain", 1.0)
    assert offset is not None and gain is not None
    if not GAIN_MIN <= gain <= GAIN_MAX:
        raise CalibrationError(
            f"{where}.gain: {gain:g} is outside the allowed {GAIN_MIN}–{GAIN_MAX} (a transducer "
            "that far off its certificate is broken or mis-wired, not out of calibration)"
        )
    sig_o, sig_g = num("sigma_offset", 0.0), num("sigma_gain", 0.0)
    assert sig_o is not None and sig_g is not None
    for key, v in (("sigma_offset", sig_o), ("sigma_gain", sig_g)):
        if v < 0:
            raise CalibrationError(f"{where}.{key}: must be ≥ 0, got {v:g}")
    method = entry.get("method", "manual")
    if method not in METHODS:
        raise CalibrationError(f"{where}.method: {method!r} is not one of {', '.join(METHODS)}")
    time_utc = entry.get("time_utc", "")
    if not isinstance(time_utc, str):
        raise CalibrationError(f"{where}.time_utc: expected a string")
    pivot = num("pivot", 0.0)
    assert pivot is not None
    return ChannelCal(
        offset, gain, sig_o, sig_g, method, time_utc, num("oil_c", None), num("residual", None),
        pivot,
    )  # fmt: skip


def load(path: str | Path, profile: Profile) -> Calibration:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise CalibrationError(f"{p}: cannot read: {exc.strerror or exc}") from None
    return parse(text, profile, str(p))


# ---------------------------------------------------------------------- writing


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file in the same directory, fsync, rename: a reader sees the old
    file or the new one, never half of one (and a crash leaves no torn calibration)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dirfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def file_name(cal: Calibration) -> str:
    """`<rig>-<UTC date and time>.toml`; the stamp sorts like the dates it names."""
    stamp = cal.created_utc.replace("-", "").replace(":", "") or now_utc().replace(":", "")
    return f"{cal.rig}-{stamp}.toml"
