"""Identification of a chain's base parameters from its recorded channels (resolver angles and
chamber pressures only), and the σ its sensors' declared noise gives them (thesis §4.3.5,
§4.4.3; Gautier's IDIM-WLS).

Observation, as the 2-DOF batch does it (`estimator.observation`):
  1. zero-phase Butterworth low-pass (`sosfiltfilt`, 4th order at `cutoff_hz`) of the angles,
     five-point central differences for q̇, q̈ (the regressor Y(q, q̇, q̈) is computed from
     these);
  2. the measured torque τ_m = T⁺(q) p⁺ − T⁻(q) p⁻ is formed on the *raw* samples and then
     filtered by the same filter (exact parallel filtering: it holds no derivative);
  3. parallel decimation by n_d of Y and τ_m (its low-pass at `parallel_hz`, below the first
     stage's corner: `DEFAULT_CUTOFF_HZ` says why), ends trimmed where the filters ring.
Then y = W_b θ_b by least squares, each joint's equation weighted by the inverse variance of
the torque its pressure transducers' noise gives (so a boom's kN and a bucket's hundreds of N
count as their noise says, not as their units).

σ of the estimate (`propagated_sigma`): the declared sensor noise pushed through the same
pipeline, linearised about the signals: a pressure reading's noise enters τ_m through T±(q),
an angle's enters T±(q) and, through the filter and the differences, Y(q, q̇, q̈)·θ (its
sensitivities G_k = ∂(Yθ)/∂q⁽ᵏ⁾ by central differences). The estimate moves by
δθ = (ΦᵀWΦ)⁻¹ΦᵀW δe, a linear map of the noise; its covariance is estimated from `draws`
independent draws of the declared noise (uniform within ± the accuracy, as the simulator and
the thesis draw it). Along the *planned* reference (with the engineer's nominal θ) this is the
prediction `rigctl predict` prints before anything moves; along a recorded run it is that
run's σ.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np
from scipy.signal import butter, decimate, sosfiltfilt

from controller.plant.chain.profile import PSI, SensorGrade
from estimator.base_params import BaseParameters
from estimator.chain_regressor import ChainRegressor
from estimator.observation import derivative

#: Conditioning of the chain's observation (Hz at the recording's rate), in two stages. The
#: angles are low-passed at `DEFAULT_CUTOFF_HZ` before the differences: low enough that the
#: resolvers' noise, which reaches q̈ as (2π f)², stays small, high enough above the
#: experiments' highest harmonic (0.5 Hz: 5 harmonics of 0.1 Hz) that the filter does not
#: bend the motion inside the regressor's nonlinear terms (at 1 Hz it does: a noise-free run
#: at 1 kHz then puts 26 of 62 base parameters outside the noisy run's ±3σ). The regressor's
#: columns and the torque are then low-passed alike at `DEFAULT_PARALLEL_HZ` by the
#: decimation: linear in the columns, this parallel filter bends nothing, and it removes the
#: regressor's noise above it, which is what biases least squares (errors in variables). At
#: 4 Hz / 4 Hz (one stage, before) the ±0.1° resolvers put 18–27 of 62 base parameters
#: within ±3σ on 20 of 20 seeds; at 2 Hz / 1 Hz 54 of 62, and 99.3 % of the parameter-runs
#: (56 and 99.5 % with the ends trimmed by 8/f, `Conditioning.trim`).
#: `python bench/chain_identification.py --cutoff-hz F --parallel-hz F`.
DEFAULT_CUTOFF_HZ = 2.0
DEFAULT_PARALLEL_HZ: float | None = 1.0


@dataclass(frozen=True)
class Conditioning:
    fs: float
    cutoff_hz: float = DEFAULT_CUTOFF_HZ
    decimation: int | None = None  # None: the largest keeping the corner (0.4 fs / f_p)
    #: The parallel filter's corner f_p (the decimation's low-pass, applied alike to the
    #: regressor's columns and the torque): None = cutoff_hz (one stage).
    parallel_hz: float | None = DEFAULT_PARALLEL_HZ

    def __post_init__(self) -> None:
        for name in ("cutoff_hz", "parallel_hz"):
            f = getattr(self, name)
            if f is not None and not 0.0 < f < self.fs / 2:
                raise ValueError(f"{name} must be in (0, {self.fs / 2}), got {f}")
        if self.decimation is not None and self.decimation < 1:
            raise ValueError(f"decimation must be ≥ 1, got {self.decimation}")

    @property
    def f_p(self) -> float:
        return self.parallel_hz or self.cutoff_hz

    @property
    def nd(self) -> int:
        return self.decimation or max(1, int(0.4 * self.fs / self.f_p))

    @property
    def trim(self) -> int:
        """Decimated samples dropped at each end: 8/f of the slower filter. The zero-phase
        filters' start-up reaches past 4/f: an online window dropping 4/f had equations up to
        3.8σ from the batch's on the same rows, and on the bench 8/f against 4/f gave 56
        against 54 of 62 parameters within ±3σ on every seed, 99.5 against 99.3 % of the
        parameter-runs, and the prediction within 1.5× for 60 against 57."""
        return max(1, int(8.0 / min(self.cutoff_hz, self.f_p) * self.fs) // self.nd)

    def sos(self) -> np.ndarray:
        return np.asarray(butter(4, self.cutoff_hz, fs=self.fs, output="sos"))

    def smooth(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        xf = sosfiltfilt(self.sos(), x, axis=0)
        d1 = derivative(xf, 1.0 / self.fs)
        return xf, d1, derivative(d1, 1.0 / self.fs)

    def filter(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(sosfiltfilt(self.sos(), x, axis=0))

    def check_length(self, n: int) -> None:
        """ValueError unless n samples leave decimated equations after the trim at both ends."""
        need = (2 * self.trim + 1) * self.nd
        if n < need:
            raise ValueError(
                f"{n / self.fs:.1f} s of data leave no equation: the observation's filters "
                f"start up for {self.trim * self.nd / self.fs:.1f} s at each end, so a run needs "
                f"more than {need / self.fs:.1f} s"
            )

    def decimate(self, x: np.ndarray) -> np.ndarray:
        """Low-pass and keep 1 in n_d along axis 0, ends trimmed."""
        if self.nd > 1:
            x = decimate(x, self.nd, axis=0, zero_phase=True)
        return np.asarray(x[self.trim : -self.trim])


def pressure_sigma(grade: SensorGrade) -> tuple[float, float]:
    """1σ of one angle (rad) and one pressure (Pa) reading: uniform within ± the accuracy,
    with the converter's quantisation in quadrature."""
    e_q = math.radians(grade.resolver_accuracy_deg)
    step_q = 2 * math.pi / 2**grade.resolver_bits
    e_p = grade.pressure_accuracy_pa
    step_p = grade.pressure_full_scale_psi * PSI / 2**grade.pressure_bits
    return math.sqrt(e_q**2 / 3 + step_q**2 / 12), math.sqrt(e_p**2 / 3 + step_p**2 / 12)


