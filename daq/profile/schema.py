"""Schema of a hardware profile (`hw_profiles/*.toml`).

Every model forbids unknown keys and is strict about types (a string is never coerced into a
number): a wrong profile on a real rig can move a 700 kg arm the wrong way. Angles are written in
degrees in the file and converted to radians by the accessors that the loop uses.
"""

from __future__ import annotations

import itertools
import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from controller.plant.chain.profile import ChainProfileError, parse_chain
from controller.plant.oil import OilLaw

Identifier = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,31}$")]
Positive = Annotated[float, Field(gt=0.0)]
NonNegative = Annotated[float, Field(ge=0.0)]
#: Cf⁺⁺, Cf⁺⁻, Cf⁻⁺, Cf⁻⁻ in m²/(s·V·√Pa).
FlowGains = Annotated[list[Annotated[float, Field(gt=0.0)]], Field(min_length=4, max_length=4)]

Role = Literal[
    "pressure_cap",
    "pressure_rod",
    "lvdt",
    "potentiometer",
    "resolver",
    "valve",
    "temperature",
    "supply",
]
#: Roles of channels that belong to the rig, not to one joint.
RIG_ROLES: tuple[Role, ...] = ("temperature", "supply")
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


class Accuracy(Strict):
    """A sensor's accuracy class as a datasheet states it, read as 1σ: zero (offset, in the
    channel's engineering units) and span (relative gain error, 0.005 = 0.5 %)."""

    offset: NonNegative = 0.0
    gain: Annotated[float, Field(ge=0.0, le=0.2)] = 0.0


#: Roles whose transducer may carry a shunt calibration resistor (`Channel.shunt`).
SHUNT_ROLES: tuple[Role, ...] = ("pressure_cap", "pressure_rod", "supply")
#: Largest certificate 1σ (relative) a shunt may declare, and a simulated shunt's error.
SHUNT_SIGMA_MAX = 0.02
SHUNT_SIM_ERROR_MAX = 0.05
#: A chamber's shunt equivalent may reach this fraction of its joint's max_pressure_pa.
SHUNT_PRESSURE_FRACTION = 0.9


