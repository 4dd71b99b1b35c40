"""Schema of a hardware profile (`hw_profiles/*.toml`).

Every model forbids unknown keys and is strict about types (a string is never coerced into a
number): a wrong profile on a real rig can move a 700 kg arm the wrong way. Angles are written in
degrees in the file and converted to radians by the accessors that the loop uses.
"""

from __future__ import annotations

import itertools
import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Identifier = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,31}$")]
Positive = Annotated[float, Field(gt=0.0)]
NonNegative = Annotated[float, Field(ge=0.0)]

Role = Literal[
    "pressure_cap", "pressure_rod", "lvdt", "potentiometer", "resolver", "valve", "temperature"
]
#: Roles every joint must have, and the roles a joint may have at most once.
REQUIRED_JOINT_ROLES: tuple[Role, ...] = ("resolver", "valve", "pressure_cap", "pressure_rod")
JOINT_ROLES: tuple[Role, ...] = (*REQUIRED_JOINT_ROLES, "lvdt", "potentiometer")
DeviceName = Literal["sim", "ni", "serial"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --------------------------------------------------------------------------- channels


class Converter(Strict):
    """A/D, D/A or resolver-to-digital converter. Counts are offset binary: 0 … 2**bits − 1
    span [min, max) of the converter's units (volts for A/D and D/A, degrees for a resolver)."""

    bits: Annotated[int, Field(ge=8, le=24)]
    min: float
    max: float
    units: Literal["V", "deg"] = "V"
    #: A resolver's angle wraps around at its range; an A/D saturates at its rails.
    wraps: bool = False

    @model_validator(mode="after")
    def _range(self) -> Converter:
        if not self.max > self.min:
            raise ValueError(f"max ({self.max}) must be greater than min ({self.min})")
        return self


class LinearScaling(Strict):
    """eng = gain · x + offset, x in converter units."""

    kind: Literal["linear"]
    gain: float
    offset: float = 0.0
    units: str

    @model_validator(mode="after")
    def _nonzero(self) -> LinearScaling:
        if self.gain == 0.0:
            raise ValueError("gain must be nonzero (the scaling must be invertible)")
        return self


class PolynomialScaling(Strict):
    """eng = c0 + c1·x + c2·x² + …; must be monotonic over the converter range."""

    kind: Literal["polynomial"]
    coefficients: Annotated[list[float], Field(min_length=2, max_length=8)]
    units: str


class TableScaling(Strict):
    """Piecewise-linear calibration table of [x, eng] points, x strictly increasing and eng
    strictly monotonic (so that it inverts)."""

    kind: Literal["table"]
    points: Annotated[
        list[Annotated[list[float], Field(min_length=2, max_length=2)]], Field(min_length=2)
    ]
    units: str

    @model_validator(mode="after")
    def _monotonic(self) -> TableScaling:
        xs = [p[0] for p in self.points]
        ys = [p[1] for p in self.points]
        if any(b <= a for a, b in itertools.pairwise(xs)):
            raise ValueError("table x values must be strictly increasing")
        up = all(b > a for a, b in itertools.pairwise(ys))
        down = all(b < a for a, b in itertools.pairwise(ys))
        if not (up or down):
            raise ValueError("table eng values must be strictly monotonic")
        return self


Scaling = Annotated[LinearScaling | PolynomialScaling | TableScaling, Field(discriminator="kind")]


class Channel(Strict):
    name: Identifier
    role: Role
    #: The joint this channel belongs to (every role but `temperature` needs one).
    joint: Identifier | None = None
    #: Which device provides it; defaults to the backend's kind (must be set in composite).
    device: DeviceName | None = None
    #: Device-specific address: "Dev1/ai0", "Dev1/ao1", "resolver0", "sim".
    physical: str
    converter: Converter
    scaling: Scaling
    #: Valid range in engineering units: outside it the channel is broken (interlock).
    valid_min: float
    valid_max: float
    #: NI terminal configuration for analog inputs.
    terminal: Literal["default", "rse", "nrse", "diff", "pseudo_diff"] = "default"
    #: Simulated sensor noise, 1σ in engineering units (simulated backend only).
    sim_noise: NonNegative = 0.0
    #: Output channels: the voltage that means "no flow" (null of the servo valve).
    null_volts: float = 0.0

    @property
    def is_output(self) -> bool:
        return self.role == "valve"

    @model_validator(mode="after")
    def _checks(self) -> Channel:
        if not self.valid_max > self.valid_min:
            raise ValueError(
                f"valid_max ({self.valid_max}) must be greater than valid_min ({self.valid_min})"
            )
        if self.role != "temperature" and self.joint is None:
            raise ValueError(f"a '{self.role}' channel needs a joint")
        return self


# --------------------------------------------------------------------------- joints


class PidGains(Strict):
    """LinuxCNC `pid` parameters; output in valve volts, error in rad. 0 means "no limit"."""

    p: NonNegative = 0.0
    i: NonNegative = 0.0
    d: NonNegative = 0.0
    ff0: float = 0.0
    ff1: float = 0.0
    ff2: float = 0.0
    bias: float = 0.0
    deadband: NonNegative = 0.0
    max_output: NonNegative = 0.0
    max_error: NonNegative = 0.0
    max_error_i: NonNegative = 0.0
    max_error_d: NonNegative = 0.0
    max_cmd_d: NonNegative = 0.0
    max_i: NonNegative = 0.0
    #: Low-pass corner of the derivative (on measurement), Hz; 0 = unfiltered.
    d_filter_hz: NonNegative = 0.0


class JointLimits(Strict):
    soft_min_deg: float
    soft_max_deg: float
    max_velocity_deg_s: Positive
    max_acceleration_deg_s2: Positive
    #: Either chamber above this trips the pressure interlock.
    max_pressure_pa: Positive
    #: Following-error limit: base + per_velocity · |reference velocity| (deg, deg per deg/s).
    following_error_deg: Positive
    following_error_per_velocity_s: NonNegative = 0.0
    #: Valve command amplitude and slew-rate limits.
    valve_max_v: Annotated[float, Field(gt=0.0, le=10.0)]
    valve_max_rate_v_per_s: Positive

    @model_validator(mode="after")
    def _order(self) -> JointLimits:
        if not self.soft_max_deg > self.soft_min_deg:
            raise ValueError("soft_max_deg must be greater than soft_min_deg")
        return self


class Joint(Strict):
    name: Identifier
    home_deg: float
    limits: JointLimits
    pid: PidGains = PidGains()


# --------------------------------------------------------------------------- plant (simulator)


class PlantJoint(Strict):
    """Cylinder, valve and link of one joint (DESIGN.md §1, Sakai Tables II/III)."""

    inertia: Positive  # M_i, kg·m²
    viscous_friction: NonNegative  # Fv_i, N·m·s/rad
    gravity_moment: NonNegative  # W_i, kg·m
    area_cap: Positive  # A⁺, m²
    area_rod: Positive  # A⁻, m²
    dead_volume: Positive  # V0, m³
    stroke: Positive  # L, m
    pin_a: Positive  # m
    pin_b: Positive  # m
    closed_length: Positive  # ℓc, m
    theta0_deg: float
    #: Cf⁺⁺, Cf⁺⁻, Cf⁻⁺, Cf⁻⁻ in m²/(s·V·√Pa).
    flow_gains: Annotated[list[Annotated[float, Field(gt=0.0)]], Field(min_length=4, max_length=4)]
    valve_gain: Positive = 0.25  # k_v, V/V
    valve_tau_s: Positive = 1.5e-3
    spool_max: Positive = 1.4  # u_max, V
    initial_deg: float | None = None  # defaults to the joint's home


class Plant(Strict):
    gravity: Positive = 9.81
    supply_pressure_pa: Positive
    bulk_modulus_pa: Positive
    coupling: NonNegative = 0.0  # R12, kg·m² (2-DOF only)
    joints: Annotated[list[PlantJoint], Field(min_length=1, max_length=2)]


# --------------------------------------------------------------------------- service


class SimBackend(Strict):
    seed: Annotated[int, Field(ge=0)] = 0
    #: Faults injected from the start: "<channel>:<kind>[:<value>]", kind in rail_low,
    #: rail_high, stuck, noise_burst, stall_read, stuck_valve.
    faults: list[str] = []


class NiBackend(Strict):
    """An NI-DAQmx multifunction card (X Series, e.g. PCIe-6353): one hardware-timed
    single-point AI task paces the loop, one AO task drives the valves (see docs/ni.md)."""

    #: Device name as configured in NI MAX; every NI channel's `physical` is "<device>/aiN|aoN".
    device: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$")] = "Dev1"
    #: Terminal the AO task's sample clock comes from; "" = the AI task's sample clock
    #: ("/<device>/ai/SampleClock"), so each valve update lands on the same edge as a read.
    ao_clock_source: str = ""
    #: Hardware watchdog timeout; outputs go to their null volts (0 V) if the loop stops
    #: refreshing it. Must be at least 5 loop periods (checked when the backend is built).
    watchdog_timeout_s: Annotated[float, Field(gt=0.0, le=10.0)] = 0.1
    #: How long wait-for-next-sample-clock, a read or a write may block before the card
    #: counts as gone (the cycle then reports ERROR). Must be at least 2 loop periods.
    clock_timeout_s: Annotated[float, Field(gt=0.0, le=1.0)] = 0.05


class SerialBackend(Strict):
    """Resolver front-end board on a serial line (docs/serial_protocol.md)."""

    #: Device path ("/dev/ttyUSB0", or the emulator's pty / link path).
    port: str
    #: 8N1; at 921600 baud a 2-resolver request + response (7 + 17 bytes) takes 260 µs.
    baudrate: Annotated[int, Field(ge=9600)] = 921600
    #: Cycle deadline for one SAMPLE response; a miss is a channel fault (never a wait).
    timeout_s: Annotated[float, Field(gt=0.0, lt=0.001)] = 0.0006
    #: Resolver inputs the board is configured for (AD2S1210 channels, at most 8).
    resolvers: Annotated[int, Field(ge=1, le=8)] = 2
    #: Per-try response timeout of the IDENTIFY/CONFIGURE handshake (open and reconnect only).
    open_timeout_s: Annotated[float, Field(gt=0.0, le=5.0)] = 0.2
    #: How often the background thread retries a lost port (never from inside the cycle).
    reconnect_interval_s: Annotated[float, Field(gt=0.0, le=60.0)] = 1.0


class Backend(Strict):
    kind: Literal["sim", "ni", "serial", "composite"] = "sim"
    sim: SimBackend | None = None
    ni: NiBackend | None = None
    serial: SerialBackend | None = None

    def devices(self) -> tuple[DeviceName, ...]:
        if self.kind != "composite":
            return (self.kind,)
        return tuple(d for d in ("sim", "ni", "serial") if getattr(self, d) is not None)

    @model_validator(mode="after")
    def _sections(self) -> Backend:
        if self.kind == "composite":
            if len(self.devices()) < 2:
                raise ValueError("a composite backend needs at least two of [sim], [ni], [serial]")
        elif self.kind in ("ni", "serial") and getattr(self, self.kind) is None:
            raise ValueError(f"backend kind '{self.kind}' needs a [backend.{self.kind}] section")
        return self


class Realtime(Strict):
    #: SCHED_FIFO priority of the loop thread; 0 = leave the default scheduler.
    priority: Annotated[int, Field(ge=0, le=99)] = 80
    #: CPU the loop thread is pinned to; -1 = no affinity.
    cpu: Annotated[int, Field(ge=-1)] = -1
    lock_memory: bool = True
    #: Real time: sleep until this long before each deadline, then busy-wait (µs; 0 = sleep).
    spin_us: Annotated[float, Field(ge=0.0, le=500.0)] = 50.0


class Interlocks(Strict):
    channel_range: bool = True
    soft_limits: bool = True
    pressure: bool = True
    following_error: bool = True
    valve_limits: bool = True
    backend_error: bool = True
    #: Consecutive overruns that trip a fault; 0 disables.
    overrun_limit: Annotated[int, Field(ge=0)] = 20


class Network(Strict):
    telemetry: str = "tcp://127.0.0.1:5555"
    commands: str = "tcp://127.0.0.1:5556"
    estimates: str = "tcp://127.0.0.1:5557"
    #: Cycles per telemetry message (≤ 20 ms of data at the loop rate by default).
    telemetry_batch: Annotated[int, Field(ge=1, le=1000)] = 20
    #: Directory of CURVE keys; required when any endpoint binds beyond loopback.
    keys_dir: str | None = None


class Recording(Strict):
    directory: str = "runs"
    #: Stop recording (loudly) when the directory holds more than this, or the disk less.
    quota_bytes: Annotated[int, Field(ge=0)] = 0
    min_free_bytes: Annotated[int, Field(ge=0)] = 1_000_000_000


class Estimator(Strict):
    """The online estimator (`rig-estimator`, docs/estimator.md). Optional section."""

    #: "reference" (the rig's mechanical + fluid models) or "package.module:function", a factory
    #: `function(params: PlantParams) -> LinearModel | list[LinearModel]` (estimator.models).
    model: Annotated[str, Field(pattern=r"^(reference|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$")] = (
        "reference"
    )
    #: RLS exponential forgetting factor λ ∈ (0, 1]; 1 = growing-window least squares.
    forgetting: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    #: Bound on trace(P) of the normalised problem while forgetting (no wind-up).
    trace_max: Positive = 1.0e4
    #: Causal FIR conditioning per reference model (Hz, odd tap count); None = built-in default.
    mech_cutoff_hz: Positive | None = None
    mech_taps: Annotated[int, Field(ge=3, le=2001)] | None = None
    fluid_cutoff_hz: Positive | None = None
    fluid_taps: Annotated[int, Field(ge=3, le=2001)] | None = None
    #: Estimate messages per second on network.estimates.
    publish_hz: Annotated[float, Field(gt=0.0, le=100.0)] = 4.0
    #: Parameter file written on exit (and read as the prior on restart when `resume`).
    param_file: str = "params/estimate.toml"
    resume: bool = True


class Rig(Strict):
    id: Identifier
    description: str = ""
    loop_rate_hz: Annotated[float, Field(ge=10.0, le=10_000.0)] = 1000.0


class Profile(Strict):
    rig: Rig
    realtime: Realtime = Realtime()
    backend: Backend = Backend()
    interlocks: Interlocks = Interlocks()
    network: Network = Network()
    recording: Recording = Recording()
    joints: Annotated[list[Joint], Field(min_length=1, max_length=2)]
    channels: Annotated[list[Channel], Field(min_length=1)]
    plant: Plant | None = None
    estimator: Estimator | None = None

    @property
    def period(self) -> float:
        return 1.0 / self.rig.loop_rate_hz

    @property
    def inputs(self) -> list[Channel]:
        return [c for c in self.channels if not c.is_output]

    @property
    def outputs(self) -> list[Channel]:
        return [c for c in self.channels if c.is_output]

    def joint_channel(self, joint: str, role: Role) -> Channel | None:
        for c in self.channels:
            if c.joint == joint and c.role == role:
                return c
        return None

    def home_rad(self) -> list[float]:
        return [math.radians(j.home_deg) for j in self.joints]

    @model_validator(mode="after")
    def _consistency(self) -> Profile:
        names = [c.name for c in self.channels]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate channel names: {', '.join(dup)}")
        joint_names = [j.name for j in self.joints]
        if len(set(joint_names)) != len(joint_names):
            raise ValueError("duplicate joint names")
        for c in self.channels:
            if c.joint is not None and c.joint not in joint_names:
                raise ValueError(
                    f"channel '{c.name}' names joint '{c.joint}'; joints are {joint_names}"
                )
        for j in joint_names:
            for role in JOINT_ROLES:
                n = sum(1 for c in self.channels if c.joint == j and c.role == role)
                if n == 0 and role in REQUIRED_JOINT_ROLES:
                    raise ValueError(f"joint '{j}' has no '{role}' channel (required)")
                if n > 1:
                    raise ValueError(f"joint '{j}' has {n} '{role}' channels (at most 1)")
        devices = self.backend.devices()
        for c in self.channels:
            if c.device is not None and c.device not in devices:
                raise ValueError(
                    f"channel '{c.name}' is on device '{c.device}', "
                    f"but the backend has only {list(devices)}"
                )
            if self.backend.kind == "composite" and c.device is None:
                raise ValueError(f"channel '{c.name}' needs a device in a composite backend")
        uses_sim = "sim" in devices
        if uses_sim and self.plant is None:
            raise ValueError("a simulated backend needs a [plant] section (true parameters)")
        if self.plant is not None:
            if len(self.plant.joints) != len(self.joints):
                raise ValueError(
                    f"[plant] describes {len(self.plant.joints)} joints, the rig has "
                    f"{len(self.joints)}"
                )
            if len(self.joints) == 1 and self.plant.coupling != 0.0:
                raise ValueError("plant.coupling (R12) must be 0 for a one-joint rig")
        return self

    def channel_device(self, c: Channel) -> DeviceName:
        if c.device is not None:
            return c.device
        kind = self.backend.kind
        assert kind != "composite"
        return kind
