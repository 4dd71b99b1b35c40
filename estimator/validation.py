"""Model validation on data the model was not fitted to (DESIGN.md §2.5; Sakai Figs. 6–10,
Table IV; thesis and MFS paper for torque residuals).

The identified model — the shared physics with the identified parameters — is simulated from
the measured initial state, driven by the *measured* spool positions (the fluid model's input,
Sakai's convention), and compared with the measured outputs by FIT ratio. Holding the spool at
its measured value is exact in the shared dynamics: with v = u/k_v the spool lag has u̇ = 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.signal import butter, sosfiltfilt

from controller.plant import dynamics
from controller.plant.params import NE_GLOBAL, NE_JOINT, PlantEffects, PlantParams
from estimator.observation import derivative

#: Outputs compared, as (label, state block): block k of the state [q, q̇, p⁺, p⁻, u].
OUTPUTS = (("q", 0), ("p_cap", 2), ("p_rod", 3))


def fit_ratio(y: np.ndarray, y_hat: np.ndarray) -> float:
    """FIT = 100 (1 − ‖y − ŷ‖ / ‖y − mean(y)‖)  (Sakai Table IV)."""
    y = np.asarray(y, dtype=float)
    y_hat = np.asarray(y_hat, dtype=float)
    spread = np.linalg.norm(y - y.mean())
    if spread == 0.0:
        raise ValueError("FIT is undefined for a constant output")
    return float(100.0 * (1.0 - np.linalg.norm(y - y_hat) / spread))


def fit_ratios(
    measured: dict[str, np.ndarray], simulated: dict[str, np.ndarray], n: int, start: int = 0
) -> tuple[dict[str, float], list[str]]:
    """FIT per output and joint ("q1", "p_cap2", …) from row `start` on, and a note for each
    output that is constant there (no FIT)."""
    fit: dict[str, float] = {}
    notes: list[str] = []
    for label, y in measured.items():
        for i in range(n):
            key = f"{label}{i + 1}"
            try:
                fit[key] = fit_ratio(y[start:, i], simulated[label][start:, i])
            except ValueError:
                notes.append(f"{key}: constant in this run, no FIT")
    return fit, notes


@dataclass
class Measured:
    """A run's measured signals per joint, arrays (N, n): what validation needs."""

    t: np.ndarray
    q: np.ndarray
    p_cap: np.ndarray
    p_rod: np.ndarray
    spool: np.ndarray
    piston: np.ndarray | None = None

    def head(self, rows: int) -> Measured:
        """The first `rows` rows of every signal (views)."""
        return Measured(
            self.t[:rows],
            self.q[:rows],
            self.p_cap[:rows],
            self.p_rod[:rows],
            self.spool[:rows],
            None if self.piston is None else self.piston[:rows],
        )


@dataclass
class ValidationResult:
    t: np.ndarray
    measured: dict[str, np.ndarray]
    simulated: dict[str, np.ndarray]
    fit: dict[str, float]
    torque_measured: np.ndarray
    torque_predicted: np.ndarray
    torque_rms: list[float]
    notes: list[str] = field(default_factory=list)


def simulate(
    params: PlantParams,
    period: float,
    x0: np.ndarray,
    spool: np.ndarray,
    effects: PlantEffects | None = None,
) -> np.ndarray:
    """Open-loop simulation with the spool held at its measured value each period: (N, 5n).
    `effects`: the terms of a model family beyond the reference one (estimator.models_lin),
    integrated by the simulator's own code (controller.plant.dynamics.integrate_fx)."""
    n = params.n
    P = params.pack()
    E = None if effects is None else effects.pack(params)
    x = np.array(x0, dtype=float)
    work = np.zeros((5, 5 * n))
    out = np.empty((spool.shape[0], 5 * n))
    v = np.zeros(n)
    for k in range(spool.shape[0]):
        out[k] = x
        x[4 * n : 5 * n] = spool[k]
        np.divide(spool[k], params.valve_gain, out=v)
        if E is None:
            dynamics.integrate(x, v, P, period, 4, work)
        else:
            dynamics.integrate_fx(x, v, P, E, period, 4, work)
    return out


def _friction_torque(
    params: PlantParams, effects: PlantEffects, q: np.ndarray, qd: np.ndarray
) -> np.ndarray:
    """r_i F(ṡ_i) per sample, the simulator's piston friction (dynamics.friction_force)."""
    E = effects.pack(params)
    _, r = dynamics.cylinder(params, q)
    sd = r * qd
    out = np.empty_like(sd)
    for i in range(params.n):
        e = NE_GLOBAL + NE_JOINT * i
        out[:, i] = [dynamics.friction_force(E, e, v) for v in sd[:, i]]
    return r * out


def smooth_derivatives(
    x: np.ndarray, period: float, cutoff_hz: float = 20.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zero-phase Butterworth (4th order, both directions), then the batch estimator's
    five-point differences: the offline derivative estimate of Gautier et al. §II."""
    xf = sosfiltfilt(lowpass(period, cutoff_hz), x, axis=0)
    xd = derivative(xf, period)
    return xf, xd, derivative(xd, period)


def lowpass(period: float, cutoff_hz: float = 20.0) -> np.ndarray:
    return butter(4, cutoff_hz, fs=1.0 / period, output="sos")


def validate(
    params: PlantParams,
    period: float,
    m: Measured,
    window_s: float = 10.0,
    effects: PlantEffects | None = None,
) -> ValidationResult:
    """Simulate `params` on the measured inputs of `m` and compare (FIT, torque RMS).

    The simulation restarts from the measured state every `window_s` seconds (0 = never). An
    arm driven by its valves integrates flow: over a long record a flow-gain error of 0.1 %
    accumulates into a position drift that says more about the record's length than about the
    model. A finite horizon keeps the FIT a statement about the model (Sakai validates on
    records of seconds).
    """
    n = params.n
    qf, qd, qdd = smooth_derivatives(m.q, period)
    total = m.q.shape[0]
    step = total if window_s <= 0 else max(1, round(window_s / period))
    states = np.empty((total, 5 * n))
    for k0 in range(0, total, step):
        k1 = min(total, k0 + step)
        x0 = np.concatenate([m.q[k0], qd[k0], m.p_cap[k0], m.p_rod[k0], m.spool[k0]])
        states[k0:k1] = simulate(params, period, x0, m.spool[k0:k1], effects)
    measured = {"q": m.q, "p_cap": m.p_cap, "p_rod": m.p_rod}
    simulated = {label: states[:, k * n : (k + 1) * n] for label, k in OUTPUTS}
    if m.piston is not None:
        measured["s"] = m.piston
        simulated["s"], _ = dynamics.cylinder(params, simulated["q"])
    fit, notes = fit_ratios(measured, simulated, n)
    # Torques: measured through the moment arm vs the inverse model on filtered kinematics.
    sos = lowpass(period)
    pcf = sosfiltfilt(sos, m.p_cap, axis=0)
    prf = sosfiltfilt(sos, m.p_rod, axis=0)
    tau_meas = dynamics.torque_from_pressures(params, qf, pcf, prf)
    tau_pred = dynamics.inverse_dynamics(params, qf, qd, qdd)
    if effects is not None:
        tau_pred += _friction_torque(params, effects, qf, qd)
    rms = [float(np.sqrt(np.mean((tau_meas[:, i] - tau_pred[:, i]) ** 2))) for i in range(n)]
    return ValidationResult(m.t, measured, simulated, fit, tau_meas, tau_pred, rms, notes)