class Shunt(Strict):
    """A bridge transducer's shunt calibration (docs/operations.md, "Shunt calibration"): with
    the sensor at zero load the conditioner switches a precision resistor across one bridge
    arm, and the output steps by what the calibration certificate states as the shunt's
    equivalent pressure."""

    #: The certificate's shunt equivalent, in the channel's engineering units (Pa); > 0 and
    #: below the channel's valid_max (checked by `Channel`).
    equivalent_pa: Positive
    #: The certificate's relative 1σ of that equivalent (0.001 = 0.1 %), 0–0.02.
    sigma: Annotated[float, Field(ge=0.0, le=SHUNT_SIGMA_MAX)] = 0.001
    #: Digital line that closes the shunt relay, on the channel's device, named like the
    #: [hydraulics] power lines: "Dev1/port0/line2" on an NI card, "sim" on the simulator.
    line: Annotated[str, Field(min_length=1)]
    #: Simulator only: the true equivalent's relative difference from the certificate's
    #: (absent: drawn from N(0, sigma) by the simulator's seed and the channel's name).
    sim_error: Annotated[float, Field(ge=-SHUNT_SIM_ERROR_MAX, le=SHUNT_SIM_ERROR_MAX)] | None = (
        None
    )


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
    #: Simulated sensor's offset, gain error and drift against `scaling` (simulator only).
    sim_error: SensorError | None = None
    #: Output channels: the voltage that means "no flow" (null of the servo valve).
    null_volts: float = 0.0
    #: The sensor's datasheet accuracy class, until a calibration replaces it
    #: (daq/calibration): 1σ offset in engineering units and 1σ relative gain error.
    accuracy: Accuracy | None = None
    #: A pressure transducer's shunt calibration resistor (`Shunt`; pressure roles only).
    shunt: Shunt | None = None

    @property
    def is_output(self) -> bool:
        return self.role == "valve"

    @model_validator(mode="after")
    def _checks(self) -> Channel:
        if not self.valid_max > self.valid_min:
            raise ValueError(
                f"valid_max ({self.valid_max}) must be greater than valid_min ({self.valid_min})"
            )
        if self.role not in RIG_ROLES and self.joint is None:
            raise ValueError(f"a '{self.role}' channel needs a joint")
        if self.is_output:
            self._output_checks()
        if self.shunt is not None:
            self._shunt_checks(self.shunt)
        return self

    def _shunt_checks(self, shunt: Shunt) -> None:
        if self.role not in SHUNT_ROLES:
            raise ValueError(
                f"channel '{self.name}': shunt applies to pressure transducers only (roles "
                f"{', '.join(SHUNT_ROLES)}), not to a '{self.role}' channel (remove it)"
            )
        if not 0.0 < shunt.equivalent_pa < self.valid_max:
            raise ValueError(
                f"channel '{self.name}': shunt.equivalent_pa {shunt.equivalent_pa:g} is outside "
                f"the allowed range 0 < equivalent_pa < valid_max ({self.valid_max:g}): the "
                "shunted reading must stay inside the channel's valid range"
            )

    def _output_checks(self) -> None:
        """A valve command is volts at the D/A (the joints' `valve_max_v`, the controllers'
        gains and `null_volts` are in volts): keys the loop would not act on are refused rather
        than silently ignored."""
        sc = self.scaling
        if not (isinstance(sc, LinearScaling) and sc.gain == 1.0 and sc.offset == 0.0):
            raise ValueError(
                f"output channel '{self.name}': scaling must be linear with gain 1 and offset 0 "
                "(a valve command is volts at the converter; a current-output amplifier's "
                "scale belongs to its own setting, not to the profile)"
            )
        for key in ("sim_noise", "sim_error", "accuracy"):
            if getattr(self, key):
                raise ValueError(
                    f"output channel '{self.name}': '{key}' applies to input channels only "
                    "(remove it)"
                )


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
    #: Load-pressure (ΔP) feedback, V per kN of p_cap·A_cap − p_rod·A_rod; needs both pressure
    #: channels of the joint and its [plant] areas (controller/pressure_feedback.py).
    dp: NonNegative = 0.0
    #: High-pass corner of the ΔP feedback, Hz; 0 = not high-passed.
    dp_hp_hz: NonNegative = 0.0
    #: ΔP feedback of the service's hold only (ARMED between runs), V/kN, where the joint's
    #: gains have none (`dp` = 0): damps the limit cycle a run can leave the hold in (the
    #: validation's valve sine) without feeding the pressure transducers' noise into an
    #: identification run's valve command, as `dp` would (docs/controller.md).
    hold_dp: NonNegative = 0.0


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


# --------------------------------------------------------------------------- plant (known)


class PlantJoint(Strict):
    """What the rig engineer knows of one joint's cylinder, valve and link (DESIGN.md §1): the
    geometry the regressors need, and optional initial guesses of what identification finds."""

    area_cap: Positive  # A⁺, m²
    area_rod: Positive  # A⁻, m²
    #: Nominal dead volume V0 of each chamber (cylinder ports + the hoses you know of), m³.
    dead_volume: Positive
    stroke: Positive  # L, m
    pin_a: Positive  # m
    pin_b: Positive  # m
    closed_length: Positive  # ℓc, m
    theta0_deg: float
    valve_gain: Positive = 0.25  # k_v, V/V (valve datasheet)
    valve_tau_s: Positive = 1.5e-3
    spool_max: Positive = 1.4  # u_max, V
    #: Optional initial guesses (identified parameters): M_i kg·m², Fv_i N·m·s/rad, W_i kg·m,
    #: Cf⁺⁺, Cf⁺⁻, Cf⁻⁺, Cf⁻⁻ in m²/(s·V·√Pa).
    inertia: Positive | None = None
    viscous_friction: NonNegative | None = None
    gravity_moment: NonNegative | None = None
    flow_gains: FlowGains | None = None


class Oil(Strict):
    """`[plant.oil]`: the oil's datasheet, for parameters referred to one temperature
    (controller/plant/oil.py). Needs a `temperature` channel to act on."""

    #: Kinematic viscosity at 40 and 100 °C (ISO 3104), cSt: ISO VG46 ≈ 46 and 6.8.
    viscosity_40c_cst: Annotated[float, Field(gt=1.0, le=2000.0)]
    viscosity_100c_cst: Annotated[float, Field(gt=0.5, le=200.0)]
    #: Liquid bulk modulus' fall per kelvin, b ∝ e^(−k T) (mineral oil ≈ 0.0058, Tait).
    bulk_modulus_per_k: Annotated[float, Field(ge=0.0, le=0.05)] = 0.0058
    #: Where the referred parameters are stated (ISO VG grades are at 40 °C).
    reference_c: Annotated[float, Field(ge=-20.0, le=120.0)] = 40.0

    @model_validator(mode="after")
    def _thinner_when_hot(self) -> Oil:
        # The law's own check (controller.plant.oil), raised here so the error names the table.
        OilLaw.from_datasheet(self.viscosity_40c_cst, self.viscosity_100c_cst, 0.0)
        return self


