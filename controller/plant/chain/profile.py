"""Read a chain profile (`hw_profiles/sim-excavator.toml`) into a `Chain` and its sensor grades.

Plain tomllib → dataclasses. The same file is also the service's profile (`daq.profile`):
its `[chain]` and `[sensors]` are read here, the joints' names and homes come from the
service's `[[joints]]`, and every other service section (`[backend]`, `[[channels]]`, …) is
left to the service's schema, which calls `parse_chain` on the same tables so that both
readers refuse the same mistakes. Every key read here is checked: an unknown key, a missing
one, a wrong type or an impossible value raises `ChainProfileError` naming the file and key.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from controller.plant.chain.model import DH, Body, Chain, Jack, Joint, Link, Motor, Valve

PSI = 6894.757293168  # Pa per psi
LBF_PER_PSI_IN2 = 1.0  # 1 psi on 1 in² is 1 lbf
NEWTON_PER_LBF = 4.4482216152605
IN2 = 6.4516e-4  # m² per in²


class ChainProfileError(ValueError):
    """A chain profile that cannot be read: the message names the file and the key."""


@dataclass(frozen=True)
class SensorGrade:
    """One grade of the machine's sensors (thesis §2.5, §4.4.3)."""

    resolver_accuracy_deg: float
    resolver_bits: int
    pressure_accuracy_psi: float
    pressure_full_scale_psi: float
    pressure_bits: int
    piston_accuracy_m: float
    piston_bits: int

    @property
    def pressure_accuracy_pa(self) -> float:
        return self.pressure_accuracy_psi * PSI


@dataclass(frozen=True)
class ChainProfile:
    rig_id: str
    description: str
    chain: Chain
    home: np.ndarray  # rad
    sensors: dict[str, SensorGrade]


class _Table:
    """A TOML table whose keys are taken one by one; `done()` refuses what is left."""

    def __init__(self, data: Any, where: str, path: Path) -> None:
        if not isinstance(data, dict):
            raise ChainProfileError(f"{path}: {where} must be a table")
        self.data = dict(data)
        self.where = where
        self.path = path

    def _fail(self, key: str, msg: str) -> ChainProfileError:
        return ChainProfileError(f"{self.path}: {self.where}.{key}: {msg}")

    def raw(self, key: str, default: Any = ...) -> Any:
        if key not in self.data:
            if default is ...:
                near = difflib.get_close_matches(key, list(self.data), n=1)
                hint = f" (is {near[0]!r} a misspelling of it?)" if near else ""
                raise self._fail(key, "missing" + hint)
            return default
        return self.data.pop(key)

    def number(
        self, key: str, default: float | None = None, lo: float = -math.inf, hi: float = math.inf,
        lo_open: bool = False,
    ) -> float:  # fmt: skip
        v = self.raw(key, ... if default is None else default)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self._fail(key, f"must be a number, got {v!r}")
        v = float(v)
        if not (lo < v if lo_open else lo <= v) or v > hi:
            bound = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
            raise self._fail(key, f"{v} is outside the allowed range {bound}")
        return v

    def integer(self, key: str, lo: int, hi: int) -> int:
        v = self.raw(key)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise self._fail(key, f"must be an integer in [{lo}, {hi}], got {v!r}")
        return int(v)

    def text(self, key: str) -> str:
        v = self.raw(key)
        if not isinstance(v, str) or not v:
            raise self._fail(key, f"must be a non-empty string, got {v!r}")
        return v

    def flag(self, key: str, default: bool) -> bool:
        v = self.raw(key, default)
        if not isinstance(v, bool):
            raise self._fail(key, f"must be true or false, got {v!r}")
        return v

    def vector(self, key: str, size: int) -> tuple[float, ...]:
        v = self.raw(key)
        if (
            not isinstance(v, list)
            or len(v) != size
            or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in v)
        ):
            raise self._fail(key, f"must be a list of {size} numbers, got {v!r}")
        return tuple(float(x) for x in v)

    def table(self, key: str) -> _Table:
        return _Table(self.raw(key), f"{self.where}.{key}", self.path)

    def done(self) -> None:
        if self.data:
            keys = ", ".join(sorted(self.data))
            raise ChainProfileError(f"{self.path}: {self.where}: unknown key(s) {keys}")


def _pin(t: _Table, key: str) -> tuple[float, float, float]:
    """A pin as [x, y, z] or {radius, angle_deg, axial} about the joint axis."""
    v = t.data.get(key)
    if isinstance(v, dict):
        p = t.table(key)
        r = p.number("radius", lo=0.0)
        ang = math.radians(p.number("angle_deg", lo=-360.0, hi=360.0))
        axial = p.number("axial", default=0.0)
        p.done()
        return (r * math.cos(ang), r * math.sin(ang), axial)
    x, y, z = t.vector(key, 3)
    return (x, y, z)


