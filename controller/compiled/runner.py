"""The runners (`controller.runner.HoldRunner`, `ExperimentRunner`) on the compiled path.

`compile_runner(runner)` is called by the loop when a runner is switched in (a command's cycle,
which may allocate): it packs every phase's trajectory (`controller.compiled.trajectories`) and law
(`controller.compiled.laws`) into arrays. Per cycle `CompiledRunner.step` makes one compiled call
(`phase_step`: trajectory, law, reference); the phase sequencing — approach moves, repeats, the
recovery move after an open-loop segment, the final hold — is the Python runner's own, run in the
cycle where a phase ends (a rare event). The progress attributes (`segment_index`, `elapsed`, ...)
are written on the Python runner, which stays the loop's `active` runner for status and telemetry.
"""

from __future__ import annotations

import numpy as np

from controller.compiled.jit import kernel
from controller.compiled.laws import (
    L_DRIVES,
    CompiledLaw,
    compile_law,
    law_blob,
    law_disable,
    law_enable,
    law_reference_out,
    law_update,
    law_views,
)
from controller.compiled.trajectories import HOLD, compile_trajectory, fill_trapezoid, traj_eval
from controller.feedback import Feedback
from controller.laws import Law
from controller.moves import TrapezoidPath
from controller.runner import RECOVER_TOL, ExperimentRunner, HoldRunner, _Phase


@kernel
def phase_step(
    tkind: int,
    coef: np.ndarray,
    t: float,
    lb: np.ndarray,
    q: np.ndarray,
    p_cap: np.ndarray,
    p_rod: np.ndarray,
    qr: np.ndarray,
    qdr: np.ndarray,
    qddr: np.ndarray,
    ref_out: np.ndarray,
    volts_out: np.ndarray,
) -> None:
    """One cycle of a phase: the reference at `t`, the law's valve volts, the reported reference
    (the body of `ExperimentRunner.step` / `HoldRunner.step`)."""
    traj_eval(tkind, coef, t, qr, qdr, qddr)
    law_update(lb, t, q, p_cap, p_rod, qr, qdr, qddr, volts_out)
    for j in range(ref_out.shape[0]):
        ref_out[j] = qr[j]
    if lb[L_DRIVES] != 0.0:
        law_reference_out(lb, ref_out)
    open_loop = law_views(lb)[8]
    for j in range(ref_out.shape[0]):
        if open_loop[j] != 0.0:
            ref_out[j] = q[j]


class _CPhase:
    """A phase's compiled trajectory and law (`py`: the runner's `_Phase`)."""

    __slots__ = ("coef", "end", "law", "py", "tkind")

    def __init__(self, py: _Phase | None, tkind: int, coef: np.ndarray, law: CompiledLaw) -> None:
        self.py, self.tkind, self.coef, self.law = py, tkind, coef, law
        self.end = 0.0