class Plant(Strict):
    """The `[plant]` section: known geometry and supply (simulated or real rig alike)."""

    gravity: Positive = 9.81
    supply_pressure_pa: Positive
    #: Optional initial guesses: effective bulk modulus b (Pa) and R12 (kg·m², 2-DOF only).
    bulk_modulus_pa: Positive | None = None
    coupling: NonNegative | None = None
    joints: Annotated[list[PlantJoint], Field(min_length=1, max_length=2)]
    oil: Oil | None = None


# ------------------------------------------------------------------- plant (simulator's truth)


class Friction(Strict):
    """Piston friction beyond the model's viscous term (Lin 1994 eq. 20 + Stribeck), N and m/s:
    F = [F_C± + (F_S± − F_C±) e^(−(ṡ/v_s)²)] tanh(ṡ/v_ε) + f_v± ṡ."""

    coulomb_pos_n: NonNegative = 0.0  # extending (ṡ > 0)
    coulomb_neg_n: NonNegative = 0.0  # retracting
    #: Breakaway (static) friction; absent = the Coulomb level (no Stribeck bump).
    stiction_pos_n: NonNegative | None = None
    stiction_neg_n: NonNegative | None = None
    stribeck_velocity_m_s: Positive = 0.01
    #: Width of the smooth zero crossing; small values make the ODE stiff (RK4 at 0.25 ms).
    smoothing_velocity_m_s: Annotated[float, Field(ge=2.0e-4, le=0.1)] = 1.0e-3
    viscous_pos_n_s_per_m: NonNegative = 0.0
    viscous_neg_n_s_per_m: NonNegative = 0.0

    @model_validator(mode="after")
    def _stiction_at_least_coulomb(self) -> Friction:
        for side in ("pos", "neg"):
            fs = getattr(self, f"stiction_{side}_n")
            fc = getattr(self, f"coulomb_{side}_n")
            if fs is not None and fs < fc:
                raise ValueError(
                    f"stiction_{side}_n ({fs}) must be ≥ coulomb_{side}_n ({fc}): breakaway "
                    "friction is never below the sliding (Coulomb) level"
                )
        return self


class Leakage(Strict):
    """Laminar leakage at the reference temperature, m³/(s·Pa)."""

    internal_m3_s_per_pa: NonNegative = 0.0  # across the piston, ∝ p⁺ − p⁻
    external_m3_s_per_pa: NonNegative = 0.0  # each chamber to drain, ∝ p


class ValveImperfections(Strict):
    """Spool metering edges: null bias, lap and leakage at null (spool in LVDT volts)."""

    null_bias_v: Annotated[float, Field(ge=-0.5, le=0.5)] = 0.0
    null_shift_v_per_k: Annotated[float, Field(ge=-0.01, le=0.01)] = 0.0
    #: > 0 overlap (a dead band), < 0 underlap.
    lap_v: Annotated[float, Field(ge=-0.5, le=0.5)] = 0.0
    #: Datasheet's internal leakage P → T with the ports blocked, at the supply pressure, L/min.
    null_leakage_l_min: NonNegative = 0.0


class SimPlantJoint(Strict):
    """The simulator's true joint: the identified parameters' true values and the effects."""

    inertia: Positive  # M_i, kg·m²
    viscous_friction: NonNegative  # Fv_i, N·m·s/rad (at the reference temperature)
    gravity_moment: NonNegative  # W_i, kg·m
    flow_gains: FlowGains
    #: True dead volumes (hoses); absent = [plant]'s nominal dead_volume.
    dead_volume_cap: Positive | None = None
    dead_volume_rod: Positive | None = None
    initial_deg: float | None = None  # defaults to the joint's home
    friction: Friction | None = None
    leakage: Leakage | None = None
    valve: ValveImperfections | None = None