def _body(t: _Table, key: str) -> Body:
    b = t.table(key)
    out = Body(
        mass=b.number("mass", lo=0.0),
        distance=b.number("distance"),
        inertia_axial=b.number("inertia_axial", lo=0.0),
        inertia_transverse=b.number("inertia_transverse", lo=0.0),
    )
    b.done()
    return out


def _jack(t: _Table) -> Jack:
    fields = {
        "pin_parent": _pin(t, "pin_parent"),
        "pin_child": _pin(t, "pin_child"),
        "closed_length": t.number("closed_length", lo=0.0, lo_open=True),
        "stroke": t.number("stroke", lo=0.0, lo_open=True),
        "area_cap": t.number("area_cap", lo=0.0, lo_open=True),
        "area_rod": t.number("area_rod", lo=0.0, lo_open=True),
        "cylinder": _body(t, "cylinder"),
        "piston": _body(t, "piston"),
    }
    try:
        jack = Jack(**fields)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ChainProfileError(f"{t.path}: {t.where}: {exc}") from exc
    t.done()
    return jack


def _joint(t: _Table) -> Joint:
    name = t.text("name")
    resolver = t.flag("resolver", True)
    d = t.table("dh")
    dh = DH(
        theta_offset=math.radians(d.number("theta_offset_deg", lo=-360.0, hi=360.0)),
        d=d.number("d"),
        a=d.number("a"),
        alpha=math.radians(d.number("alpha_deg", lo=-360.0, hi=360.0)),
        beta=math.radians(d.number("beta_deg", default=0.0, lo=-360.0, hi=360.0)),
    )
    d.done()
    lk = t.table("link")
    ixx, iyy, izz, ixy, ixz, iyz = lk.vector("inertia", 6)
    if min(ixx, iyy, izz) < 0.0:
        raise ChainProfileError(f"{t.path}: {lk.where}.inertia: principal moments must be ≥ 0")
    cx, cy, cz = lk.vector("com", 3)
    link = Link(
        name=name,
        dh=dh,
        mass=lk.number("mass", lo=0.0),
        com=(cx, cy, cz),
        inertia=(ixx, iyy, izz, ixy, ixz, iyz),
        viscous_friction=lk.number("viscous_friction", default=0.0, lo=0.0),
        armature=lk.number("armature", default=0.0, lo=0.0),
    )
    lk.done()
    drive: Motor | tuple[Jack, ...] | None = None
    if "motor" in t.data and "jacks" in t.data:
        raise ChainProfileError(f"{t.path}: {t.where}: give a motor or jacks, not both")
    if "motor" in t.data:
        m = t.table("motor")
        drive = Motor(
            displacement=m.number("displacement_m3_per_rad", lo=0.0, lo_open=True),
            gear_ratio=m.number("gear_ratio", lo=0.0, lo_open=True),
        )
        m.done()
    elif "jacks" in t.data:
        jacks = t.raw("jacks")
        if not isinstance(jacks, list) or not jacks:
            raise ChainProfileError(f"{t.path}: {t.where}.jacks: must be a non-empty array")
        drive = tuple(
            _jack(_Table(j, f"{t.where}.jacks[{k}]", t.path)) for k, j in enumerate(jacks)
        )
    valve = None
    if "valve" in t.data:
        v = t.table("valve")
        gains = v.vector("flow_gains", 4)
        if min(gains) < 0.0:
            raise ChainProfileError(f"{t.path}: {v.where}.flow_gains: must be ≥ 0")
        # Negative: the valve's coil is wired inverted, so that a positive command moves the
        # joint's angle up on a joint whose jacks extend as it falls (the boom).
        kv = v.number("gain", lo=-10.0, hi=10.0)
        if kv == 0.0:
            raise ChainProfileError(
                f"{t.path}: {v.where}.gain: must be nonzero, in [-10, 0) or (0, 10] LVDT volts "
                "per command volt (negative: the coil wired inverted)"
            )
        valve = Valve(
            flow_gains=(gains[0], gains[1], gains[2], gains[3]),
            gain=kv,
            tau=v.number("tau_s", lo=0.0, lo_open=True),
            spool_max=v.number("spool_max", lo=0.0, lo_open=True),
            dead_volume=v.number("dead_volume", lo=0.0, lo_open=True),
        )
        v.done()
    t.done()
    return Joint(link=link, drive=drive, valve=valve, resolver=resolver)


def _sensor(t: _Table) -> SensorGrade:
    out = SensorGrade(
        resolver_accuracy_deg=t.number("resolver_accuracy_deg", lo=0.0, lo_open=True),
        resolver_bits=t.integer("resolver_bits", 8, 24),
        pressure_accuracy_psi=t.number("pressure_accuracy_psi", lo=0.0, lo_open=True),
        pressure_full_scale_psi=t.number("pressure_full_scale_psi", lo=0.0, lo_open=True),
        pressure_bits=t.integer("pressure_bits", 8, 24),
        piston_accuracy_m=t.number("piston_accuracy_m", lo=0.0, lo_open=True),
        piston_bits=t.integer("piston_bits", 8, 24),
    )
    t.done()
    return out