@dataclass(frozen=True)
class ChannelNoise:
    """Each joint's white reading noise, 1σ (angle rad, cap and rod pressure Pa; (n,) each),
    as measured on a recording (`estimator.chain_batch.measured_noise`) rather than declared
    by a grade; drawn normal where a grade's is drawn uniform within ± its accuracy."""

    q: np.ndarray
    p_cap: np.ndarray
    p_rod: np.ndarray


Noise = SensorGrade | ChannelNoise


def joint_weights(reg: ChainRegressor, q: np.ndarray, noise: Noise) -> np.ndarray:
    """Per joint, 1 / the mean variance of τ_m from the pressure noise: T⁺²σ₊² + T⁻²σ₋²."""
    tc, tr = reg.torque_per_pressure(q)
    if isinstance(noise, ChannelNoise):
        var = np.mean(tc**2 * noise.p_cap**2 + tr**2 * noise.p_rod**2, axis=0)
    else:
        _, sp = pressure_sigma(noise)
        var = np.mean(tc**2 + tr**2, axis=0) * sp**2
    return 1.0 / np.where(var > 0, var, np.inf)


def _draw(noise: Noise, rng: np.random.Generator, shape: tuple[int, int]) -> tuple[np.ndarray, ...]:
    """One draw of the angle, cap and rod pressure noise (each `shape`)."""
    if isinstance(noise, ChannelNoise):
        return tuple(rng.normal(0.0, 1.0, shape) * s for s in (noise.q, noise.p_cap, noise.p_rod))
    e_q = math.radians(noise.resolver_accuracy_deg)
    e_p = noise.pressure_accuracy_pa
    return (
        rng.uniform(-e_q, e_q, shape),
        rng.uniform(-e_p, e_p, shape),
        rng.uniform(-e_p, e_p, shape),
    )


@dataclass
class Observation:
    Phi: np.ndarray  # (M, n, r) base-parameter regressor, decimated
    y: np.ndarray  # (M, n) measured torque, decimated
    q: np.ndarray  # (N, n) filtered angle, q̇, q̈ at the recording's rate
    qd: np.ndarray
    qdd: np.ndarray


