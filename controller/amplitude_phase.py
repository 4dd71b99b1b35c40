"""Amplitude–phase compensation of a periodic reference (docs/controller.md, "Amplitude–phase
compensation").

A servo loop tracking a sine returns it scaled and late: the closed loop's response H(jω) at
each commanded frequency. Test controllers (MTS's amplitude–phase control, FlexTest's
"APC") adapt the *command* so that the *measured* motion has the amplitude and phase asked
for. Here the reference is a `HarmonicSum` (sine, multisine, Fourier or MFS trajectory):
q(t) = c + Σ S sin ωt + C cos ωt, one phasor z = S + jC per joint and frequency (then
q = c + Im(z·e^{jωt})). Over each window of whole periods the measured position's phasor Y
is taken by a DFT at exactly the commanded frequencies; with the command U that produced it,
H ≈ Y/U, and the command moves toward D/H (D the desired phasor):

    U ← U + g·(D − Y)·U/Y          (0 < g ≤ 1: g = 1 jumps straight to D/H)

For a linear loop the error then shrinks by (1 − g) per window; on a real one H depends a
little on the amplitude (friction, underlap), and the iteration still settles where the measured
phasor equals the desired. Bounds, each per joint: |U| ≤ `max_ratio`·|D| per frequency, and the
whole compensated command kept inside the soft limits and the velocity and acceleration limits
that `controller.checks` held the desired reference to (scaled down as a whole if not, and
counted in `limited`). A window with too little measured motion (|Y| < 5 % of |D|: a joint
stuck on its friction) leaves that command alone.

Per cycle `observe` adds the measured position into two running sums per joint and frequency
(two trigonometric evaluations each, no allocation); the update runs once per window, in the
cycle it ends (a rare event, as the runner's phase changes are). The runner evaluates the
compensated command with `eval` like any trajectory; it is what the loop reports as the
reference (telemetry's `ref` shows the compensated command; the desired one is the experiment
file's). Runners with this trajectory run on the loop's Python path (no compiled form).
"""

from __future__ import annotations

import cmath
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from controller.limits import JointLimits
from controller.trajectories import HarmonicSum, Trajectory

#: Keys of a segment's `compensation` table and their allowed ranges.
GAIN_RANGE = (0.05, 1.0)
MAX_RATIO_RANGE = (1.0, 10.0)
SETTLE_RANGE = (0, 100)
HARMONICS_RANGE = (0, 10)
#: A window whose measured phasor is below this fraction of the desired one updates nothing.
MIN_RESPONSE = 0.05
#: The share of the following-error limit a converged compensation may use as servo error.
FE_MARGIN = 0.8
#: Shortest time a new command takes to replace the old one (s); longer when the change is
#: large (`_blend_cycles`: within `BLEND_SHARE` of the joint's speed and acceleration
#: limits), at most half a window.
BLEND_S = 0.02
BLEND_SHARE = 0.25
#: Longest window (s): the common period of the commanded frequencies.
MAX_WINDOW_S = 60.0


class CompensationError(ValueError):
    """A `compensation` table or trajectory that amplitude–phase compensation cannot take."""


def common_period(omega: np.ndarray, period: float) -> float:
    """The shortest window holding a whole number of periods of every frequency, a whole
    number of loop periods long (so the DFT at each frequency is exact); CompensationError
    naming the frequencies when there is none up to `MAX_WINDOW_S`."""
    f = np.unique(np.round(np.abs(omega[omega != 0.0]) / (2 * math.pi), 12))
    if f.size == 0:
        raise CompensationError("amplitude–phase compensation needs at least one frequency")
    base = 1.0 / f.min()
    for m in range(1, int(MAX_WINDOW_S * f.min()) + 1):
        window = m * base
        cycles = f * window
        samples = window / period
        if (
            np.all(np.abs(cycles - np.round(cycles)) < 1e-6)
            and abs(samples - round(samples)) < 1e-6
        ):
            return window
    raise CompensationError(
        f"amplitude–phase compensation: the frequencies {f.tolist()} Hz have no common period "
        f"of whole loop cycles within {MAX_WINDOW_S:g} s (choose frequencies that are integer "
        "multiples of one base frequency)"
    )


