"""Which spool position the fluid regressors use: the LVDT's, its noise replaced above a low
crossover by the spool the valve command predicts.

Why (measured, not argued): every flow-gain column is g(p)·u with u the *measured* spool. The
LVDT's noise is noise in the regressor (errors in variables), which least squares cannot
average away: it attenuates the flow gains by var(noise)/var(u) in the conditioning band. On
the reference rig (DESIGN §1.4) the LVDT has 1 mV of noise against ≈ 14 mV of spool motion on
the standard experiment; through the fluid model's 40 Hz corner that is a −0.04 % bias on
every Cf, about one σ, in both estimators (12 seeds: mean z −0.5…−1.2 on all eight; with the
LVDT's noise ×0.01, −0.03…−0.3). The bias grows in proportion to the corner (20/40/60 Hz).

The command is known without noise, and the spool follows it through the valve's first-order
lag (DESIGN §1.2: τ_v u̇ = k_v v − u, the declared `valve_gain` and `valve_tau_s`; the spool's
travel clipped at `spool_max`). A complementary filter keeps what each source knows best:

    û = m + LP(u_LVDT − m),    m = the lag (exact for a zero-order hold) driven by k_v·v,

with LP a first-order low-pass at CROSSOVER_HZ. Below the crossover û is the LVDT (its
calibration, the valve's real null, any drift); above it the model (no noise). The LVDT's noise
in the band falls by the ratio of the corners (2 Hz against 40 Hz: 20×), and an error in the
declared lag only reaches û above the crossover, as a phase (δτ·u̇, in quadrature with u).

Both estimators fuse by default (`fuse_spool`). Before the sampled-data correction below, the
fused spool uncovered a −0.2 % error in 1/b that the LVDT's noise had offset (8 of 8 seeds; it
grew with the fluid corner and stayed with the pressure noise ×0.1: an equation error, not
noise); the online RLS, with no refinement to reveal it, then came out 4–6σ low on 1/b, and
fusion stayed off online. With the correction, on 18 recordings of the standard experiment
(nominal profile) the online 1/b is −0.035 % on average fused (z −0.9, worst −2.9) against
−0.09 % unfused (z −1.5), and every online parameter lies within ±3σ either way.

**What a sampled pressure rate sees (the sampled-data correction).** The flow a chamber takes
between two rows is the interval's mean: with the command held over [t_k, t_k+1] (a zero-order
hold) the spool moves on its lag *within* the interval, so the pressure's increment p[k+1] − p[k]
is carried by the interval's mean spool ū[k], not by u at either row. Any derivative of the
sampled pressure (the conditioning's five-point one) is then, in band, the sequence of those
interval means re-timed by half a row to the rows: ṗ̂ = e^{−jωΔ/2}·(x / sin x)·g·Ū, x = ωΔ/2.
The point spool u[k] misses the kink of the lag at every row (u̇ jumps with the command), and
the mismatch with the measured pressure rate comes out as a −0.1…−0.2 % bias on 1/b at 1 kHz,
whatever the noise (measured noise-free on the 2-DOF simulator: −0.13 % at 1 kHz with
τ_v = 1.5 ms, −0.008 % at 4 kHz — it scales with the period squared —, −0.05 % with τ_v =
6 ms). So the model's part of û is that equivalent spool: ū[k] = φ m[k] + (1 − φ) k_v v[k]
(the lag's exact mean over a held interval, φ = (τ/Δ)(1 − e^{−Δ/τ})), re-timed by the causal
three-tap filter −ū[k−2]/6 + 5ū[k−1]/6 + ū[k]/3, whose response matches e^{−jωΔ/2}·x/sin x to
second order in ωΔ (unit gain, no delay, the curvature; a phase error of (ωΔ)³/12, 1e-4 rad at
16 Hz). The command is quantised as the valve's D/A writes it (the profile's converter): the
recorded command is the loop's request, and the 12-bit D/A's ±2.4 mV is otherwise a white error
in m. The LVDT's correction is taken against the lag at the rows (where the LVDT samples) and
added to the re-timed spool; taken against the re-timed one, its low-pass let the row-to-row
kinks through (+0.03…+0.04 % on every flow gain). Measured noise-free (24-bit sensors, 2-DOF
simulator): the batch's fluid fit lands on 1/b and every flow gain to 0.001 %, against 1/b
−0.125 % with the row's spool (tests/estimator/test_spool.py).

Row k's command acts on the spool measured at row k + 1 (the loop reads, computes, writes:
measured on the reference recording, the residual is the LVDT's noise alone at this alignment
and grows with one or two rows of extra delay). The filters are recursive and causal, so the
online estimator runs them on its chunks and the batch on each continuous block; both restart
at a break (the lag from the measured spool, the correction at zero).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.signal import lfilter

from controller.plant.params import PlantParams
from daq.profile.schema import Channel, Converter, Profile
from daq.scaling import counts_to_units, units_to_counts

#: The complementary filter's crossover (Hz): the LVDT alone below, the command's lag above.
CROSSOVER_HZ = 2.0
#: The crossover of the spool the output-error refinement's instruments are built from (Hz):
#: the command's lag almost alone, the LVDT only anchoring its mean. Why: IV needs instruments
#: uncorrelated with the equation error, and the regressors' spool carries the LVDT's noise
#: below CROSSOVER_HZ, which the same spool in the instruments would share. Measured on the
#: 1-DOF standard experiment (seed 1): IV 1/b +1.08 % with the regressors' spool in the
#: instruments (least squares −0.73 %); with this one +0.04 %.
INSTRUMENT_CROSSOVER_HZ = 0.02
#: The re-timing filter's taps on ū[k−2], ū[k−1], ū[k] (module doc, the sampled-data correction).
RETIME_TAPS = (-1.0 / 6.0, 5.0 / 6.0, 1.0 / 3.0)
#: Slot of the spool in a raw block `[q | s | p_cap | p_rod | u | temp]` (estimator.chain).
U_SLOT = 4


def _valve_channels(profile: Profile) -> list[Channel] | None:
    """Each joint's valve output channel, or None when a joint has no valve."""
    chans = [profile.joint_channel(j.name, "valve") for j in profile.joints]
    return None if any(c is None for c in chans) else [c for c in chans if c is not None]