#: Top-level sections that belong to the service's profile schema (`daq.profile.schema`),
#: which checks them; the chain reader reads `[[joints]]`' names and homes only.
SERVICE_SECTIONS = frozenset(
    {"realtime", "backend", "interlocks", "network", "recording", "joints", "channels",
     "estimator", "hydraulics", "calibration"}
)  # fmt: skip


def _homes(raw: Any, names: list[str], path: Path) -> np.ndarray:
    """Each chain joint's home (rad) from the service's `[[joints]]`, which must name the
    chain's joints in the chain's order: one description of which joint is which."""
    if not isinstance(raw, list) or not all(isinstance(j, dict) for j in raw):
        raise ChainProfileError(
            f"{path}: joints: must be an array of [[joints]] tables, one per chain joint "
            f"({', '.join(names)}), each with name and home_deg"
        )
    got = [j.get("name") for j in raw]
    if got != names:
        raise ChainProfileError(
            f"{path}: joints: the [[joints]] names must be the chain's joints in order, "
            f"{names}; got {got}"
        )
    homes = []
    for i, j in enumerate(raw):
        t = _Table({"home_deg": j.get("home_deg")}, f"joints[{i}:{names[i]}]", path)
        if j.get("home_deg") is None:
            raise t._fail("home_deg", "missing")
        homes.append(math.radians(t.number("home_deg", lo=-360.0, hi=360.0)))
    return np.array(homes)


def parse_chain(
    chain: Any, sensors: Any, joints: Any, path: str | Path
) -> tuple[Chain, np.ndarray, dict[str, SensorGrade]]:
    """The chain, its home (rad) and its sensor grades from a profile's `[chain]`,
    `[sensors]` and `[[joints]]` tables (already parsed TOML)."""
    path = Path(path)
    c = _Table(chain, "chain", path)
    gx, gy, gz = c.vector("gravity", 3)
    supply = c.number("supply_pressure_pa", lo=0.0, lo_open=True)
    bulk = c.number("bulk_modulus_pa", lo=0.0, lo_open=True)
    relief = c.number("relief_ratio", default=1.05, lo=1.0)
    raw_joints = c.raw("joints")
    if not isinstance(raw_joints, list) or not raw_joints:
        raise ChainProfileError(f"{path}: chain.joints: must be a non-empty array of tables")
    parsed = [_joint(_Table(j, f"chain.joints[{i}]", path)) for i, j in enumerate(raw_joints)]
    c.done()
    s = _Table(sensors, "sensors", path)
    grades = {k: _sensor(s.table(k)) for k in list(s.data)}
    s.done()
    names = [j.link.name for j in parsed]
    if len(set(names)) != len(names):
        raise ChainProfileError(f"{path}: chain.joints: joint names must be unique, got {names}")
    home = _homes(joints, names, path)
    try:
        built = Chain(
            joints=tuple(parsed),
            gravity=(gx, gy, gz),
            supply_pressure=supply,
            bulk_modulus=bulk,
            relief_ratio=relief,
        )
    except ValueError as exc:
        raise ChainProfileError(f"{path}: {exc}") from exc
    return built, home, grades


def load_chain_profile(path: str | Path) -> ChainProfile:
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ChainProfileError(f"{path}: not valid TOML: {exc}") from exc
    top = _Table(data, "", path)
    rig = top.table("rig")
    rig_id, description = rig.text("id"), rig.text("description")
    rig.raw("loop_rate_hz", None)  # the service's (daq.profile.schema.Rig checks it)
    rig.done()
    chain, home, sensors = parse_chain(
        top.raw("chain"), top.raw("sensors"), top.raw("joints"), path
    )
    for key in SERVICE_SECTIONS:
        top.raw(key, None)
    top.done()
    return ChainProfile(
        rig_id=rig_id, description=description, chain=chain, home=home, sensors=sensors
    )


def actuator_errors(chain: Chain, grade: SensorGrade) -> list[float]:
    """Worst-case error of each joint's measured actuator torque (N·m, motor) or force (N,
    jacks) from the pressure accuracy: thesis eq. 4.61 / 4.33 with both chambers at ±e,
    C_q N (e + e) for a motor, (A⁺ + A⁻) e summed over a joint's jacks."""
    e = grade.pressure_accuracy_pa
    out = []
    for j in chain.joints:
        if isinstance(j.drive, Motor):
            out.append(j.drive.gear_ratio * j.drive.displacement * 2.0 * e)
        elif isinstance(j.drive, tuple):
            out.append(sum((k.area_cap + k.area_rod) * e for k in j.drive))
        else:
            out.append(0.0)
    return out