class Fluid(Strict):
    """Entrained air: effective bulk modulus falls at low pressure (Simscape Hydraulic Fluid)."""

    air_content: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0  # α, gas/liquid at 1 atm
    polytropic_index: Annotated[float, Field(ge=1.0, le=1.4)] = 1.4


class Thermal(Strict):
    """Oil temperature as a state: C Ṫ = Σ Δp·Q − C (T − T_amb)/τ (docs/simulator.md)."""

    initial_c: Annotated[float, Field(ge=-20.0, le=120.0)] = 25.0
    ambient_c: Annotated[float, Field(ge=-20.0, le=60.0)] = 20.0
    #: Where bulk_modulus_pa, viscous friction and leakage are given.
    reference_c: Annotated[float, Field(ge=-20.0, le=120.0)] = 40.0
    cooling_time_constant_s: Positive = 1800.0
    heat_capacity_j_per_k: Positive = 3.0e4
    bulk_modulus_per_k: Annotated[float, Field(ge=0.0, le=0.05)] = 0.0058
    walther_a: Positive = 9.32
    walther_b: Positive = 3.65
    #: A forced temperature ramp (a heater or cooler beyond the heat balance, for drift
    #: tests): T moves by ramp_c_per_s from ramp_start_s for ramp_duration_s of rig time.
    ramp_c_per_s: Annotated[float, Field(ge=-5.0, le=5.0)] = 0.0
    ramp_start_s: NonNegative = 0.0
    ramp_duration_s: NonNegative = 0.0


class SimSupply(Strict):
    """`[backend.sim.plant.supply]`: the simulated power unit. Its accumulator charges towards
    the stage's relief setting and discharges when the pump stops (first order); the true
    settings differ from the declared ones as a real station's do."""

    #: True relief settings of the low and high stages, Pa (absent: the declared pressures).
    low_relief_pa: Positive | None = None
    high_relief_pa: Positive | None = None
    #: Charging and discharging time constants, s (absent: a third of the declared ramps).
    charge_time_constant_s: Positive | None = None
    discharge_time_constant_s: Positive | None = None


class SimPlant(Strict):
    """`[backend.sim.plant]`: the simulator's true plant. Reaches nothing but the simulator and
    the truth (comparison) columns of identification tables and reports."""

    bulk_modulus_pa: Positive  # b of the liquid at reference temperature (no air)
    coupling: NonNegative = 0.0  # R12, kg·m² (2-DOF only)
    joints: Annotated[list[SimPlantJoint], Field(min_length=1, max_length=2)]
    fluid: Fluid | None = None
    thermal: Thermal | None = None
    supply: SimSupply | None = None


class SensorError(Strict):
    """A simulated sensor's error against its declared scaling: true reading =
    (1 + gain_error)·value + offset + drift_per_hour·t/3600 (engineering units)."""

    offset: float = 0.0
    gain_error: Annotated[float, Field(gt=-0.5, lt=0.5)] = 0.0
    drift_per_hour: float = 0.0


# --------------------------------------------------------------------------- service


class SimBackend(Strict):
    seed: Annotated[int, Field(ge=0)] = 0
    #: Faults injected from the start: "<channel>:<kind>[:<value>]", kind in rail_low,
    #: rail_high, stuck, noise_burst, stall_read, stuck_valve.
    faults: list[str] = []
    #: The simulator's true plant (required by a simulated backend).
    plant: SimPlant | None = None


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
    spin_us: Annotated[float, Field(ge=0.0, le=500.0)] = 150.0
    #: While the loop runs, keep the CPUs out of idle states slower to leave than this (µs),
    #: through /dev/cpu_dma_latency as cyclictest does (daq/loop/realtime.py); -1 = leave the
    #: kernel's default (saves power, costs wake-up latency).
    cpu_latency_us: Annotated[int, Field(ge=-1, le=100_000)] = 0


