"""Mutation testing of the safety- and accuracy-critical modules (docs/testing.md).

    python bench/mutation.py                      # every target, smallest first
    python bench/mutation.py --module ring        # one target (repeatable)
    python bench/mutation.py --list               # the targets, their files and tests

Tool: cosmic-ray (pinned in the `dev` extra). It rewrites the module's file on disk for each
mutant and runs the target's own few test files, so every process sees the mutant: the loop
process the service spawns and the numba-jitted plant (recompiled from the mutated source)
alike, which mutmut's in-process trampolines would not reach.

Each target runs in a scratch copy of the work tree (tracked and untracked, not ignored), so an
interrupted run never leaves a mutant in the tree you work in; its cosmic-ray session stays
there and a second run resumes it. Before trusting a score the run checks that the unmutated
tests pass (baseline) and that one mutant known to break the module (`sentinel`) is killed.

Only the operators that change behaviour in ways a test should see are kept (KEEP): each
arithmetic operator to its inverse, each comparison to its boundary and its negation, and/or,
not, signs, loops run zero times, break/continue, exceptions. Not ±1 on every number
literal (cosmic-ray's NumberReplacer): it made 40 % of the mutants, most in layout constants,
and at 10–20 s a mutant on the shared machine the budget goes to the operators above.
Last line: JSON, per module made / killed / survived / timed out / not run, and the kill ratio.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = Path(os.environ.get("HYDRIG_MUTATION_DIR", "/tmp/hydrig-mutation"))


@dataclass(frozen=True)
class Target:
    paths: tuple[str, ...]  # the module files mutated
    tests: tuple[str, ...]  # pytest arguments: the few test files that should kill them
    #: A hand-made mutant that must be killed: (file, original text, broken text).
    sentinel: tuple[str, str, str]
    timeout_s: float = 60.0  # per mutant (a hung test is a kill: reported as timed out)
    extra: tuple[str, ...] = field(default=())


#: The two hypothesis runs of random bytes / random msgpack (35 s of the command tests' 60 s):
#: they prove the server survives anything; the seeded fuzz, the near misses against the
#: protocol's oracle and the named malformations judge each reply, in seconds.
_NOT_RANDOM_FUZZ = ("-k", "not test_random_bytes and not test_random_msgpack")

TARGETS: dict[str, Target] = {
    "ring": Target(
        ("daq/ring.py",),
        ("tests/loop/test_ring.py",),
        ("daq/ring.py", "self._next = k + 1", "self._next = k + 2"),
    ),
    "mailbox": Target(
        ("daq/loop/mailbox.py", "daq/loop/shm_mailbox.py"),
        ("tests/loop/test_mailbox_timing_rt.py", "tests/loop/test_loop_process.py"),
        ("daq/loop/shm_mailbox.py", "acquire(True, LOCK_TIMEOUT_S)", "acquire(True)"),
        timeout_s=120.0,
        # The mailbox's own tests, not the split service's (those start processes: minutes).
        extra=(
            "-k",
            "mailbox or withdrawn or withdrawal or true_outcome or payload_objects or "
            "unanswered or never_waits or unpickle or reply_area or request_area",
        ),
    ),
    "bounds": Target(
        ("daq/commands/bounds.py",),
        ("tests/telemetry/test_request_bounds.py", "tests/telemetry/test_request_schema.py"),
        ("daq/commands/bounds.py", "if count > limit:", "if count > 10 * limit:"),
    ),
    "roles": Target(
        ("daq/commands/server.py",),
        (
            "tests/telemetry/test_command_server_paths.py",
            "tests/telemetry/test_request_schema.py",
            "tests/telemetry/test_safety_lane.py",
            "tests/telemetry/test_security.py",
            "tests/telemetry/test_command_fuzz.py",
            "tests/telemetry/test_command_queue_bound.py",
        ),
        ("daq/commands/server.py", 'who.role != "controller" and', 'who.role == "x" and'),
        timeout_s=120.0,
        # The schema's own hypothesis runs (near misses, run names) judge spec.py, not the
        # server: 12 s of every surviving mutant's run here.
        extra=("-k", _NOT_RANDOM_FUZZ[1] + " and not near_miss and not record_start_names"),
    ),
    "spec": Target(
        ("daq/commands/spec.py", "daq/commands/errors.py"),
        (
            "tests/telemetry/test_command_spec.py",
            "tests/telemetry/test_command_errors.py",
            "tests/telemetry/test_request_schema.py",
            "tests/telemetry/test_command_fuzz.py",
        ),
        ("daq/commands/spec.py", "and math.isfinite(v)", "and v == v"),
        extra=_NOT_RANDOM_FUZZ,
    ),
    "interlocks": Target(
        ("daq/loop/interlocks.py",),
        (
            "tests/loop/test_interlocks.py",
            "tests/loop/test_stall.py",
            "tests/loop/test_sim_interlocks.py",
        ),
        (
            "daq/loop/interlocks.py",
            "np.add(lim, self.fe_base, out=lim)",
            "np.add(lim, 2 * self.fe_base, out=lim)",
        ),
        # Not the test that needs real-time overruns: on a loaded machine it fails unmutated.
        extra=("-k", "not in_real_time"),
    ),
    # The cycle's numeric path as it runs: the compiled kernels. Each mutant changes the hash
    # of the kernel sources (controller/compiled/jit.py), so numba compiles it afresh rather
    # than loading the unmutated machine code; the sentinel (a pressure check that never
    # fires) is killed only if it does. The tests run both paths and compare rows and trips.
    "loop": Target(
        ("daq/loop/kernel.py",),
        (
            "tests/loop/test_compiled_trips.py",
            "tests/loop/test_compiled_cycle.py",
            "tests/loop/test_loop.py",
            "tests/loop/test_interlocks.py",
            "tests/loop/test_kernel_boundaries.py",
            "tests/loop/test_station.py",  # the supply watch on both cycle paths
        ),
        ("daq/loop/kernel.py", "if v > p_max[k]:", "if v > 2.0 * p_max[k]:"),
        timeout_s=300.0,  # the first test of each mutant compiles the kernels
        extra=("-k", "not on_the_standard_experiment and not in_real_time"),
    ),
    # The Python cycle (the reference the compiled one must equal) and the compiled cycle's
    # Python glue: the state machine, commands, rare paths.
    "cycle": Target(
        ("daq/loop/cycle.py",),
        (
            "tests/loop/test_loop.py",
            "tests/loop/test_compiled_cycle.py",
            "tests/loop/test_alloc.py",
            "tests/loop/test_state.py",
            "tests/loop/test_stall.py",  # the real-time path and its overrun accounting
            "tests/loop/test_pacing_clock.py",  # the same paths' arithmetic, exact
            "tests/loop/test_compiled_trips.py",  # a compiled law that raises
            "tests/loop/test_station.py",  # jogs and drains (runners without a twin)
        ),
        ("daq/loop/cycle.py", "row[0] = self.seq", "row[0] = self.seq + 1"),
        timeout_s=300.0,
        # Not the service in its own process (the same cycle, 20 s of start-up per mutant).
        extra=("-k", "not on_the_standard_experiment and not through_the_service"),
    ),
    "writer": Target(
        ("daq/recording/writer.py",),
        (
            "tests/recording/test_writer.py",
            "tests/recording/test_writer_paths.py",
            "tests/recording/test_quota.py",
            "tests/recording/test_kill_bound.py",
        ),
        ("daq/recording/writer.py", "self._rows += n", "self._rows += n + 1"),
        timeout_s=120.0,
    ),
    "pid": Target(
        ("controller/pid.py",),
        ("tests/controller/test_pid.py",),
        ("controller/pid.py", "e = command - feedback", "e = feedback - command"),
    ),
    "amplitude_phase": Target(
        ("controller/amplitude_phase.py",),
        (
            "tests/controller/test_amplitude_phase.py",
            "tests/controller/test_amplitude_phase_rig.py",
        ),
        (
            "controller/amplitude_phase.py",
            "un = u + self.gain * (d - y) * u / y",
            "un = u + self.gain * (d - y) * u / y.conjugate()",
        ),
    ),
    "feedforward_chain": Target(
        ("controller/feedforward_chain.py",),
        ("tests/chain/test_feedforward_chain.py",),
        (
            "controller/feedforward_chain.py",
            "            return self.gear[j] * q, self.gear[j]",
            "            return self.gear[j] * q, 1.0",
        ),
    ),
    "chain_simdata": Target(
        ("estimator/chain_simdata.py",),
        ("tests/chain/test_chain_simdata.py",),
        (
            "estimator/chain_simdata.py",
            "            out[k, j] = u / m.kv[j]",
            "            out[k, j] = u * m.kv[j]",
        ),
    ),
    "compensation": Target(
        ("controller/compensation.py",),
        ("tests/controller/test_compensation.py",),
        ("controller/compensation.py", "        r = w / (-2.0 * lap)", "        r = w / (-lap)"),
    ),
    "tuning": Target(
        ("controller/tuning.py", "controller/hydraulic_linear.py"),
        (
            "tests/controller/test_tuning.py",
            "tests/controller/test_tuning_choice.py",
            "tests/controller/test_hydraulic_linear.py",
            "tests/telemetry/test_rigctl_tune.py",
        ),
        (
            "controller/tuning.py",
            "key=lambda c: (c[0].dp, off(c[1]), -c[2])",
            "key=lambda c: (off(c[1]), -c[2])",
        ),
    ),
    "checks": Target(
        ("controller/checks.py",),
        (
            "tests/live/test_check.py",  # the check's own paths (cost, period, progress)
            "tests/controller/test_experiment.py",
            "tests/params/test_valve_sine_check.py",
            "tests/controller/test_checks_edges.py",
            "tests/controller/test_runner_brake.py",  # brake_violations
            "tests/estimator/test_bulk_experiment.py",  # the valve sine's acceleration bound
        ),
        ("controller/checks.py", "bad = signed > sign * bound", "bad = signed > 2 * sign * bound"),
        timeout_s=120.0,
        # Not the two that start a service (its kernels compile first: minutes on a loaded
        # machine); the check they rely on is the one the other tests call directly.
        extra=("-k", "not the_service_refuses"),
    ),
    "rls": Target(
        ("estimator/rls.py",),
        ("tests/estimator/test_rls.py", "tests/estimator/test_random_walk.py"),
        ("estimator/rls.py", "if np.any(q > 0.0):", "if False:"),
    ),
    # The chain machine's batch from a recording (estimator/chain_batch.py) on its fast tests
    # (noise, floor, flags, σ bound): the slow tier's service recording costs ~1 min a mutant.
    "chain_batch": Target(
        ("estimator/chain_batch.py",),
        ("tests/chain/test_chain_batch.py",),
        ("estimator/chain_batch.py", "elif 3.0 * s >= abs(th):", "elif False:"),
    ),
    # The rows' classification and blocks every estimator uses (estimator/datause.py).
    "datause": Target(
        ("estimator/datause.py",),
        ("tests/estimator/test_datause.py", "tests/estimator/test_online_chunks.py"),
        ("estimator/datause.py", "ends = np.minimum(first_bad, next_start)", "ends = next_start"),
        timeout_s=120.0,
    ),
    "chain": Target(
        ("estimator/chain.py",),
        (
            "tests/estimator/test_chain_paths.py",
            "tests/estimator/test_random_walk.py",
            "tests/estimator/test_online_chunks.py",
            "tests/estimator/test_identification.py",
            "tests/estimator/test_structure.py",  # the batch's flagged parameters held
        ),
        ("estimator/chain.py", "self.age(N / self.fs)", "self.age(0.0)"),
        timeout_s=120.0,
        extra=("-k", "not batch"),  # the online estimates, not the batch fit
    ),
    # The batch fit's σ and identifiability (estimator/wls.py), on synthetic data only: the
    # simulated runs of test_trust / test_identification take minutes per mutant.
    "wls": Target(
        ("estimator/wls.py",),
        ("tests/estimator/test_wls_sigma.py", "tests/estimator/test_trust.py"),
        ("estimator/wls.py", "spread = 3.0 * np.sqrt(kappa)", "spread = 0.3 * np.sqrt(kappa)"),
        extra=(
            "-k",
            "not sim1dof and not faulted and not broken_wire and not pressure_gain_error and "
            "not time_gap and not outside_running and not segments_it_is_told and "
            "not no_motion and not held_joint and not still_joint",
        ),
    ),
    "spool": Target(
        ("estimator/spool.py",),
        ("tests/estimator/test_spool.py",),
        (
            "estimator/spool.py",
            "RETIME_TAPS = (-1.0 / 6.0, 5.0 / 6.0, 1.0 / 3.0)",
            "RETIME_TAPS = (0.0, 0.0, 1.0)",
        ),
    ),
    "refine": Target(
        ("estimator/refine.py",),
        ("tests/estimator/test_refine.py",),
        (
            "estimator/refine.py",
            'RATE_FIELDS = ("pd_cap", "pd_rod", "qdd")',
            'RATE_FIELDS = ("pd_cap", "pd_rod")',
        ),
    ),
    "bulk_experiment": Target(
        ("estimator/bulk_experiment.py",),
        ("tests/estimator/test_bulk_experiment.py", "tests/live/test_check.py"),
        (
            "estimator/bulk_experiment.py",
            "return max(0.5, float(np.floor(2.0 * FREQUENCY_FRACTION * f_h) / 2.0))",
            "return max(0.5, float(np.floor(FREQUENCY_FRACTION * f_h) / 2.0))",
        ),
    ),
    "batch": Target(
        ("estimator/batch.py",),
        (
            "tests/estimator/test_segment_rows.py",
            "tests/estimator/test_trust.py",
            # The small paths called directly (argument checks, defaults, trims, notes).
            "tests/estimator/test_batch_paths.py",
            # The batch end to end on short recorded and synthetic runs (45 s in all).
            "tests/estimator/test_identification.py",
            "tests/estimator/test_batch_accuracy.py",
            "tests/estimator/test_model_shapes.py",
            "tests/estimator/test_sensor_sigma.py",
            "tests/estimator/test_structure.py",
            "tests/estimator/test_rate_4khz.py",
            "tests/estimator/test_spool.py",
            "tests/estimator/test_closed_loop_choice.py",
            # identify_run with an oil law and no temperature channel (the span check's guard).
            "tests/profile/test_plant_sections.py",
        ),
        (
            "estimator/batch.py",
            "candidates = all_blocks if mdl.fluid else not_fluid_blocks",
            "candidates = all_blocks if not mdl.fluid else not_fluid_blocks",
        ),
    ),
    "oil_span": Target(
        ("estimator/oil_span.py",),
        ("tests/estimator/test_oil_span.py", "tests/estimator/test_batch_paths.py"),
        (
            "estimator/oil_span.py",
            "t = raw[used, TEMP_SLOT * nj]",
            "t = raw[:, TEMP_SLOT * nj]",
        ),
    ),
    "segment_rows": Target(
        ("estimator/segment_rows.py",),
        ("tests/estimator/test_segment_rows.py",),
        (
            "estimator/segment_rows.py",
            'self._fluid = {str(s.get("name")) for s in segs if s.get("identify") == "fluid"}',
            'self._fluid = {str(s.get("name")) for s in segs}',
        ),
    ),
    # The closed-loop choice's search and its wiring into the batch (a fake loop: seconds).
    "closed_loop_choice": Target(
        ("estimator/closed_loop_choice.py",),
        ("tests/estimator/test_closed_loop_choice.py",),
        (
            "estimator/closed_loop_choice.py",
            "if c < best[nm][0]:",
            "if c > best[nm][0]:",
        ),
    ),
    # The real-rig family's regressors against the simulator's own equations, the compiled
    # twin, the validation plant, the truth.
    "models_lin": Target(
        ("estimator/models_lin.py",),
        (
            "tests/estimator/test_models_lin.py",
            "tests/estimator/test_lin_compiled.py",
            "tests/estimator/test_sim_truth.py",
        ),
        ("estimator/models_lin.py", "phi[:, rr, c + 6] = leak", "phi[:, rr, c + 6] = -leak"),
    ),
    "sensor_sigma": Target(
        ("estimator/sensor_sigma.py",),
        ("tests/estimator/test_sensor_sigma.py",),
        (
            "estimator/sensor_sigma.py",
            "unsigned = fit.identifiable & (3.0 * total > np.abs(theta))",
            "unsigned = fit.identifiable & (3.0 * total > 2.0 * np.abs(theta))",
        ),
    ),
    "oil_temperature": Target(
        ("daq/service/procedure_temperature.py",),
        (
            "tests/station/test_oil_temperature.py",
            "tests/station/test_procedures.py",
            "-k",
            "oil or twin",
        ),
        (
            "daq/service/procedure_temperature.py",
            "offset=m.value - gain * ref,",
            "offset=m.value - ref,",
        ),
        timeout_s=120.0,
    ),
    "station": Target(
        ("daq/loop/station.py",),
        (
            "tests/loop/test_station.py",
            "tests/loop/test_station_refusals.py",
            "tests/station/test_pressure_shunt.py",
            "tests/station/test_station_paths.py",  # bit order, a jog from above, relay writes
        ),
        (
            "daq/loop/station.py",
            "if not supply >= st.supply_arm:",
            "if not supply >= st.supply_min:",
        ),
        timeout_s=120.0,
    ),
    "commands": Target(
        ("daq/loop/commands.py",),
        (
            "tests/loop/test_state.py",
            "tests/loop/test_request_refusals.py",
            "tests/loop/test_loop.py",
            "tests/loop/test_interlocks.py",
            "tests/loop/test_control_api.py",
            "tests/loop/test_compiled_cycle.py",
            "tests/loop/test_runner_failures.py",
        ),
        (
            "daq/loop/commands.py",
            "if not il.soft_min[j] <= q[j] <= il.soft_max[j]:",
            "if not il.soft_min[j] - 1.0 <= q[j] <= il.soft_max[j]:",
        ),
        timeout_s=180.0,
    ),
    "fit_warnings": Target(
        ("estimator/fit_warnings.py",),
        ("tests/estimator/test_fit_warning_words.py",),
        ("estimator/fit_warnings.py", "if k > KAPPA_MISMATCH", "if k > 2 * KAPPA_MISMATCH"),
    ),
    "sim_effects": Target(
        ("controller/plant/dynamics.py",),
        # The effects, and the rigid-body and flow equations they sit on (against the chain's
        # own Newton–Euler: an independent derivation of the same planar arm).
        (
            "tests/sim/test_effects.py",
            "tests/sim/test_plant_guards.py",
            "tests/chain/test_planar_equivalence.py",
        ),
        ("controller/plant/dynamics.py", "(temp - E[E_T_REF])", "(E[E_T_REF] - temp)"),
        timeout_s=300.0,
    ),
}

#: The operators kept (see the module doc); every other is marked skipped before the run:
#: each arithmetic operator to its inverse, each comparison to its boundary and negation.
_BINARY = "Add Sub, Sub Add, Mul Div, Div Mul, FloorDiv Div, Mod FloorDiv, Pow Mul, BitOr BitAnd, "
_BINARY += "BitAnd BitOr, LShift RShift, RShift LShift"
_COMPARE = (
    "Lt LtE, LtE Lt, Gt GtE, GtE Gt, Lt GtE, Gt LtE, Eq NotEq, NotEq Eq, Is IsNot, IsNot Is, "
)
_COMPARE += "In NotIn, NotIn In"
KEEP = [
    *("core/ReplaceBinaryOperator_" + p.replace(" ", "_") for p in _BINARY.split(", ")),
    *("core/ReplaceComparisonOperator_" + p.replace(" ", "_") for p in _COMPARE.split(", ")),
    "core/ReplaceUnaryOperator_USub_UAdd",
    "core/ReplaceUnaryOperator_Delete_Not",
    "core/ReplaceTrueWithFalse",
    "core/ReplaceFalseWithTrue",
    "core/ReplaceAndWithOr",
    "core/ReplaceOrWithAnd",
    "core/ReplaceBreakWithContinue",
    "core/ReplaceContinueWithBreak",
    "core/ExceptionReplacer",
    "core/ZeroIterationForLoop",
]


def _run(cmd: list[str], cwd: Path, timeout: float | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(cwd), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _scratch(name: str, fresh: bool) -> tuple[Path, bool]:
    """A copy of the work tree (tracked and untracked files, not ignored ones), and whether it
    is an earlier session's. Resumed, every file but the mutated ones is brought up to date, so
    that tests written since the session began judge what is left (and the survivors again)."""
    dest = SCRATCH / name / "tree"
    resumed = dest.exists() and not fresh
    if not resumed:
        shutil.rmtree(dest.parent, ignore_errors=True)
    mutated = set(TARGETS[name].paths) if resumed else set()
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file() and rel not in mutated:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest, resumed


def rejudge_survivors(session: Path) -> int:
    """Forget the survivors' results: the run judges them again with the present tests."""
    db = sqlite3.connect(session)
    try:
        with db:
            cur = db.execute("DELETE FROM work_results WHERE lower(test_outcome) = 'survived'")
        return cur.rowcount
    finally:
        db.close()