def valve_converters(profile: Profile) -> list[Converter] | None:
    """The D/A converter of each joint's valve output, or None when a joint has no valve."""
    chans = _valve_channels(profile)
    return None if chans is None else [c.converter for c in chans]


def valve_commands(profile: Profile) -> list[str] | None:
    """`cmd.<valve>` column per joint, or None when a joint has no valve output."""
    chans = _valve_channels(profile)
    return None if chans is None else [f"cmd.{c.name}" for c in chans]


class SpoolFusion:
    """Replace the spool block of raw rows by û (module doc). In place; state carried across
    calls so chunks of one continuous stretch give what the whole stretch would."""

    def __init__(
        self,
        params: PlantParams,
        n_joints: int,
        rate_hz: float,
        crossover_hz: float = CROSSOVER_HZ,
        converters: Sequence[Converter] | None = None,
    ) -> None:
        """`converters`: each valve's D/A (`valve_converters`), whose codes the command is
        quantised to; None = the commands as recorded."""
        if n_joints != params.n:
            raise ValueError(f"{n_joints} joints but the plant parameters describe {params.n}")
        if not 0.0 < crossover_hz < rate_hz / 2:
            raise ValueError(f"crossover_hz must be in (0, {rate_hz / 2}), got {crossover_hz}")
        self.nj = n_joints
        dt = 1.0 / rate_hz
        self.kv = np.asarray(params.valve_gain, dtype=float)
        self.umax = np.asarray(params.spool_max, dtype=float)
        # Zero-order-hold equivalents: m[k+1] = a m[k] + (1 − a) k_v v[k]; r̄ the same with c.
        self.a = np.exp(-dt / np.asarray(params.valve_tau, dtype=float))
        self.c = math.exp(-2.0 * math.pi * crossover_hz * dt)
        # The lag's mean over a held interval: ū = φ m + (1 − φ) k_v v (module doc).
        self.phi = (1.0 - self.a) / (dt / np.asarray(params.valve_tau, dtype=float))
        if converters is not None and len(converters) != n_joints:
            raise ValueError(f"{len(converters)} valve converters for {n_joints} joints")
        self.dac = None if converters is None else list(converters)
        self._m = np.full(n_joints, np.nan)  # the lag's next value (NaN: restart)
        self._r = np.zeros(n_joints)  # the low-passed LVDT − lag
        self._ubar = np.zeros((n_joints, 2))  # ū[k−2], ū[k−1] of the last row seen

    def reset(self) -> None:
        """A break in the data: both filters restart at the next row."""
        self._m[:] = np.nan
        self._r[:] = 0.0

    def apply(self, raw: np.ndarray, cmd: np.ndarray) -> None:
        """raw (N, 6·nj) with the LVDT's u in its spool block, cmd (N, nj) the valve commands of
        the same rows; the spool block is overwritten by û. A non-finite value restarts both
        filters after its row (that row keeps its non-finite value and is left out as before)."""
        N, nj = raw.shape[0], self.nj
        if N == 0:
            return
        u = raw[:, U_SLOT * nj : (U_SLOT + 1) * nj]
        for j in range(nj):
            bad = ~(np.isfinite(u[:, j]) & np.isfinite(cmd[:, j]))
            start = 0
            for stop in [*(np.flatnonzero(bad) + 1), N]:
                if stop - 1 >= start and bad[stop - 1]:
                    self._fuse(u[start : stop - 1, j], cmd[start : stop - 1, j], j)
                    self._m[j], self._r[j] = np.nan, 0.0
                else:
                    self._fuse(u[start:stop, j], cmd[start:stop, j], j)
                start = stop

    def _fuse(self, u: np.ndarray, v: np.ndarray, j: int) -> None:
        """One joint, a finite continuous stretch; u overwritten."""
        n = u.shape[0]
        if n == 0:
            return
        a, c = self.a[j], self.c
        if self.dac is not None:  # the codes the D/A wrote
            v = counts_to_units(self.dac[j], units_to_counts(self.dac[j], v))
        drive = np.clip(self.kv[j] * v, -self.umax[j], self.umax[j])
        restart = not np.isfinite(self._m[j])
        m0 = u[0] if restart else self._m[j]
        # m[0] = m0; m[k+1] = a m[k] + (1 − a) k_v v[k]: one lfilter over the shifted drive.
        m, _ = lfilter([1.0], [1.0, -a], np.r_[m0, (1.0 - a) * drive[:-1]], zi=[0.0])
        self._m[j] = a * m[-1] + (1.0 - a) * drive[-1]
        phi = self.phi[j]
        ubar = phi * m + (1.0 - phi) * drive
        if restart:  # the stretch starts from the spool at rest at its first reading
            self._ubar[j] = m0
        t2, t1, t0 = RETIME_TAPS
        hist = np.r_[self._ubar[j], ubar]
        seen = t2 * hist[:-2] + t1 * hist[1:-1] + t0 * hist[2:]
        self._ubar[j] = hist[-2:]
        # The LVDT corrects the model where it knows better (its null, its gain, below the
        # crossover): measured against the lag's value *at the rows*, where the LVDT samples
        # the spool, and added to the re-timed spool. Against the re-timed one, the 2 Hz
        # low-pass would let its row-to-row kinks through (the flow gains +0.03 %, measured).
        r, _ = lfilter([1.0 - c], [1.0, -c], u - m, zi=[c * self._r[j]])
        self._r[j] = r[-1]
        u[:] = seen + r


def fuse_blocks(
    raw: np.ndarray,
    columns: Mapping[str, np.ndarray],
    profile: Profile,
    params: PlantParams,
    blocks: Sequence[slice],
    crossover_hz: float = CROSSOVER_HZ,
) -> bool:
    """Batch: û over each continuous block of a recording (in place). False (raw untouched)
    when the recording has no valve command for every joint."""
    names = valve_commands(profile)
    if names is None or any(n not in columns for n in names):
        return False
    cmd = np.column_stack([np.asarray(columns[n], dtype=float) for n in names])
    fusion = SpoolFusion(
        params,
        len(profile.joints),
        profile.rig.loop_rate_hz,
        crossover_hz,
        converters=valve_converters(profile),
    )
    for b in blocks:
        fusion.reset()
        fusion.apply(raw[b], cmd[b])
    return True