class Interlocks(Strict):
    channel_range: bool = True
    soft_limits: bool = True
    pressure: bool = True
    following_error: bool = True
    valve_limits: bool = True
    backend_error: bool = True
    #: Consecutive overruns that trip a fault; 0 disables the overrun interlock (both forms).
    overrun_limit: Annotated[int, Field(ge=0)] = 20
    #: A single cycle that ends this long after its deadline (ms) trips the overrun interlock
    #: while ARMED or RUNNING (the valves held one command that long); 0 disables this form.
    stall_ms: Annotated[float, Field(ge=0.0, le=1000.0)] = 20.0
    #: The loop runs in a process of its own (issue 15); when the service process's heartbeat
    #: is older than this (ms) — the service is frozen — the loop process nulls the valves,
    #: latches FAULT (PROCESS_LOST) and exits (a killed service is noticed at once, by the
    #: parent-death signal). The service beats every 50 ms from a Python thread, which a
    #: service thread holding the interpreter lock (an import, a numba compile) delays: 2 s
    #: leaves margin for that on a loaded machine and equals the unit's WatchdogSec. The loop's
    #: own interlocks keep running meanwhile.
    service_heartbeat_ms: Annotated[float, Field(ge=100.0, le=10000.0)] = 2000.0


class Hydraulics(Strict):
    """`[hydraulics]`: the station's hydraulic power (pump and service manifold) as the service
    switches it: off, low (a reduced-pressure stage for set-up, jogging and calibration, as
    station manifolds have) or high (the working pressure, [plant].supply_pressure_pa).
    Without this section the service does not switch power: it is implicitly on (high)."""

    #: Digital line that runs the pump / opens the manifold ("Dev1/port0/line0"; "sim").
    pump_line: str
    #: Digital line that selects the high-pressure stage; "" = the manifold has one stage
    #: (then low and high both mean "on" at [plant].supply_pressure_pa).
    high_line: str = ""
    #: Which device drives the lines in a composite backend (default: the backend's kind).
    device: DeviceName | None = None
    #: Nominal supply at the low stage, Pa (set-up and jogging).
    low_pressure_pa: Positive
    #: Time for the supply to build to a stage, and to decay after power off (≈ 3 time
    #: constants of the accumulator), s.
    ramp_up_s: Annotated[float, Field(gt=0.0, le=120.0)] = 2.0
    ramp_down_s: Annotated[float, Field(gt=0.0, le=600.0)] = 10.0
    #: With a `supply` channel: while ARMED or RUNNING a supply below this fraction of the low
    #: stage's pressure is a lost supply (FAULT, valves null).
    supply_min_fraction: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.7
    #: Arming needs the supply above this (higher) fraction of the low stage: the gap is the
    #: interlock's hysteresis, so an arm accepted while the supply still builds (one noisy
    #: sample over the trip level) is not tripped by the next sample.
    supply_arm_fraction: Annotated[float, Field(gt=0.0, le=1.0)] = 0.9
    #: `jog`: the fastest a joint may be jogged (deg/s), at low pressure only.
    jog_max_velocity_deg_s: Annotated[float, Field(gt=0.0, le=30.0)] = 5.0

    @model_validator(mode="after")
    def _arm_above_trip(self) -> Hydraulics:
        if not self.supply_arm_fraction > self.supply_min_fraction:
            raise ValueError(
                f"[hydraulics] supply_arm_fraction {self.supply_arm_fraction} must be above "
                f"supply_min_fraction {self.supply_min_fraction} (allowed: "
                f"supply_min_fraction < supply_arm_fraction <= 1): arming at the trip level "
                "trips on the next noisy sample"
            )
        return self


#: The endpoints a profile without [network] binds, and clients use without a profile.
DEFAULT_TELEMETRY = "tcp://127.0.0.1:5555"
DEFAULT_COMMANDS = "tcp://127.0.0.1:5556"
DEFAULT_ESTIMATES = "tcp://127.0.0.1:5557"


class Network(Strict):
    telemetry: str = DEFAULT_TELEMETRY
    commands: str = DEFAULT_COMMANDS
    estimates: str = DEFAULT_ESTIMATES
    #: Cycles per telemetry message (≤ 20 ms of data at the loop rate by default).
    telemetry_batch: Annotated[int, Field(ge=1, le=1000)] = 20
    #: Directory of CURVE keys; required when any endpoint binds beyond loopback.
    keys_dir: str | None = None


class Recording(Strict):
    directory: str = "runs"
    #: Stop recording (loudly) when the directory holds more than this, or the disk less.
    quota_bytes: Annotated[int, Field(ge=0)] = 0
    min_free_bytes: Annotated[int, Field(ge=0)] = 1_000_000_000