def base_matrix(
    reg: ChainRegressor,
    bp: BaseParameters,
    q: np.ndarray,
    qd: np.ndarray,
    qdd: np.ndarray,
    chunk: int = 2000,
) -> np.ndarray:
    """Y_b (N, n, r), evaluated in chunks (the full regressor has every physical column)."""
    out = np.empty((q.shape[0], q.shape[1], bp.rank))
    for a in range(0, q.shape[0], chunk):
        s = slice(a, a + chunk)
        out[s] = bp.reduce(reg.matrix(q[s], qd[s], qdd[s]))
    return out


def observe(
    reg: ChainRegressor,
    bp: BaseParameters,
    q: np.ndarray,
    p_cap: np.ndarray,
    p_rod: np.ndarray,
    cond: Conditioning,
) -> Observation:
    """Steps 1–3 of the module docstring on raw channels (each (N, n))."""
    cond.check_length(q.shape[0])
    qf, qd, qdd = cond.smooth(q)
    tau = cond.filter(reg.measured_torque(q, p_cap, p_rod))
    Y = base_matrix(reg, bp, qf, qd, qdd)
    M, n, r = Y.shape
    Phi = cond.decimate(Y.reshape(M, n * r)).reshape(-1, n, r)
    return Observation(Phi, cond.decimate(tau), qf, qd, qdd)


#: Directions of the column-normalised regressor below this fraction of its largest singular
#: value are left out of the solve: the run does not excite them.
RCOND = 1e-10