class CompiledRunner:
    """`step`/`enable`/`disable` of a Python runner, computed by compiled code."""

    def __init__(self, runner: HoldRunner | ExperimentRunner, laws: dict[int, CompiledLaw]) -> None:
        self.py = runner
        self.n = runner.n
        self._laws = laws
        self._phases_by_id: dict[int, _CPhase] = {}
        n = self.n
        self._qr, self._qdr, self._qddr = np.zeros(n), np.zeros(n), np.zeros(n)
        self.finished = False
        if isinstance(runner, HoldRunner):
            self.period = runner._period
            self._hold = _CPhase(None, HOLD, np.zeros((n, 1)), laws[id(runner.law)])
        else:
            self.period = runner.period
            self._final_phase = _CPhase(
                None, HOLD, np.array(runner._final, dtype=np.float64).reshape(n, 1),
                laws[id(runner._hold_law)],
            )  # fmt: skip
            self._recover = self._compile_phase(runner._recover)
            self._brake = self._compile_phase(runner._brake)
            # C-contiguous float64: the types the kernels were compiled for before arming (an
            # array of another layout would compile a new specialisation in a live cycle).
            self._final = np.ascontiguousarray(runner._final, dtype=np.float64)
        self._cur: _CPhase | None = None
        self._k = 0
        self.elapsed = 0.0
        self._t = 0.0
        #: The phase and its time for this cycle's step (set by `prepare`).
        self.phase: _CPhase = self._hold if isinstance(runner, HoldRunner) else self._final_phase
        self.tr = 0.0

    def _compile_phase(self, ph: _Phase) -> _CPhase:
        cp = self._phases_by_id.get(id(ph))
        if cp is None:
            tc = compile_trajectory(ph.trajectory)
            assert tc is not None  # checked by compile_runner
            cp = _CPhase(ph, tc[0], tc[1], self._laws[id(ph.law)])
            self._phases_by_id[id(ph)] = cp
        return cp

    # ------------------------------------------------------------------ rare: enable, phases

    def enable(self, fb: Feedback) -> None:
        """The Python runner's `enable` (it plans the approach move from the measured position),
        then the compiled laws' bumpless start."""
        py = self.py
        py.enable(fb)
        self.finished = False
        self.elapsed = 0.0
        if isinstance(py, HoldRunner):
            self._hold.coef[:, 0] = py.position
            self._enter(self._hold, fb)
            return
        self._phases = [self._compile_phase(p) for p in py._phases]
        self._ip = 0
        self._enter(self._phases[0], fb)

    def _enter(self, cp: _CPhase, fb: Feedback) -> None:
        traj_eval(cp.tkind, cp.coef, 0.0, self._qr, self._qdr, self._qddr)
        law_enable(cp.law.lb, fb.q, fb.p_cap, fb.p_rod, self._qr)
        self._cur = cp
        self._k = 0
        ph = cp.py
        if ph is not None:
            cp.end = ph.duration * ph.repeats - 0.5 * self.period
            py = self.py
            py.segment_index, py.segment_name = ph.index, ph.name
            py.segment_duration, py.segment_repeats = ph.duration, ph.repeats  # type: ignore[union-attr]

    def _next(self, fb: Feedback) -> bool:
        """`ExperimentRunner._next` on the compiled phases."""
        py = self.py
        assert isinstance(py, ExperimentRunner)
        if self._cur is self._brake:
            return False
        recovering = self._cur is self._recover
        if not recovering:
            self._ip += 1
        last = self._ip >= len(self._phases)
        target = py._final if last else self._phases[self._ip].py.start  # type: ignore[union-attr]
        far = False
        for j in range(self.n):
            if abs(fb.q[j] - target[j]) > RECOVER_TOL:
                far = True
        cur = self._cur
        assert cur is not None and cur.py is not None
        if far and not recovering and any(cur.py.law.open_loop):
            rec = py._recover
            path = rec.trajectory
            assert isinstance(path, TrapezoidPath)
            path.replan(fb.q, target)
            fill_trapezoid(path, self._recover.coef)
            rec.duration = max(path.duration, self.period)
            py.total_duration += rec.duration
            rec.index = cur.py.index if last else self._phases[self._ip].py.index  # type: ignore[union-attr]
            self._enter(self._recover, fb)
            return True
        if last:
            # The last reference, as the Python runner takes it (`ExperimentRunner._next`).
            t = py.last_reference_time(cur.py, self._k)
            traj_eval(cur.tkind, cur.coef, t, self._qr, self._qdr, self._qddr)
            if not py.plan_brake(cur.py, self._qr, self._qdr):
                return False
            path = py._brake.trajectory
            assert isinstance(path, TrapezoidPath)
            fill_trapezoid(path, self._brake.coef)
            self._final[:] = py._final
            self._final_phase.coef[:, 0] = py._final
            self._enter(self._brake, fb)
            return True
        self._enter(self._phases[self._ip], fb)
        return True

    def disable(self) -> None:
        for law in self._laws.values():
            law_disable(law.lb)
        self.py.disable()

    # ------------------------------------------------------------------ per cycle

    def prepare(self, fb: Feedback) -> bool:
        """Before this cycle's compiled step: the phase transitions due now (the rare path of
        `ExperimentRunner.step`). Sets `phase` and `tr` (its time) for the step; returns what
        `step` returns: False once the experiment is over (it then holds the end pose)."""
        py = self.py
        if isinstance(py, HoldRunner):
            self.phase, self.tr = self._hold, self.elapsed
            return True
        if self.finished:
            self.phase, self.tr = self._final_phase, 0.0
            return False
        cp = self._cur
        assert cp is not None and cp.py is not None
        t = self._k * self.period
        if t >= cp.end:
            if not self._next(fb):
                self.finished = py.finished = True
                py.segment_name = "finished"
                law_enable(self._final_phase.law.lb, fb.q, fb.p_cap, fb.p_rod, self._final)
                self.phase, self.tr = self._final_phase, 0.0
                return False
            cp = self._cur
            assert cp is not None and cp.py is not None
            t = 0.0
        ph = cp.py
        assert ph is not None
        self.phase, self._t = cp, t
        self.tr = t % ph.duration if ph.repeats > 1 else t
        return True

    def advance(self) -> None:
        """After the step: the runner's clock and its progress attributes."""
        py = self.py
        if isinstance(py, HoldRunner):
            self.elapsed += self.period
            py.elapsed = py.time_in_segment = self.elapsed
        elif not self.finished:
            self._k += 1
            self.elapsed += self.period
            py.time_in_segment = self._t
            py.elapsed = self.elapsed

    def step(self, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray) -> bool:
        """One whole cycle of the runner (`prepare`, the compiled step, `advance`): the
        `Runner.step` of the Python runners, for use outside the loop's kernels."""
        running = self.prepare(fb)
        self._run(self.phase, self.tr, fb, ref_out, volts_out)
        self.advance()
        return running

    def _run(
        self, cp: _CPhase, t: float, fb: Feedback, ref_out: np.ndarray, volts_out: np.ndarray
    ) -> None:
        phase_step(cp.tkind, cp.coef, t, cp.law.lb, fb.q, fb.p_cap, fb.p_rod, self._qr, self._qdr,
                   self._qddr, ref_out, volts_out)  # fmt: skip


def idle_phase(n: int) -> _CPhase:
    """A phase the kernels are given when no runner steps (its numbers are never read)."""
    return _CPhase(None, HOLD, np.zeros((n, 1)), CompiledLaw(law_blob(0, n), 0, False, np.zeros(n)))


def compile_runner(runner: object) -> CompiledRunner | None:
    """The compiled twin of a `HoldRunner` or `ExperimentRunner` whose every trajectory and law has
    a compiled form; None otherwise (the loop runs it on the Python path)."""
    laws: dict[int, CompiledLaw] = {}

    def add(law: Law) -> bool:
        if id(law) not in laws:
            c = compile_law(law)
            if c is None:
                return False
            laws[id(law)] = c
        return True

    if type(runner) is HoldRunner:
        return CompiledRunner(runner, laws) if add(runner.law) else None
    if type(runner) is not ExperimentRunner:
        return None
    phases = [*runner._planned, runner._recover, runner._brake]
    if not add(runner._hold_law):
        return None
    for ph in phases:
        if not add(ph.law) or compile_trajectory(ph.trajectory) is None:
            return None
    return CompiledRunner(runner, laws)


__all__ = ["CompiledRunner", "compile_runner", "phase_step"]