class CalibrationSection(Strict):
    """`[calibration]`: where the rig's transducer calibrations are kept (daq/station)."""

    #: Files go to `<directory>/<rig id>/`; relative to the service's working directory.
    directory: str = "calibration"


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
    #: Drift tracking (Kalman random walk, docs/estimator.md "RLS"): the 1σ change of every
    #: parameter per √s of rig time, % of its current estimate; 0 = constant parameters.
    random_walk_pct: Annotated[float, Field(ge=0.0, le=50.0)] = 0.0
    #: The same per model ("fluid") or parameter ("1/b") name; a parameter's entry wins over
    #: its model's, which wins over random_walk_pct.
    random_walk: dict[str, Annotated[float, Field(ge=0.0, le=50.0)]] = {}
    #: Causal FIR conditioning per reference model (Hz, odd tap count); None = built-in default.
    mech_cutoff_hz: Positive | None = None
    mech_taps: Annotated[int, Field(ge=3, le=2001)] | None = None
    fluid_cutoff_hz: Positive | None = None
    fluid_taps: Annotated[int, Field(ge=3, le=2001)] | None = None
    #: The Coulomb band v_ε (m/s) the online estimator runs in a model that has one (the
    #: real-rig family, estimator.models_lin; its range 0.2–20 mm/s); the batch chooses it
    #: from the data and its note says which value to put here. None = the model's own.
    coulomb_band_m_s: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    #: Each joint's valve null offset b₀ and lap d (spool V, d < 0 underlap) the online
    #: estimator runs in a model whose valve has them (the real-rig family; ±0.2 V); the batch
    #: chooses them from the data and its note says which values to put here. None = 0.
    valve_null_offset_v: list[Annotated[float, Field(ge=-0.2, le=0.2)]] | None = None
    valve_lap_v: list[Annotated[float, Field(ge=-0.2, le=0.2)]] | None = None
    #: Estimate messages per second on network.estimates.
    publish_hz: Annotated[float, Field(gt=0.0, le=100.0)] = 4.0
    #: Parameter file written on exit (and read as the prior on restart when `resume`).
    param_file: str = "params/estimate.toml"
    resume: bool = True


class Rig(Strict):
    id: Identifier
    description: str = ""
    loop_rate_hz: Annotated[float, Field(ge=10.0, le=10_000.0)] = 1000.0


#: The most joints a chain profile may have (the loop's arrays are sized per joint; six covers
#: an excavator with a tilt-rotator).
MAX_CHAIN_JOINTS = 6
#: Input roles the chain simulator measures (daq/backends/sim/chain_backend.py).
CHAIN_ROLES: tuple[Role, ...] = (*JOINT_ROLES, "valve", "temperature")