def _restore_originals(target: Target, tree: Path) -> None:
    """The target's files as copied when the session began (kept beside the tree)."""
    keep = tree.parent / "originals"
    for rel in target.paths:
        saved = keep / rel
        if saved.exists():
            shutil.copy2(saved, tree / rel)
        else:
            saved.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(tree / rel, saved)


Pos = tuple[int, int]  # (line from 1, column from 0), as in `ast` and cosmic-ray


def _span(node: ast.AST) -> tuple[Pos, Pos]:
    end = (node.end_lineno or node.lineno, node.end_col_offset or 0)
    return (node.lineno, node.col_offset), end


def never_executed(source: str) -> tuple[list[tuple[Pos, Pos]], list[tuple[Pos, Pos]]]:
    """Spans where a mutant cannot change behaviour, and the spans inside them that can:
    type annotations under `from __future__ import annotations` (kept as strings, never
    evaluated: `X | None` → `X & None` is the same program) and a signature's own markers
    (`*` → `/` before keyword-only parameters that every caller passes by keyword); the
    default values in a signature stay mutable."""
    tree = ast.parse(source)
    lazy = any(
        isinstance(n, ast.ImportFrom)
        and n.module == "__future__"
        and any(a.name == "annotations" for a in n.names)
        for n in tree.body
    )
    skip: list[tuple[Pos, Pos]] = []
    keep: list[tuple[Pos, Pos]] = []
    for node in ast.walk(tree):
        if lazy and isinstance(node, ast.AnnAssign):
            skip.append(_span(node.annotation))
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
        if lazy:
            skip += [_span(p.annotation) for p in params if p is not None and p.annotation]
            if node.returns is not None:
                skip.append(_span(node.returns))
        first = node.body[0]
        skip.append(((node.lineno, node.col_offset), (first.lineno, first.col_offset)))
        keep += [_span(d) for d in [*a.defaults, *a.kw_defaults] if d is not None]
    return skip, keep