def parse_compensation(table: Mapping[str, Any], where: str) -> dict[str, float]:
    """The segment's `compensation` table checked against its ranges."""
    if not isinstance(table, Mapping):
        raise CompensationError(f"{where}: 'compensation' must be a table")
    kind = table.get("kind")
    if kind != "amplitude_phase":
        raise CompensationError(
            f"{where}: compensation kind {kind!r} unknown; the one kind is 'amplitude_phase'"
        )
    unknown = sorted(set(table) - {"kind", "gain", "max_ratio", "settle_windows", "harmonics"})
    if unknown:
        raise CompensationError(f"{where}: unknown compensation key(s) {unknown}")
    out = {
        "gain": table.get("gain", 0.5),
        "max_ratio": table.get("max_ratio", 3.0),
        "settle_windows": table.get("settle_windows", 1),
        "harmonics": table.get("harmonics", 0),
    }
    for key, (lo, hi) in (
        ("gain", GAIN_RANGE),
        ("max_ratio", MAX_RATIO_RANGE),
        ("settle_windows", SETTLE_RANGE),
        ("harmonics", HARMONICS_RANGE),
    ):
        v = out[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
            raise CompensationError(
                f"{where}: compensation {key} = {v!r} outside the allowed range [{lo}, {hi}]"
            )
    for key in ("settle_windows", "harmonics"):
        if not float(out[key]).is_integer():
            raise CompensationError(f"{where}: compensation {key} must be a whole number")
    return {k: float(v) for k, v in out.items()}


class AmplitudePhase(Trajectory):
    """The compensated command of a `HarmonicSum` (module doc). `eval` and `sample` give the
    command; `desired` is the reference the experiment asked for."""

    def __init__(
        self,
        desired: Trajectory,
        limits: Sequence[JointLimits],
        period: float,
        gain: float = 0.5,
        max_ratio: float = 3.0,
        settle_windows: float = 1,
        harmonics: float = 0,
    ) -> None:
        if type(desired) is not HarmonicSum:
            raise CompensationError(
                "amplitude–phase compensation needs a periodic trajectory (sine, multisine, "
                f"fourier or mfs), not {type(desired).__name__}"
            )
        self.desired = desired
        self.n = desired.n
        if len(limits) != self.n:
            raise CompensationError(f"{len(limits)} joint limits for {self.n} joints")
        self.duration = desired.duration
        self.limits = list(limits)
        self.gain, self.max_ratio = float(gain), float(max_ratio)
        self.settle_windows = int(settle_windows)
        self.window_s = common_period(desired.omega, period)
        self.window_n = round(self.window_s / period)
        self._center = list(desired._center)
        # Per joint, per frequency: ω, the command's (S, C), the desired's (S, C), the sums.
        self._w = [[w for w, _, _ in row] for row in desired._rows]
        self._ds = [[s for _, s, _ in row] for row in desired._rows]
        self._dc = [[c for _, _, c in row] for row in desired._rows]
        # Distortion: a joint tracking one sine gets rows at 2f … (1 + harmonics)·f whose
        # desired phasor is 0 (friction and underlap put the sine's harmonics into the motion).
        self.harmonics = int(harmonics)
        self._order = [[1] * len(r) for r in self._w]
        self._h: list[list[complex | None]] = [[None] * len(r) for r in self._w]
        if self.harmonics:
            multi = [j for j in range(self.n) if len(self._w[j]) != 1]
            if multi:
                raise CompensationError(
                    "amplitude–phase compensation of harmonics needs one frequency per joint "
                    f"(a sine); joint(s) {[j + 1 for j in multi]} have several"
                )
            top = max(abs(r[0]) for r in self._w) * (1 + self.harmonics) / (2 * math.pi)
            if top > 0.25 / period:
                raise CompensationError(
                    f"harmonics = {self.harmonics}: the highest, {top:g} Hz, is above a quarter "
                    f"of the loop rate ({1 / period:g} Hz)"
                )
            for j in range(self.n):
                w1 = self._w[j][0]
                for k in range(2, 2 + self.harmonics):
                    self._w[j].append(k * w1)
                    self._ds[j].append(0.0)
                    self._dc[j].append(0.0)
                    self._order[j].append(k)
                    self._h[j].append(None)
        # Per harmonic row: its own step gain (halved when its error grows after a step), the
        # last window's command and measured phasor (the secant's other point).
        self._g = [[self.gain] * len(r) for r in self._w]
        self._prev_u = [[0j] * len(r) for r in self._w]
        self._prev_y = [[0j] * len(r) for r in self._w]
        self.backed_off = [0] * self.n  # harmonic steps halved because the error grew
        self._s = [list(r) for r in self._ds]
        self._c = [list(r) for r in self._dc]
        self._sum_s = [[0.0] * len(r) for r in self._w]
        self._sum_c = [[0.0] * len(r) for r in self._w]
        # The mean level: the command's centre moves so the measured mean is the desired
        # centre (a P-only loop holding a gravity load sits off its reference by a constant).
        self._center_desired = list(desired._center)
        self._sum_y = [0.0] * self.n
        self._count = 0
        self.windows = 0  # windows completed since `restart`
        self.updates = 0  # windows that changed the command
        self.limited = [0] * self.n  # updates scaled down to stay inside a joint's limits
        #: … of which to keep the servo error inside the following-error interlock's margin.
        self.following_limited = [0] * self.n
        self._grid: list[tuple[np.ndarray, np.ndarray] | None] = [None] * self.n
        #: Per joint, the last window's RMS error over its RMS desired motion, the mean level
        #: and every commanded frequency counted (NaN before a window ends).
        self.error = [math.nan] * self.n
        #: Per joint, the last window's measured mean minus the desired centre (rad).
        self.offset = [math.nan] * self.n
        self._cmd = self.command()  # what `eval` evaluates: the desired one, until a window ends
        # A new command is blended in from the old one over the first cycles of the next
        # window (smoothstep: position and velocity continuous): a step in the reference would
        # be a spike in any velocity feed-forward (FF1 differentiates the reference) and trip
        # the valve-rate interlock.
        self._old = self.command()
        self.blend_n = 1  # cycles of the blend under way: set at each update (`_blend_cycles`)
        self._blending = False
        self._period = period
        self._scratch = (np.zeros(self.n), np.zeros(self.n), np.zeros(self.n))
        # The desired reference's own bounds: `controller.checks` passed its sampled peaks, so
        # a command is never cut below them (a multisine's sum of amplitudes exceeds its peak).
        self._own = [
            self._bounds(j, [complex(s, c) for s, c in zip(self._ds[j], self._dc[j], strict=True)])
            for j in range(self.n)
        ]

    # ------------------------------------------------------------------ trajectory

    def eval(self, t: float, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> None:
        self._cmd.eval(t, q, qd, qdd)
        if not self._blending:
            return
        x = self._count / self.blend_n  # cycles into the window: 0 … 1
        if x >= 1.0:
            self._blending = False
            return
        q0, qd0, qdd0 = self._scratch
        self._old.eval(t, q0, qd0, qdd0)
        tb = self.blend_n * self._period
        r = x * x * (3.0 - 2.0 * x)
        r1 = 6.0 * x * (1.0 - x) / tb
        r2 = (6.0 - 12.0 * x) / (tb * tb)
        for j in range(self.n):
            dq, dqd = q[j] - q0[j], qd[j] - qd0[j]
            qdd[j] = qdd0[j] + r * (qdd[j] - qdd0[j]) + 2.0 * r1 * dqd + r2 * dq
            qd[j] = qd0[j] + r * dqd + r1 * dq
            q[j] = q0[j] + r * dq

    def sample(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.command().sample(t)

    def command(self) -> HarmonicSum:
        """The current command as a plain `HarmonicSum` (for checks and plots; allocates)."""
        w = np.array(self._w, dtype=float)
        return HarmonicSum(self._center, w, np.array(self._s), np.array(self._c), self.duration)

    def _blend_cycles(self) -> int:
        """Cycles over which the change just made is blended in: the smoothstep over T adds at
        most 1.5·Δq/T of speed and 6·Δq/T² + 3·Δv/T of acceleration (Δq, Δv: bounds of the
        change in position and speed); T is the shortest that keeps both within
        `BLEND_SHARE` of every joint's limits, at least `BLEND_S`, at most half a window."""
        t = BLEND_S
        old = self._cmd
        for j in range(self.n):
            dq = abs(self._center[j] - old._center[j])
            dv = 0.0
            for (w, s0, c0), s1, c1 in zip(old._rows[j], self._s[j], self._c[j], strict=True):
                m = math.hypot(s1 - s0, c1 - c0)
                dq += m
                dv += abs(w) * m
            lim = self.limits[j]
            a = BLEND_SHARE * lim.max_acceleration
            t_acc = (3.0 * dv + math.sqrt(9.0 * dv * dv + 24.0 * a * dq)) / (2.0 * a)
            t = max(t, t_acc, 1.5 * dq / (BLEND_SHARE * lim.max_velocity))
        return max(1, min(self.window_n // 2, round(t / self._period)))

    def _publish(self) -> None:
        """The adapted centre and coefficients into the `HarmonicSum` that `eval` runs (a
        window's end: a rare event, so the rows may be rebuilt)."""
        cmd, old = self._cmd, self._old
        for j in range(self.n):
            old._center[j] = cmd._center[j]
            old._rows[j] = cmd._rows[j]
            cmd._center[j] = self._center[j]
            cmd._rows[j] = list(zip(self._w[j], self._s[j], self._c[j], strict=True))

    # ------------------------------------------------------------------ adaptation

    def restart(self) -> None:
        """A new window series (the phase is entered): the sums and the settling start over;
        the command keeps what it has learnt."""
        self._count = 0
        self.windows = 0
        self._blending = False
        for j in range(self.n):
            self._sum_y[j] = 0.0
            for i in range(len(self._w[j])):
                self._prev_y[j][i] = 0j
            for i in range(len(self._w[j])):
                self._sum_s[j][i] = 0.0
                self._sum_c[j][i] = 0.0

    def observe(self, t: float, q: np.ndarray) -> None:
        """The measured position at trajectory time `t` (the same instant the command was
        evaluated at); at a window's end, the update."""
        for j in range(self.n):
            y = q[j] - self._center_desired[j]
            self._sum_y[j] += y
            ws, ss, sc = self._w[j], self._sum_s[j], self._sum_c[j]
            for i in range(len(ws)):
                ss[i] += y * math.sin(ws[i] * t)
                sc[i] += y * math.cos(ws[i] * t)
        self._count += 1
        if self._count >= self.window_n:
            self._end_window()

    def _end_window(self) -> None:
        k = 2.0 / self._count
        self.windows += 1
        update = self.windows > self.settle_windows
        changed = False
        for j in range(self.n):
            ys = [
                complex(k * a, k * b) for a, b in zip(self._sum_s[j], self._sum_c[j], strict=True)
            ]
            us = [complex(a, b) for a, b in zip(self._s[j], self._c[j], strict=True)]
            ds = [complex(a, b) for a, b in zip(self._ds[j], self._dc[j], strict=True)]
            new: list[complex] = []
            err_num = err_den = 0.0
            h1: complex | None = None  # the loop's response at the fundamental, this window
            for i, (y, u, d) in enumerate(zip(ys, us, ds, strict=True)):
                err_num += abs(d - y) ** 2
                err_den += abs(d) ** 2
                self._sum_s[j][i] = self._sum_c[j][i] = 0.0
                if self._order[j][i] > 1:
                    new.append(self._harmonic(j, i, y, u, h1, update))
                    continue
                if not update or abs(u) == 0.0 or abs(y) < MIN_RESPONSE * abs(d):
                    new.append(u)
                    continue
                h1 = y / u
                un = u + self.gain * (d - y) * u / y
                cap = self.max_ratio * abs(d)
                if abs(un) > cap:
                    un *= cap / abs(un)
                new.append(un)
            mean = self._sum_y[j] / self._count  # measured mean − desired centre
            self._sum_y[j] = 0.0
            self.offset[j] = mean
            err_num += 2.0 * mean * mean  # a phasor's power is |z|²/2, the mean's mean²
            self.error[j] = math.sqrt(err_num / err_den) if err_den > 0 else math.nan
            if update:
                self._move_center(j, -self.gain * mean)
                new = self._inside_limits(j, new)
                new = self._inside_following_error(j, new)
                for i, un in enumerate(new):
                    changed |= un != us[i]
                    self._s[j][i], self._c[j][i] = un.real, un.imag
        self._count = 0
        if update:
            self.blend_n = self._blend_cycles()
            self._publish()
            self._blending = True
        if changed:
            self.updates += 1

    def _harmonic(
        self, j: int, i: int, y: complex, u: complex, h1: complex | None, update: bool
    ) -> complex:
        """The command at harmonic k of joint j's sine, driving the measured phasor there to 0.

        The loop's response H at k·f is first modelled from the fundamental's,
        H(kf) ≈ |H(f)|·e^{jk∠H(f)} (a pure delay's phase, a flat magnitude), then measured by
        the secant ΔY/ΔU between windows once the command there has moved (half-way blended,
        and only within a factor 5 of the current model: one noisy window cannot flip it). A
        phase error under 90° still converges (each step points within 90° of the right
        one). A row whose error grows by half after a step despite that (above a noise floor
        of 0.5 % of the fundamental) takes half the step back and halves its own gain; below
        1 % of the set gain it is switched off (command 0)."""
        floor = 0.005 * abs(complex(self._ds[j][0], self._dc[j][0]))
        h = self._h[j][i]
        if h is None and h1 is not None:
            h = cmath.rect(abs(h1), self._order[j][i] * cmath.phase(h1))
        pu, py = self._prev_u[j][i], self._prev_y[j][i]
        du = u - pu
        if h is not None and abs(du) > floor:
            hm = (y - py) / du
            if 0.2 < abs(hm) / abs(h) < 5.0:
                h += 0.5 * (hm - h)
        self._h[j][i] = h
        grew = abs(y) > max(1.5 * abs(py), floor) and pu != 0.0
        self._prev_u[j][i], self._prev_y[j][i] = u, y
        if not update or h is None or abs(h) == 0.0:
            return u
        if grew:
            self._g[j][i] *= 0.5
            self.backed_off[j] += 1
            if self._g[j][i] < 0.01 * self.gain:
                return 0j
            return u - 0.5 * du
        un = u - self._g[j][i] * y / h
        # A harmonic's command is bounded by the fundamental's desired amplitude.
        cap = abs(complex(self._ds[j][0], self._dc[j][0]))
        if abs(un) > cap:
            un *= cap / abs(un)
        return un

    def _move_center(self, j: int, step: float) -> None:
        """The command's centre by `step`, kept within `max_ratio` times the largest desired
        amplitude of the desired centre and inside the soft limits."""
        lim = self.limits[j]
        c0 = self._center_desired[j]
        reach = self.max_ratio * max(
            (abs(complex(s, c)) for s, c in zip(self._ds[j], self._dc[j], strict=True)), default=0.0
        )
        c = min(max(self._center[j] + step, c0 - reach), c0 + reach)
        self._center[j] = min(max(c, lim.position_min), lim.position_max)

    def _bounds(self, j: int, u: list[complex], order: int = 0) -> tuple[float, float, float]:
        """Upper bounds of joint j's excursion, speed and acceleration for phasors `u`: of the
        rows of harmonic `order` only (1: the commanded frequencies, 2+: the distortion's),
        or of all of them (0)."""
        amp = vel = acc = 0.0
        for w, z, k in zip(self._w[j], u, self._order[j], strict=True):
            if order == 0 or (k == 1) == (order == 1):
                m = abs(z)
                amp += m
                vel += abs(w) * m
                acc += w * w * m
        return amp, vel, acc

    def _inside_limits(self, j: int, u: list[complex]) -> list[complex]:
        """The joint's new command scaled down, if needed, to the soft limits and the velocity
        and acceleration limits (bounded by the sum of the harmonics' amplitudes, and never
        below the desired reference's own bound): the distortion rows give way first, the
        commanded frequencies only when they alone exceed a limit."""
        lim = self.limits[j]
        c = self._center[j]
        room = min(c - lim.position_min, lim.position_max - c)
        s_all = s_dist = 1.0
        have = (room, lim.max_velocity, lim.max_acceleration)
        main, dist = self._bounds(j, u, 1), self._bounds(j, u, 2)
        for m, d, allowed, own in zip(main, dist, have, self._own[j], strict=True):
            cap = max(allowed, own)
            if m > cap:
                s_all = min(s_all, cap / m)
                s_dist = 0.0
            elif m + d > cap:
                s_dist = min(s_dist, (cap - m) / d)
        if s_all < 1.0 or s_dist < 1.0:
            self.limited[j] += 1
            return [
                z * (s_all if k == 1 else s_all * s_dist)
                for z, k in zip(u, self._order[j], strict=True)
            ]
        return u

    def _servo_error_excess(self, j: int, u: list[complex], center: float) -> float:
        """max over the window of |command − desired| − margin·(the following-error limit at
        the command's speed): what the servo error will be once the motion is the desired one
        (> 0: the interlock would be near)."""
        w = np.asarray(self._w[j])
        d = np.array([complex(a, b) for a, b in zip(self._ds[j], self._dc[j], strict=True)])
        e = np.asarray(u) - d
        sn, cs = self._fe_grid(j)
        err = sn @ e.real + cs @ e.imag + (center - self._center_desired[j])
        speed = np.abs(cs @ (w * np.asarray(u).real) - sn @ (w * np.asarray(u).imag))
        lim = self.limits[j]
        allowed = FE_MARGIN * (lim.following_error + lim.following_error_per_velocity * speed)
        return float(np.max(np.abs(err) - allowed))

    def _fe_grid(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """sin and cos of every row's frequency on a grid over one window (256 points a period
        of the fastest row, at most 16384; the limit's kink at zero speed is sharp, so a
        coarse grid misses the worst point by a few per cent), made once per joint."""
        grid = self._grid[j]
        if grid is None:
            w = np.asarray(self._w[j])
            m = int(
                min(16384, max(256, math.ceil(self.window_s * np.abs(w).max() / math.pi * 128)))
            )
            t = np.arange(m) * (self.window_s / m)
            grid = self._grid[j] = (np.sin(np.outer(t, w)), np.cos(np.outer(t, w)))
        return grid

    def _inside_following_error(self, j: int, u: list[complex]) -> list[complex]:
        """The compensation (command − desired, centre included) scaled down, if needed, until
        the servo error it implies stays within `FE_MARGIN` of the following-error limit all
        over the window: the loop's interlock compares the command with the measured position,
        and once the motion is the desired one their difference is the compensation itself."""
        lim = self.limits[j]
        if not math.isfinite(lim.following_error):
            return u
        c0 = self._center_desired[j]
        c = self._center[j]
        if self._servo_error_excess(j, u, c) <= 0.0:
            return u
        d = [complex(a, b) for a, b in zip(self._ds[j], self._dc[j], strict=True)]

        def at(s: float) -> tuple[list[complex], float]:
            return [dk + s * (uk - dk) for uk, dk in zip(u, d, strict=True)], c0 + s * (c - c0)

        lo, hi = 0.0, 1.0  # s = 0 is the desired reference itself: no servo error predicted
        for _ in range(20):
            mid = 0.5 * (lo + hi)
            if self._servo_error_excess(j, *at(mid)) <= 0.0:
                lo = mid
            else:
                hi = mid
        self.limited[j] += 1
        self.following_limited[j] += 1
        new, self._center[j] = at(lo)
        return new

    def amplitude_ratio(self) -> list[float]:
        """Per joint, |command| / |desired| of its largest desired harmonic (1 = uncompensated)."""
        out = []
        for j in range(self.n):
            mags = [math.hypot(s, c) for s, c in zip(self._ds[j], self._dc[j], strict=True)]
            i = int(np.argmax(mags)) if mags else 0
            out.append(math.hypot(self._s[j][i], self._c[j][i]) / mags[i] if mags else 1.0)
        return out

    def status(self) -> dict[str, Any]:
        return {
            "windows": self.windows,
            "updates": self.updates,
            "window_s": self.window_s,
            "amplitude_ratio": self.amplitude_ratio(),
            "error": list(self.error),
            "limited": list(self.limited),
            "following_limited": list(self.following_limited),
            "backed_off": list(self.backed_off),
        }
