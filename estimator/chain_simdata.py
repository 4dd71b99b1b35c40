"""A chain rig's experiment run offline (no service): the chain plant with its hydraulics
stepped under a tracking controller along a planned reference, read through sensors of a
declared grade. For the excavator's identification studies (bench/chain_identification.py)
while the service runs one- and two-joint rigs only.

The simulator is the adversary: it holds the true chain (which may differ from the profile's
nominal one: friction, transducer offsets) and hands out only the channels a rig would record
(resolver angles, chamber pressures, the valve commands); the truth goes to `ChainRun.truth`,
for comparison columns only.

Sensors (thesis §2.5, §4.4.3): each reading carries uniform noise within ± its declared
accuracy — the thesis's own noise model ("uniform random noise with maximum amplitudes within
the accuracy range") — on top of a fixed transducer offset if the truth has one, then the
converter's quantisation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from controller.feedforward_chain import ChainModel
from controller.plant.chain.model import Chain, Motor
from controller.plant.chain.plant import ChainPlant, equilibrium_state
from controller.plant.chain.profile import PSI, SensorGrade
from controller.trajectories import Trajectory


@dataclass(frozen=True)
class Tracking:
    """Per joint: valve volts per radian of error, and per rad/s of planned velocity."""

    p: np.ndarray
    ff: np.ndarray


def tracking_gains(chain: Chain, q: np.ndarray, bandwidth_hz: float = 1.0) -> Tracking:
    """Velocity feed-forward 1/(valve velocity gain) at q (one metering edge at half the
    supply: q̇ = k_v C_f v √(p_s/2) / T⁺, T⁺ the cap side's displacement per radian), and a
    proportional gain giving `bandwidth_hz` with it (p = 2π f · ff)."""
    plant = ChainPlant(chain)
    ff = np.zeros(chain.n)
    for i, j in enumerate(chain.joints):
        if j.valve is None or j.drive is None:
            continue
        if isinstance(j.drive, Motor):
            disp = j.drive.displacement * j.drive.gear_ratio
        else:
            lev = plant.jack_lengths(q)
            rows = [k for k, (ii, _) in enumerate(chain.jacks()) if ii == i]
            disp = sum(jk.area_cap * lev[k, 1] for k, jk in zip(rows, j.drive, strict=True))
        gain = j.valve.gain * np.mean(j.valve.flow_gains) * math.sqrt(chain.supply_pressure / 2)
        ff[i] = disp / gain
    return Tracking(2.0 * math.pi * bandwidth_hz * ff, ff)


@dataclass
class ChainRun:
    fs: float
    t: np.ndarray
    channels: dict[str, np.ndarray]  # "q" (N, n) rad, "p_cap"/"p_rod" (N, n) Pa, "v" (N, n) V
    reference: dict[str, np.ndarray]  # planned q, q̇, q̈
    truth: dict[str, np.ndarray] = field(default_factory=dict)  # comparison columns only


#: The identification run's tracking loop (the bench's and `rigctl predict`'s): a slow
#: proportional loop, 0.15 Hz closed-loop bandwidth, on the measured angles, with the plant
#: integrated in 5 substeps per sample.
TRACKING_BANDWIDTH_HZ = 0.15
TRACKING_SUBSTEPS = 5


def quantum(grade: SensorGrade) -> tuple[float, float]:
    """One converter step of the resolver (rad) and of the pressure channel (Pa)."""
    return (
        2 * math.pi / 2**grade.resolver_bits,
        grade.pressure_full_scale_psi * PSI / 2**grade.pressure_bits,
    )


def noise_sigma(grade: SensorGrade) -> tuple[float, float]:
    """1σ of one resolver reading (rad) and one pressure reading (Pa): uniform within ± the
    accuracy (σ = e/√3), the quantisation step's uniform error (q/√12) added in quadrature."""
    e_q = math.radians(grade.resolver_accuracy_deg)
    e_p = grade.pressure_accuracy_pa
    step_q, step_p = quantum(grade)
    return (
        math.sqrt(e_q**2 / 3 + step_q**2 / 12),
        math.sqrt(e_p**2 / 3 + step_p**2 / 12),
    )


def model_feedforward(chain: Chain, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> np.ndarray:
    """(N, n) valve volts of the model feed-forward along the reference: each joint's
    Newton–Euler torque as its equivalent piston's force, through the valve's steady-state
    inverse (`PlantModel.spool_steady`), over the valve gain."""
    m = ChainModel(chain, q[0])
    n = chain.n
    out = np.empty_like(q)
    tau = [0.0] * n
    for k in range(q.shape[0]):
        m.inverse_dynamics(q[k], qd[k], qdd[k], tau)
        for j in range(n):
            _, r = m.cylinder(j, float(q[k, j]))
            u = m.spool_steady(j, tau[j] / r, r * float(qd[k, j]))
            out[k, j] = u / m.kv[j]
    return out


def read_sensors(
    q: np.ndarray,
    p_cap: np.ndarray,
    p_rod: np.ndarray,
    grade: SensorGrade,
    rng: np.random.Generator,
    offsets: Sequence[tuple[float, float]] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Readings of the true angles and pressures (see the module docstring)."""
    e_q = math.radians(grade.resolver_accuracy_deg)
    e_p = grade.pressure_accuracy_pa
    step_q, step_p = quantum(grade)
    qm = q + rng.uniform(-e_q, e_q, q.shape)
    o = np.zeros((2, q.shape[1])) if offsets is None else np.asarray(offsets, dtype=float).T
    pc = p_cap + o[0] + rng.uniform(-e_p, e_p, q.shape)
    pr = p_rod + o[1] + rng.uniform(-e_p, e_p, q.shape)
    return (
        np.round(qm / step_q) * step_q,
        np.round(pc / step_p) * step_p,
        np.round(pr / step_p) * step_p,
    )


def run_experiment(
    truth: Chain,
    reference: Trajectory,
    grade: SensorGrade,
    *,
    nominal: Chain | None = None,
    fs: float = 500.0,
    nsub: int = 4,
    seed: int = 0,
    offsets: Sequence[tuple[float, float]] | None = None,
    bandwidth_hz: float = 1.0,
    p_low: float = 3.0e6,
    feedforward: bool = False,
) -> ChainRun:
    """Track `reference` on the true chain from rest at its start, closing the loop on the
    *measured* angles; gains from the `nominal` chain (the engineer's model). `feedforward`:
    the velocity feed-forward is replaced by the model feed-forward of the nominal chain
    (`controller.feedforward_chain`: its inverse dynamics through the valve's steady-state
    inverse), as the service's `pid_ff` law computes it."""
    rng = np.random.default_rng(seed)
    plant = ChainPlant(truth)
    n = truth.n
    q0 = reference.start()
    gains = tracking_gains(nominal or truth, q0, bandwidth_hz)
    x = equilibrium_state(plant, q0, p_low)
    N = round(reference.duration * fs)
    t = np.arange(N) / fs
    q_ref, qd_ref, qdd_ref = reference.sample(t)
    xs = np.empty((N, 5 * n))
    vs = np.empty((N, n))
    # The angle readings the loop closes on: noise drawn up front (the same draw
    # `read_sensors` makes for the recorded channel, so the two agree).
    e_q = math.radians(grade.resolver_accuracy_deg)
    step_q, _ = quantum(grade)
    q_noise = rng.uniform(-e_q, e_q, (N, n))
    v_ff = (
        model_feedforward(nominal or truth, q_ref, qd_ref, qdd_ref)
        if feedforward
        else gains.ff * qd_ref
    )
    q_read = np.empty((N, n))  # what the loop closed on is the recorded angle channel
    for k in range(N):
        xs[k] = x
        q_read[k] = qm = np.round((x[:n] + q_noise[k]) / step_q) * step_q
        v = gains.p * (q_ref[k] - qm) + v_ff[k]
        vs[k] = v
        plant.integrate(x, v, 1.0 / fs, nsub)
        if not np.all(np.isfinite(x)):
            raise RuntimeError(f"the simulation diverged at t = {t[k]:.3f} s")
    truth_cols = {
        "q": xs[:, :n], "qd": xs[:, n : 2 * n], "p_cap": xs[:, 2 * n : 3 * n],
        "p_rod": xs[:, 3 * n : 4 * n],
    }  # fmt: skip
    run = ChainRun(fs=fs, t=t, channels={"v": vs}, reference={"q": q_ref, "qd": qd_ref,
                   "qdd": qdd_ref}, truth=truth_cols)  # fmt: skip
    return reread(run, grade, rng, offsets, q_read=q_read)


def reread(
    run: ChainRun,
    grade: SensorGrade,
    rng: np.random.Generator,
    offsets: Sequence[tuple[float, float]] | None = None,
    q_read: np.ndarray | None = None,
) -> ChainRun:
    """The same true motion read by another draw of the sensors' noise (or another grade):
    the channels change, the truth does not. `q_read`: angle readings already drawn."""
    tr = run.truth
    qm, pc, pr = read_sensors(tr["q"], tr["p_cap"], tr["p_rod"], grade, rng, offsets)
    channels = dict(run.channels)
    channels.update(q=qm if q_read is None else q_read, p_cap=pc, p_rod=pr)
    return ChainRun(run.fs, run.t, channels, run.reference, run.truth)