def _inside(pos: Pos, span: tuple[Pos, Pos]) -> bool:
    return span[0] <= pos < span[1]


def skip_unexecuted(session: Path, tree: Path) -> int:
    """Mark the mutants in `never_executed` spans skipped (cosmic-ray has no such filter)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    spans: dict[str, tuple[list[tuple[Pos, Pos]], list[tuple[Pos, Pos]]]] = {}
    n = 0
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            m = item.mutations[0]
            rel = str(m.module_path)
            if rel not in spans:
                spans[rel] = never_executed((tree / rel).read_text())
            skip, keep = spans[rel]
            pos = (int(m.start_pos[0]), int(m.start_pos[1]))
            if any(_inside(pos, sp) for sp in skip) and not any(_inside(pos, k) for k in keep):
                result = WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="never executed")
                db.set_result(item.job_id, result)
                n += 1
    return n


def _test_command(target: Target) -> list[str]:
    return [
        sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
        "-m", "slow or not slow", f"--timeout={round(target.timeout_s)}",
        *target.tests, *target.extra,
    ]  # fmt: skip


def _config(name: str, target: Target, tree: Path) -> Path:
    import shlex

    keep = "|".join(k.replace("/", r"\/") for k in KEEP)
    paths = ", ".join(json.dumps(p) for p in target.paths)
    text = f"""[cosmic-ray]