def unexcited(Phi: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(r,) True for a parameter the run leaves unexcited: it has a component along a
    direction of the (weighted, column-normalised) regressor below RCOND — its σ is ∞."""
    A = (Phi * np.sqrt(w)[None, :, None]).reshape(-1, Phi.shape[-1])
    cs = np.linalg.norm(A, axis=0)
    zero = cs == 0
    A = A / np.where(zero, 1.0, cs)
    _, sv, vt = np.linalg.svd(A, full_matrices=False)
    weak = vt[sv < RCOND * sv[0]]
    return zero | (np.abs(weak).max(axis=0, initial=0.0) > 1e-6)


def solve(Phi: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted LS θ and the map G = (ΦᵀWΦ)⁻¹ΦᵀW (r, M·n) that takes δy to δθ (minimum norm
    where the run leaves directions unexcited: see `unexcited`)."""
    s = np.sqrt(w)[None, :]
    A = (Phi * s[:, :, None]).reshape(-1, Phi.shape[-1])
    b = (y * s).reshape(-1)
    # Column scaling: the parameters' units span 1e-3 (offsets' columns) to 1e7.
    cs = np.linalg.norm(A, axis=0)
    cs = np.where(cs > 0, cs, 1.0)
    pinv = np.linalg.pinv(A / cs, rcond=RCOND) / cs[:, None]
    G = pinv * np.broadcast_to(s, y.shape).reshape(-1)[None, :]
    return pinv @ b, G


def body_rows(reg: ChainRegressor, bp: BaseParameters) -> np.ndarray:
    """(r,) True for a base parameter that combines only the bodies' barycentric parameters
    (no friction, no transducer offset): the ones a CAD model gives a value for."""
    return ~np.any(np.abs(bp.matrix()[:, reg.n_body :]) > 0.0, axis=1)


def held_bodies(reg: ChainRegressor, bp: BaseParameters, flagged: Collection[str]) -> np.ndarray:
    """(r,) True for a base parameter a prediction holds at the CAD (profile's) values: a
    bodies-only one (`body_rows`) that the run does not resolve (its name among `flagged`)."""
    return body_rows(reg, bp) & np.isin(bp.base_names, list(flagged))


def solve_fixed(
    Phi: np.ndarray, y: np.ndarray, w: np.ndarray, prior: np.ndarray, fixed: np.ndarray
) -> np.ndarray:
    """`solve`'s θ with the parameters `fixed` held at `prior`: their part of every equation
    taken out first, the others fitted to what is left (a constrained least squares)."""
    theta = np.asarray(prior, dtype=float).copy()
    rest = y - np.einsum("mnr,r->mn", Phi[..., fixed], theta[fixed])
    theta[~fixed], _ = solve(Phi[..., ~fixed], rest, w)
    return theta


@dataclass
class ChainFit:
    names: list[str]
    definitions: list[str]
    theta: np.ndarray
    sigma: np.ndarray  # from the declared noise propagated along this run (1σ; ∞: unexcited)
    rms_residual: np.ndarray  # per joint, N·m or N·m-equivalent
    #: The equations it was fitted to and their weights (`solve_fixed` refits on them).
    observation: Observation | None = field(default=None, repr=False)
    weights: np.ndarray | None = field(default=None, repr=False)


def identify(
    reg: ChainRegressor,
    bp: BaseParameters,
    channels: dict[str, np.ndarray],
    grade: Noise,
    cond: Conditioning,
    draws: int = 60,
    seed: int = 0,
) -> ChainFit:
    """Base parameters from the channels "q", "p_cap", "p_rod" (no truth)."""
    obs = observe(reg, bp, channels["q"], channels["p_cap"], channels["p_rod"], cond)
    w = joint_weights(reg, channels["q"], grade)
    theta, _ = solve(obs.Phi, obs.y, w)
    res = obs.y - np.einsum("mnr,r->mn", obs.Phi, theta)
    sigma = propagated_sigma(
        reg, bp, theta, obs.q, obs.qd, obs.qdd, channels["p_cap"], channels["p_rod"], grade,
        cond, draws=draws, seed=seed,
    )  # fmt: skip
    return ChainFit(
        bp.base_names, bp.definitions(), theta, sigma, np.sqrt(np.mean(res**2, axis=0)), obs, w
    )


def _sensitivities(
    reg: ChainRegressor, bp: BaseParameters, theta: np.ndarray, q: np.ndarray,
    qd: np.ndarray, qdd: np.ndarray, stride: int,
) -> np.ndarray:  # fmt: skip
    """G (N, 3, n, n): ∂τ_i/∂x_j for x = q, q̇, q̈ of τ = Y_b θ_b, by central differences on
    every `stride`-th sample, linearly interpolated between (they vary at the motion's pace)."""
    N, n = q.shape
    idx = np.unique(np.r_[np.arange(0, N, stride), N - 1])
    base = [q[idx], qd[idx], qdd[idx]]
    out = np.zeros((len(idx), 3, n, n))
    steps = (1e-6, 1e-5, 1e-4)
    for k in range(3):
        for j in range(n):
            h = steps[k]
            plus = [b.copy() for b in base]
            minus = [b.copy() for b in base]
            plus[k][:, j] += h
            minus[k][:, j] -= h
            tp = bp.reduce(reg.matrix(*plus)) @ theta
            tm = bp.reduce(reg.matrix(*minus)) @ theta
            out[:, k, :, j] = (tp - tm) / (2 * h)
    t = np.arange(N)
    full = np.empty((N, 3, n, n))
    flat = out.reshape(len(idx), -1)
    for c in range(flat.shape[1]):
        full.reshape(N, -1)[:, c] = np.interp(t, idx, flat[:, c])
    return full


def propagated_sigma(
    reg: ChainRegressor,
    bp: BaseParameters,
    theta: np.ndarray,
    q: np.ndarray,
    qd: np.ndarray,
    qdd: np.ndarray,
    p_cap: np.ndarray,
    p_rod: np.ndarray,
    grade: Noise,
    cond: Conditioning,
    draws: int = 60,
    seed: int = 0,
) -> np.ndarray:
    """1σ of every base parameter from the sensors' noise, a grade's declared or a recording's
    measured (module docstring), about the noise-free signals q, q̇, q̈ (N, n) and chamber
    pressures (N, n)."""
    N, n = q.shape
    cond.check_length(N)
    Y = base_matrix(reg, bp, q, qd, qdd)
    r = Y.shape[-1]
    Phi = cond.decimate(Y.reshape(N, n * r)).reshape(-1, n, r)
    w = joint_weights(reg, q, grade)
    _, Gmap = solve(Phi, np.zeros(Phi.shape[:2]), w)
    sens = _sensitivities(reg, bp, theta, q, qd, qdd, stride=max(1, int(cond.fs / 50)))
    tc, tr = reg.torque_per_pressure(q)
    h = 1e-6
    tcp, trp = reg.torque_per_pressure(q + h)
    tcm, trm = reg.torque_per_pressure(q - h)
    # ∂τ_m/∂q_i through T±(q_i) (each joint's T depends on its own angle only).
    dtau_dq = ((tcp - tcm) * p_cap - (trp - trm) * p_rod) / (2 * h)
    rng = np.random.default_rng(seed)
    out = np.empty((draws, r))
    for k in range(draws):
        nq, npc, npr = _draw(grade, rng, (N, n))
        dy = cond.filter(tc * npc - tr * npr + dtau_dq * nq)
        d0, d1, d2 = cond.smooth(nq)
        dphi = (
            np.einsum("nij,nj->ni", sens[:, 0], d0)
            + np.einsum("nij,nj->ni", sens[:, 1], d1)
            + np.einsum("nij,nj->ni", sens[:, 2], d2)
        )
        de = cond.decimate(dy - dphi)
        out[k] = Gmap @ de.reshape(-1)
    sigma = np.std(out, axis=0, ddof=1)
    sigma[unexcited(Phi, w)] = np.inf
    return np.asarray(sigma)
