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

The batch fuses by default, the online estimator only when asked (`fuse_spool`): with the flow
gains' bias gone, least squares shows a −0.2 % error in 1/b on the standard experiment (8 of 8
seeds; it grows with the fluid corner, −0.11 % at 10 Hz, −0.36 % at 60 Hz, and stays with the
pressure noise ×0.1: an equation error, not noise). The LVDT's bias had offset it. The batch's
output-error refinement lands on the true 1/b and widens least squares' σ to cover the
difference (`estimator.refine.choose`); the online RLS has nothing that would, and its 1/b
came out 4–6σ low on every seed fused, against 1 seed in 12 unfused.

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
from daq.profile.schema import Profile

#: The complementary filter's crossover (Hz): the LVDT alone below, the command's lag above.
CROSSOVER_HZ = 2.0
#: Slot of the spool in a raw block `[q | s | p_cap | p_rod | u | temp]` (estimator.chain).
U_SLOT = 4


def valve_commands(profile: Profile) -> list[str] | None:
    """`cmd.<valve>` column per joint, or None when a joint has no valve output."""
    names = []
    for j in profile.joints:
        ch = profile.joint_channel(j.name, "valve")
        if ch is None:
            return None
        names.append(f"cmd.{ch.name}")
    return names


class SpoolFusion:
    """Replace the spool block of raw rows by û (module doc). In place; state carried across
    calls so chunks of one continuous stretch give what the whole stretch would."""

    def __init__(
        self, params: PlantParams, n_joints: int, rate_hz: float, crossover_hz: float = CROSSOVER_HZ
    ) -> None:
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
        self._m = np.full(n_joints, np.nan)  # the lag's next value (NaN: restart)
        self._r = np.zeros(n_joints)  # the low-passed LVDT − lag

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
        target = (1.0 - a) * np.clip(self.kv[j] * v, -self.umax[j], self.umax[j])
        m0 = u[0] if not np.isfinite(self._m[j]) else self._m[j]
        # m[0] = m0; m[k+1] = a m[k] + target[k]: one lfilter over [m0, target[:-1]] shifted.
        m, _ = lfilter([1.0], [1.0, -a], np.r_[m0, target[:-1]], zi=[0.0])
        self._m[j] = a * m[-1] + target[-1]
        r, _ = lfilter([1.0 - c], [1.0, -c], u - m, zi=[c * self._r[j]])
        self._r[j] = r[-1]
        u[:] = m + r


def fuse_blocks(
    raw: np.ndarray,
    columns: Mapping[str, np.ndarray],
    profile: Profile,
    params: PlantParams,
    blocks: Sequence[slice],
) -> bool:
    """Batch: û over each continuous block of a recording (in place). False (raw untouched)
    when the recording has no valve command for every joint."""
    names = valve_commands(profile)
    if names is None or any(n not in columns for n in names):
        return False
    cmd = np.column_stack([np.asarray(columns[n], dtype=float) for n in names])
    fusion = SpoolFusion(params, len(profile.joints), profile.rig.loop_rate_hz)
    for b in blocks:
        fusion.reset()
        fusion.apply(raw[b], cmd[b])
    return True