module-path = [{paths}]
timeout = {target.timeout_s * 2}
excluded-modules = []
test-command = {json.dumps(shlex.join(_test_command(target)))}

[cosmic-ray.distributor]
name = "local"

[cosmic-ray.filters.operators-filter]
exclude-operators = [{json.dumps(f"^(?!({keep})$).*")}]
"""
    path = tree.parent / "cosmic-ray.toml"
    path.write_text(text)
    return path


def _sentinel_killed(target: Target, tree: Path) -> tuple[bool, str]:
    """Whether the tests fail on the hand-made mutant (a score means nothing otherwise)."""
    rel, old, new = target.sentinel
    path = tree / rel
    text = path.read_text()
    if text.count(old) < 1:
        return False, f"sentinel text not found in {rel}: {old!r}"
    path.write_text(text.replace(old, new, 1))
    try:
        res = _run(_test_command(target), tree, timeout=target.timeout_s * 4)
        return res.returncode != 0, res.stdout[-400:]
    except subprocess.TimeoutExpired:
        return True, "timed out (a kill)"
    finally:
        path.write_text(text)


def _initialised(session: Path) -> bool:
    if not session.exists():
        return False
    db = sqlite3.connect(session)
    try:
        query = "SELECT name FROM sqlite_master WHERE name = 'work_items'"
        return bool(db.execute(query).fetchall())
    finally:
        db.close()


def _counts(session: Path) -> dict[str, int]:
    db = sqlite3.connect(session)
    try:
        rows = db.execute(
            "SELECT r.worker_outcome, r.test_outcome, r.output FROM work_items w "
            "LEFT JOIN work_results r ON w.job_id = r.job_id"
        ).fetchall()
    finally:
        db.close()
    out = {"made": 0, "killed": 0, "survived": 0, "timed_out": 0, "incompetent": 0, "not_run": 0}
    for worker, test, output in rows:
        worker, test = (str(x).lower() if x is not None else None for x in (worker, test))
        if worker == "skipped":
            continue
        out["made"] += 1
        if worker is None:
            out["not_run"] += 1
        elif test == "killed" and output == "timeout":  # cosmic-ray: a timeout is a kill
            out["timed_out"] += 1
        elif test == "killed":
            out["killed"] += 1
        elif test == "survived":
            out["survived"] += 1
        else:
            out["incompetent"] += 1  # the mutant broke the import or the worker itself
    return out


def survivors(session: Path) -> list[str]:
    """`file:line  operator  occurrence` of every surviving mutant."""
    db = sqlite3.connect(session)
    try:
        rows = db.execute(
            "SELECT m.module_path, m.start_pos_row, m.operator_name, m.occurrence "
            "FROM mutation_specs m JOIN work_results r ON m.job_id = r.job_id "
            "WHERE lower(r.test_outcome) = 'survived' ORDER BY m.module_path, m.start_pos_row"
        ).fetchall()
    finally:
        db.close()
    return [f"{p}:{line}  {op}  {occ}" for p, line, op, occ in rows]


def run_target(name: str, budget_s: float, fresh: bool) -> dict[str, object]:
    target = TARGETS[name]
    tree, resumed = _scratch(name, fresh)
    cfg = _config(name, target, tree)
    session = tree.parent / "session.sqlite"
    cr = [sys.executable, "-m", "cosmic_ray.cli"]
    report: dict[str, object] = {"files": list(target.paths), "tests": list(target.tests)}
    t0 = time.monotonic()
    _restore_originals(target, tree)  # an interrupted run leaves its last mutant on disk
    base = _run(_test_command(target), tree, timeout=target.timeout_s * 4)
    if base.returncode != 0:
        report["error"] = "the tests fail unmutated: " + base.stdout[-400:]
        return report
    killed, why = _sentinel_killed(target, tree)
    report["sentinel_killed"] = killed
    if not killed:
        report["error"] = f"the known-bad mutant survived, score not trusted: {why}"
        return report
    if not _initialised(session):
        session.unlink(missing_ok=True)
        _run([*cr, "init", str(cfg), str(session)], tree).check_returncode()
        filt = [sys.executable, "-m", "cosmic_ray.tools.filters.operators_filter"]
        _run([*filt, str(session), str(cfg)], tree).check_returncode()
        pragma = [sys.executable, "-m", "cosmic_ray.tools.filters.pragma_no_mutate"]
        _run([*pragma, str(session)], tree).check_returncode()
        skip_unexecuted(session, tree)
    elif resumed:
        report["rejudged"] = rejudge_survivors(session)
    left = budget_s - (time.monotonic() - t0)
    try:
        _run([*cr, "exec", str(cfg), str(session)], tree, timeout=max(left, 1.0))
    except subprocess.TimeoutExpired:
        report["stopped"] = f"budget of {budget_s:.0f} s spent; run again to resume"
    report.update(_counts(session))
    made, done = int(report["made"]), int(report["killed"]) + int(report["timed_out"])
    judged = made - int(report["not_run"]) - int(report["incompetent"])
    report["killed_pct"] = round(100.0 * done / judged, 1) if judged else None
    report["survivors"] = survivors(session)
    report["session"] = str(session)
    # Every mutant of a kernel source compiled into a cache directory of its own (a few MB
    # each, never reused): keep none (the next baseline compiles once).
    for stale in tree.glob("**/__pycache__/kernels-*"):
        shutil.rmtree(stale, ignore_errors=True)
    report["wall_s"] = round(time.monotonic() - t0, 1)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--module", action="append", choices=sorted(TARGETS), help="repeatable")
    ap.add_argument("--budget-s", type=float, default=1800.0, help="per module, then stop")
    ap.add_argument("--fresh", action="store_true", help="new copy and session (no resume)")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        for name, t in TARGETS.items():
            print(f"{name:12s} {' '.join(t.paths)}\n{'':12s} tests: {' '.join(t.tests)}")
        return
    names = args.module or sorted(TARGETS, key=lambda n: sum(
        (ROOT / p).stat().st_size for p in TARGETS[n].paths))  # fmt: skip
    results: dict[str, object] = {}
    for name in names:
        results[name] = res = run_target(name, args.budget_s, args.fresh)
        for line in res.get("survivors", []):  # type: ignore[union-attr]
            print(f"{name}: survived {line}", file=sys.stderr)
        brief = {k: v for k, v in res.items() if k != "survivors"}  # type: ignore[union-attr]
        print(f"{name}: {json.dumps(brief)}", file=sys.stderr)
    summary = {
        n: {k: r.get(k) for k in ("made", "killed", "survived", "timed_out", "incompetent",
                                   "not_run", "killed_pct", "sentinel_killed", "error")}
        for n, r in results.items() if isinstance(r, dict)
    }  # fmt: skip
    print(json.dumps({"mutation": summary, "date": time.strftime("%Y-%m-%d")}))


if __name__ == "__main__":
    main()