class Profile(Strict):
    rig: Rig
    realtime: Realtime = Realtime()
    backend: Backend = Backend()
    interlocks: Interlocks = Interlocks()
    network: Network = Network()
    recording: Recording = Recording()
    #: Without [chain] the planar plant of [plant] has 1 or 2 joints (`_planar_joints`).
    joints: Annotated[list[Joint], Field(min_length=1, max_length=MAX_CHAIN_JOINTS)]
    channels: Annotated[list[Channel], Field(min_length=1)]
    plant: Plant | None = None
    #: A serial-chain machine (docs/excavator.md): the simulator's plant, read and checked by
    #: `controller.plant.chain.profile.parse_chain` (`chain_model` gives it), in place of
    #: [plant] and [backend.sim.plant]; `sensors` are its sensor grades for prediction.
    chain: dict[str, Any] | None = None
    sensors: dict[str, Any] | None = None
    estimator: Estimator | None = None
    hydraulics: Hydraulics | None = None
    calibration: CalibrationSection = CalibrationSection()

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

    def dp_areas(self, joint: str) -> tuple[float, float] | None:
        """(A_cap, A_rod) of `joint` when load-pressure (ΔP) feedback is possible on it: both
        pressure channels and the [plant] areas; else None (`dp_refusal` says why)."""
        if self.dp_refusal(joint):
            return None
        assert self.plant is not None
        pj = self.plant.joints[[j.name for j in self.joints].index(joint)]
        return float(pj.area_cap), float(pj.area_rod)

    def dp_gain_refused(self, joint: str, gains: Any) -> tuple[str, float, str] | None:
        """The first ΔP gain set in `gains` (`dp` of the laws, `hold_dp` of the service's
        hold) that cannot act on `joint`: (name, value, why); None if none."""
        why = self.dp_refusal(joint)
        if not why:
            return None
        for key in ("dp", "hold_dp"):
            value = float(getattr(gains, key))
            if value > 0.0:
                return key, value, why
        return None

    def dp_refusal(self, joint: str) -> str:
        """Why ΔP feedback is impossible on `joint` ('' if it is possible)."""
        missing = [
            r for r in ("pressure_cap", "pressure_rod") if self.joint_channel(joint, r) is None
        ]
        if missing:
            return (
                f"ΔP feedback needs the joint's cap and rod pressures; the profile has no "
                f"{' or '.join(missing)} channel for joint '{joint}' (set dp = 0)"
            )
        if self.plant is None or len(self.plant.joints) != len(self.joints):
            return (
                "ΔP feedback needs the piston areas of the profile's [plant] section (set dp = 0)"
            )
        return ""

    @property
    def oil_temperature(self) -> Channel | None:
        """The oil's `temperature` channel (the first one, if several)."""
        return next((c for c in self.channels if c.role == "temperature"), None)

    @property
    def supply_channel(self) -> Channel | None:
        """The station's supply-pressure channel (`role = "supply"`), if it has one."""
        return next((c for c in self.channels if c.role == "supply"), None)

    def home_rad(self) -> list[float]:
        return [math.radians(j.home_deg) for j in self.joints]

    def chain_model(self) -> tuple[Any, Any, dict[str, Any]]:
        """(`Chain`, home in rad, sensor grades) of a [chain] profile (checked at load)."""
        if self.chain is None:
            raise ValueError(f"profile '{self.rig.id}' has no [chain] section")
        joints = [{"name": j.name, "home_deg": j.home_deg} for j in self.joints]
        return parse_chain(self.chain, self.sensors, joints, "profile")

    def _check_chain(self) -> None:
        """A [chain] profile: the chain is the plant, its joints are the service's, and every
        channel measures something the chain simulator has."""
        if self.plant is not None or (
            self.backend.sim is not None and self.backend.sim.plant is not None
        ):
            raise ValueError(
                "a [chain] profile describes its plant in [chain]: remove [plant] and "
                "[backend.sim.plant]"
            )
        if self.backend.kind != "sim":
            raise ValueError(
                f"a [chain] profile runs on the simulated backend only (kind = 'sim'), not "
                f"'{self.backend.kind}': the estimator's known geometry of a real chain is "
                "not written yet"
            )
        if self.hydraulics is not None:
            raise ValueError(
                "a [chain] profile has no [hydraulics]: the simulated power unit drives the "
                "planar plant's supply only; the chain runs at chain.supply_pressure_pa"
            )
        try:
            chain, _, _ = self.chain_model()
        except ChainProfileError as exc:
            raise ValueError(str(exc).removeprefix("profile: ")) from None
        for c in self.channels:
            if c.role not in CHAIN_ROLES:
                raise ValueError(
                    f"channel '{c.name}': role '{c.role}' is not simulated on a chain; "
                    f"allowed: {', '.join(CHAIN_ROLES)}"
                )
            if c.role == "potentiometer":
                j = chain.joints[chain.names.index(c.joint)]
                if not isinstance(j.drive, tuple):
                    raise ValueError(
                        f"channel '{c.name}': joint '{c.joint}' has no jack (a motor or no "
                        "drive), so no piston for a potentiometer to measure"
                    )
        for j in chain.joints:
            if j.valve is None:
                raise ValueError(
                    f"chain joint '{j.link.name}' has no [chain.joints.valve]: every joint "
                    "of the service has a valve channel to drive"
                )

    @model_validator(mode="after")
    def _consistency(self) -> Profile:
        if self.chain is not None:
            self._check_chain()
        elif len(self.joints) > 2:
            raise ValueError(
                f"{len(self.joints)} joints: a profile without [chain] describes the planar "
                "plant of [plant], which has 1 or 2 joints; more joints need a [chain]"
            )
        if self.sensors is not None and self.chain is None:
            raise ValueError("[sensors] are a [chain] profile's sensor grades: add [chain]")
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
        if sum(1 for c in self.channels if c.role == "supply") > 1:
            raise ValueError("at most one 'supply' channel")
        devices = self.backend.devices()
        hyd = self.hydraulics
        if hyd is not None:
            if hyd.device is not None and hyd.device not in devices:
                raise ValueError(
                    f"hydraulics.device '{hyd.device}' is not one of the backend's {list(devices)}"
                )
            if self.backend.kind == "composite" and hyd.device is None:
                raise ValueError("hydraulics needs a device in a composite backend")
            if self.plant is not None and hyd.low_pressure_pa > self.plant.supply_pressure_pa:
                raise ValueError(
                    f"hydraulics.low_pressure_pa ({hyd.low_pressure_pa}) must not exceed "
                    f"plant.supply_pressure_pa ({self.plant.supply_pressure_pa}), the high stage"
                )
        for c in self.channels:
            if c.device is not None and c.device not in devices:
                raise ValueError(
                    f"channel '{c.name}' is on device '{c.device}', "
                    f"but the backend has only {list(devices)}"
                )
            if self.backend.kind == "composite" and c.device is None:
                raise ValueError(f"channel '{c.name}' needs a device in a composite backend")
        uses_sim = "sim" in devices and self.chain is None  # a chain is its own plant
        truth = self.backend.sim.plant if self.backend.sim is not None else None
        if uses_sim and self.plant is None:
            raise ValueError("a simulated backend needs a [plant] section (known geometry)")
        if uses_sim and truth is None:
            raise ValueError("a simulated backend needs a [backend.sim.plant] section (its truth)")
        for label, plant in (("plant", self.plant), ("backend.sim.plant", truth)):
            if plant is None:
                continue
            if len(plant.joints) != len(self.joints):
                raise ValueError(
                    f"[{label}] describes {len(plant.joints)} joints, the rig has "
                    f"{len(self.joints)}"
                )
            if len(self.joints) == 1 and plant.coupling:
                raise ValueError(f"{label}.coupling (R12) must be 0 for a one-joint rig")
        if truth is not None and self.plant is not None:
            for i, (pj, tj) in enumerate(zip(self.plant.joints, truth.joints, strict=True)):
                bias = tj.valve.null_bias_v if tj.valve is not None else 0.0
                if abs(bias) >= pj.spool_max:
                    raise ValueError(
                        f"backend.sim.plant.joints[{i}].valve.null_bias_v ({bias}) must be "
                        f"inside the spool travel ±{pj.spool_max} V"
                    )
        self._check_shunts()
        for jt in self.joints:
            refused = self.dp_gain_refused(jt.name, jt.pid)
            if refused is not None:
                key, value, why = refused
                raise ValueError(f"joints '{jt.name}'.pid.{key} = {value}: {why}")
        return self

    def _check_shunts(self) -> None:
        """A chamber's shunted reading stays below its pressure interlock; a relay line is
        driven for one purpose (one shunt, not a power line) on a hardware device."""
        limits = {j.name: j.limits.max_pressure_pa for j in self.joints}
        used: dict[tuple[str, str], str] = {}
        hyd = self.hydraulics
        if hyd is not None:
            owner = hyd.device or self.backend.kind
            for what in ("pump_line", "high_line"):
                if getattr(hyd, what):
                    used[(owner, getattr(hyd, what))] = f"hydraulics.{what}"
        for c in self.channels:
            if c.shunt is None:
                continue
            if c.joint is not None and c.role != "supply":
                top = SHUNT_PRESSURE_FRACTION * limits[c.joint]
                if c.shunt.equivalent_pa > top:
                    raise ValueError(
                        f"channel '{c.name}': shunt.equivalent_pa {c.shunt.equivalent_pa:g} is "
                        f"above {SHUNT_PRESSURE_FRACTION:g} × joint '{c.joint}''s max_pressure_pa "
                        f"({top:g}): the shunted reading would trip the pressure interlock"
                    )
            device = c.device or self.backend.kind
            if device == "sim":
                continue
            key = (device, c.shunt.line)
            if key in used:
                raise ValueError(
                    f"channel '{c.name}': shunt.line '{c.shunt.line}' is also {used[key]}: "
                    "each shunt relay needs a digital line of its own"
                )
            used[key] = f"channel '{c.name}''s shunt.line"

    def channel_device(self, c: Channel) -> DeviceName:
        if c.device is not None:
            return c.device
        kind = self.backend.kind
        assert kind != "composite"
        return kind
