"""`OnlineIdentifier`: telemetry sample rows in, running estimates out (no I/O here).

    ident = OnlineIdentifier(profile, layout_columns)   # columns as in the `meta` message
    ident.update_rows(rows)                            # (N, width) float64, consecutive seq
    ident.gap()                                        # a seq gap: filters restart
    est = ident.estimate()                             # Estimate: θ, names, cov, %σ, …

Rows are processed in chunks of `chunk_s` of rig time (default 0.1 s): telemetry arrives in
messages of 20 rows, and the fixed cost of one pass through classification, conditioning,
regressors and RLS (~40 NumPy calls per model) dominated at that size (issue 13: 8.8k rows/s
under load). `estimate()`, `gap()`, `reset()`, a change of `freeze` and `flush()` process what
is pending first, so every read-out sees every row given so far.

Only the `eng.<channel>` columns of the profile's input channels are read (resolver → q,
pressure_cap/pressure_rod → p⁺/p⁻, lvdt → u, potentiometer → s); without a potentiometer the
piston position comes from the resolver through the known cylinder geometry. With a
potentiometer on every joint the regressors' joint angle q is the potentiometer's, through the
same geometry, with the resolver's mean offset (`estimator.angles`: 5–7× less noise in q̈).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from controller.plant.dynamics import cylinder
from controller.plant.params import PlantParams
from daq.profile.plant import known_params, plant_params
from daq.profile.schema import Profile
from estimator.angles import AngleFusion
from estimator.chain import N_SIGNALS, TEMP_SLOT, ModelChain, unmeasured_oil_c
from estimator.datause import DataUse, blocks, classify_stream
from estimator.models import LinearModel, load_models
from estimator.rls import RlsConfig
from estimator.segment_rows import FluidSpans, in_spans
from estimator.shape_search import with_configured_shape, with_configured_switches
from estimator.spool import SpoolFusion, valve_commands, valve_converters
from estimator.structure import Structure, WithStructure, describe

log = logging.getLogger(__name__)

#: Header columns that decide whether a row is usable (estimator.datause.classify).
HEADER_CHECKS = ("t", "seq", "state", "fault", "flags")
ROLE_SLOT = {"resolver": 0, "potentiometer": 1, "pressure_cap": 2, "pressure_rod": 3, "lvdt": 4}


@dataclass
class Estimate:
    names: list[str]
    theta: np.ndarray
    cov: np.ndarray
    sigma_pct: np.ndarray
    #: Per model: name → residual variance (normalised equations), samples, excitation.
    models: dict[str, dict[str, Any]]
    samples: int
    gaps: int
    t: float
    truth: np.ndarray | None = None
    #: Convergence history: times (K,) and θ (K, n_params).
    history_t: np.ndarray = field(default_factory=lambda: np.zeros(0))
    history_theta: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    #: Rows seen, used and left out, and why (estimator.datause).
    data: DataUse = field(default_factory=DataUse)
    #: The structure the models ran (Coulomb band, valve null and lap) and where it came
    #: from, in words (estimator.structure.describe).
    structure: str = ""
    #: Sentences about the whole estimate (e.g. a structure not chosen from data).
    warnings: list[str] = field(default_factory=list)

    @property
    def residual_var(self) -> dict[str, float]:
        return {k: v["residual_var"] for k, v in self.models.items()}


def column_names(layout_columns: Sequence[Any]) -> list[str]:
    """Names from `meta.columns` dicts, `sample_layout.Column`s or plain strings."""
    out = []
    for c in layout_columns:
        if isinstance(c, str):
            out.append(c)
        elif isinstance(c, dict):
            out.append(str(c["name"]))
        else:
            out.append(str(c.name))
    return out


class OnlineIdentifier:
    def __init__(
        self,
        profile: Profile,
        layout_columns: Sequence[Any],
        models: Sequence[LinearModel] | None = None,
        rls_config: RlsConfig | None = None,
        prior: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
        history_dt: float = 0.1,
        fuse_angles: bool = True,
        fuse_spool: bool = True,
        running_only: bool = True,
        chunk_s: float = 0.1,
        structure: Structure | None = None,
        fluid_only: Sequence[tuple[int, float]] = (),
    ) -> None:
        """`structure`: the constants the batch chose (estimator.structure), in place of the
        profile's `[estimator]` keys; ignored when `models` are given (already built).
        `fluid_only`: [seq from, seq to) spans whose rows only the fluid models take (the
        segments an experiment marks `identify = "fluid"`, estimator.segment_rows); every other
        model's filters restart after them, as the batch's blocks stop at them."""
        if profile.plant is None:
            raise ValueError(
                "the estimator needs the [plant] section of the profile for the known geometry "
                "(areas, pins, volumes, stroke, supply pressure)"
            )
        self.params: PlantParams = plant_params(profile)
        self.nj = len(profile.joints)
        cfg = profile.estimator if hasattr(profile, "estimator") else None
        self.structure = "the models as given"
        self.warnings: list[str] = []
        from_batch = False
        if models is None:
            models = load_models(
                getattr(cfg, "model", None), self.params, prior_params=known_params(profile)
            )
            if structure is not None and not structure.empty():
                models = configure_models(models, WithStructure(cfg, structure))
            elif cfg is not None:
                models = configure_models(models, cfg)
            self.structure = describe(structure, cfg)
            from_batch = structure is not None and not structure.empty()
            chosen = [m.name for m in models if m.shape is not None or m.switches is not None]
            if chosen and not from_batch:
                self.warnings.append(unchosen_structure(chosen, self.structure))
                log.warning("%s", self.warnings[-1])
        if rls_config is None and cfg is not None:
            rls_config = RlsConfig(forgetting=cfg.forgetting, trace_max=cfg.trace_max)
        self.fs = profile.rig.loop_rate_hz
        walks = random_walks(models, cfg)
        priors = {m.name: (prior or {}).get(m.name, (None, None)) for m in models}
        self.chains = [
            ModelChain(
                m,
                self.fs,
                self.nj,
                rls_config,
                theta0=priors[m.name][0],
                cov0=priors[m.name][1],
                random_walk=w,
            )
            for m, w in zip(models, walks, strict=True)
        ]
        # The parameters the batch flagged, held at the values it used (estimator.structure).
        if structure is not None and structure.held and from_batch:
            held = structure.held_values()
            taken = {nm for c in self.chains for nm in c.hold(held)}
            unknown = [nm for nm in held if nm not in taken]
            if unknown:
                raise ValueError(
                    f"{structure.source}: held_names {unknown} are no parameters of this "
                    f"profile's models ({', '.join(c.model.name for c in self.chains)}): "
                    "a batch parameter file of another rig or model family?"
                )
        names = column_names(layout_columns)
        self._index = self._map_columns(profile, names)
        self._fill = np.zeros(N_SIGNALS * self.nj)
        self._fill[TEMP_SLOT * self.nj : (TEMP_SLOT + 1) * self.nj] = unmeasured_oil_c(self.params)
        self._t_col = names.index("t")
        #: Header columns that say whether a row is usable (estimator.datause).
        self._header = {c: names.index(c) for c in HEADER_CHECKS if c in names}
        self.running_only = running_only
        self.data = DataUse()
        self._prev = (np.nan, np.nan)  # (t, seq) of the last row seen
        # Potentiometer angle for the regressors where every joint has one (estimator.angles).
        have_s = bool(np.all(self._index[self.nj : 2 * self.nj] >= 0))
        self._fusion = AngleFusion(self.params, self.nj) if fuse_angles and have_s else None
        # The spool with the LVDT's noise replaced above 2 Hz by the command's, as the sampled
        # pressure rate sees it (estimator.spool), online as in the batch.
        cmds = valve_commands(profile) if fuse_spool else None
        self._cmd_index: np.ndarray | None = None
        self._spool: SpoolFusion | None = None
        if cmds is not None and all(c in names for c in cmds):
            self._cmd_index = np.array([names.index(c) for c in cmds])
            self._spool = SpoolFusion(
                self.params, self.nj, self.fs, converters=valve_converters(profile)
            )
        self.gaps = 0
        self.rows = 0
        self.t = 0.0
        self.history_dt = history_dt
        self._hist_t: list[float] = []
        self._hist_theta: list[np.ndarray] = []
        self._raw = np.zeros((0, N_SIGNALS * self.nj))
        self._continues = True  # the last row seen was usable: the next may continue it
        if not chunk_s >= 0.0:
            raise ValueError(f"chunk_s must be ≥ 0 (s of rig time), got {chunk_s}")
        #: Rows given but not yet processed (a buffer reused from chunk to chunk).
        self._chunk = max(1, round(chunk_s * self.fs))
        self._pending = np.zeros((0, len(names)))
        self._n_pending = 0
        self._frozen = False
        self._fluid = FluidSpans()
        self._fluid.spans = sorted(fluid_only)
        self._seq_col = names.index("seq") if "seq" in names else -1
        self._skipping = False  # the last row pushed was one the other models left out

    def _map_columns(self, profile: Profile, names: list[str]) -> np.ndarray:
        idx = np.full(N_SIGNALS * self.nj, -1)
        for ji, j in enumerate(profile.joints):
            for role, slot in ROLE_SLOT.items():
                ch = profile.joint_channel(j.name, role)  # type: ignore[arg-type]
                if ch is None:
                    continue
                col = f"eng.{ch.name}"
                if col not in names:
                    raise ValueError(f"telemetry layout has no column '{col}' (joint {j.name})")
                idx[slot * self.nj + ji] = names.index(col)
        # The oil temperature, repeated per joint, where an oil law uses it (as batch:
        # estimator.observation.signals_from_columns); unmapped slots hold `_fill`.
        oil = profile.oil_temperature if self.params.oil is not None else None
        if oil is not None:
            col = f"eng.{oil.name}"
            if col not in names:
                raise ValueError(f"telemetry layout has no column '{col}' (the oil temperature)")
            idx[TEMP_SLOT * self.nj : (TEMP_SLOT + 1) * self.nj] = names.index(col)
        need_u = any(m.model.name == "fluid" for m in self.chains)
        if need_u and np.any(idx[4 * self.nj : 5 * self.nj] < 0):
            raise ValueError("the fluid model needs an 'lvdt' (spool) channel on every joint")
        return idx

    def event(self, header: Mapping[str, Any]) -> None:
        """A service event (telemetry's `event` topic): an experiment's `segment` boundaries
        and its definition mark the rows only the fluid models take (`fluid_only`, live)."""
        self._fluid.feed(header)

    def gap(self) -> None:
        """Samples were lost: derivatives across the gap would be wrong, so restart filters."""
        self.flush()
        self.gaps += 1
        self.data.gaps += 1
        self._prev = (np.nan, np.nan)  # the caller counted this break; do not count it again
        self._restart()

    def _restart(self) -> None:
        for c in self.chains:
            c.reset_continuity()
        if self._spool is not None:
            self._spool.reset()

    def update_rows(self, rows: np.ndarray) -> int:
        """Telemetry rows (N, width) in seq order. Rows outside RUNNING (if `running_only`),
        with a fault or interlock flag are left out; a jump in `t` or `seq` (skipped cycles, a
        stall, lost rows) or a left-out row restarts the filters (estimator.datause). Rows are
        buffered up to a chunk (see the module doc). Returns the regression samples that the
        rows processed by this call gave (0 while they wait in the buffer)."""
        rows = np.asarray(rows, dtype=np.float64)
        N = rows.shape[0]
        if N == 0:
            return 0
        if rows.ndim != 2 or rows.shape[1] != self._pending.shape[1]:
            raise ValueError(
                f"rows must have shape (N, {self._pending.shape[1]}) (the layout's columns), "
                f"got {rows.shape}"
            )
        k = self._n_pending
        if k == 0 and N >= self._chunk:
            return self._process(rows)
        if self._pending.shape[0] < k + N:
            grown = np.zeros((max(k + N, 2 * self._chunk), rows.shape[1]))
            grown[:k] = self._pending[:k]
            self._pending = grown
        self._pending[k : k + N] = rows
        self._n_pending = k + N
        return self.flush() if self._n_pending >= self._chunk else 0

    def flush(self) -> int:
        """Process the buffered rows now; returns the regression samples they gave."""
        k = self._n_pending
        if k == 0:
            return 0
        self._n_pending = 0
        return self._process(self._pending[:k])

    def _process(self, rows: np.ndarray) -> int:
        N = rows.shape[0]
        if N == 0:
            return 0
        cls, self._prev = classify_stream(
            rows, self._header, 1.0 / self.fs, self.data,
            running_only=self.running_only, previous=self._prev,
        )  # fmt: skip
        self.gaps += cls.gaps
        if cls.gap_s > 0.0:  # the parameters drift on while rows are missing
            for c in self.chains:
                c.age(cls.gap_s)
        if self._continues and cls.good.all() and not cls.breaks.any():
            return self._push(rows)
        used = 0
        for b in blocks(cls.good, cls.breaks):
            if cls.breaks[b.start] or b.start > 0 or not self._continues:
                self._restart()
            used += self._push(rows[b])
        self._continues = bool(cls.good[-1])
        self.t = float(rows[-1, self._t_col])
        return used

    def _push(self, rows: np.ndarray) -> int:
        N = rows.shape[0]
        self._continues = True
        if self._raw.shape[0] < N:
            self._raw = np.zeros((N, N_SIGNALS * self.nj))
        raw = self._raw[:N]
        nj = self.nj
        for k, col in enumerate(self._index):
            raw[:, k] = rows[:, col] if col >= 0 else self._fill[k]
        if np.any(self._index[nj : 2 * nj] < 0):  # no potentiometer: s from the resolver
            s, _ = cylinder(self.params, raw[:, :nj])
            raw[:, nj : 2 * nj] = s
        elif self._fusion is not None:
            self._fusion.apply(raw)
        if self._spool is not None and self._cmd_index is not None:
            self._spool.apply(raw, rows[:, self._cmd_index])
        spans = self._fluid.spans
        skip = None if self._seq_col < 0 or not spans else in_spans(rows[:, self._seq_col], spans)
        used = 0
        for c in self.chains:
            if skip is None or c.model.fluid or (not skip.any() and not self._skipping):
                used = c.push(raw)
                continue
            for b in blocks(~skip, np.zeros(N, dtype=bool)):
                if b.start > 0 or self._skipping:  # rows left out just before: a break
                    c.reset_continuity()
                used = c.push(raw[b])
        if skip is not None:
            self._skipping = bool(skip[-1])
        self.rows += N
        self.t = float(rows[-1, self._t_col])
        if not self._hist_t or self.t - self._hist_t[-1] >= self.history_dt:
            self._hist_t.append(self.t)
            self._hist_theta.append(np.concatenate([c.theta() for c in self.chains]))
        return used

    def freeze(self, frozen: bool = True) -> None:
        if frozen == self._frozen:
            return
        self.flush()  # rows given before the change are processed under the old state
        self._frozen = frozen
        for c in self.chains:
            c.rls.frozen = frozen

    def reset(self) -> None:
        """Back to each chain's prior (the estimate restarts; filters keep running)."""
        self.flush()
        for c in self.chains:
            c.reset_to_prior()

    def estimate(self) -> Estimate:
        self.flush()
        names: list[str] = []
        thetas, covs, sig = [], [], []
        models: dict[str, dict[str, Any]] = {}
        truth: list[np.ndarray] | None = []
        for c in self.chains:
            names += list(c.model.names)
            thetas.append(c.theta())
            covs.append(c.covariance())
            sig.append(c.sigma_pct())
            emin, cond = c.excitation()
            models[c.model.name] = {
                "names": list(c.model.names),
                "residual_var": c.rls.residual_variance(),
                "output_residual_var": c.rls.output_residual_variance().tolist(),
                "samples": c.rls.samples,
                "skipped": c.rls.skipped,
                "rejected": c.rejected,
                "correlation_factor": c.correlation(),
                "info_min_eig": emin,
                "info_cond": cond,
                "frozen": c.rls.frozen,
                # Drift tracking: the random walk per parameter (% per √s; 0 = constant) and λ.
                "random_walk_pct": (100.0 * c.random_walk).tolist(),
                "forgetting": c.rls.config.forgetting,
            }
            if truth is not None and c.model.truth is not None:
                truth.append(np.asarray(c.model.truth))
            else:
                truth = None
        self.data.used = max(c.rls.samples for c in self.chains)
        self.data.short_block = max(
            0, self.data.rows - self.data.not_running - self.data.faulted - self.data.used
        )
        n = len(names)
        cov = np.zeros((n, n))
        o = 0
        for C in covs:
            k = C.shape[0]
            cov[o : o + k, o : o + k] = C
            o += k
        return Estimate(
            names=names,
            theta=np.concatenate(thetas),
            cov=cov,
            sigma_pct=np.concatenate(sig),
            models=models,
            samples=min(c.rls.samples for c in self.chains),
            gaps=self.gaps,
            t=self.t,
            truth=None if truth is None else np.concatenate(truth),
            history_t=np.asarray(self._hist_t),
            history_theta=np.asarray(self._hist_theta),
            data=replace(self.data),
            structure=self.structure,
            warnings=list(self.warnings),
        )


def unchosen_structure(models: Sequence[str], structure: str) -> str:
    """Why an online estimate on a structure nobody chose from data is conditional. A family
    linear only once its Coulomb band and valve null and lap are fixed (estimator.models_lin)
    is exact only at the plant's own values; the batch chooses them by least residual, the RLS
    cannot. Run on hand-set values, the estimates absorb the difference and their σ, which
    count only the noise, do not carry it: on the simulator's realistic plant 22 of 53 lay
    outside ±3σ. So every parameter is named conditional, in words (error bars are a promise)."""
    return (
        f"every parameter of {', '.join(models)} is conditional on a structure not chosen from "
        f"data ({structure}), and its σ does not count that: a batch fit (`rigctl identify`) "
        "chooses the structure, and `rig-estimator --structure <its batch-params.toml>` runs it"
    )


def random_walks(models: Sequence[LinearModel], cfg: Any) -> list[np.ndarray]:
    """Per model, the relative random walk of each parameter (fraction per √s) from the
    profile's `[estimator] random_walk_pct` and `random_walk` (a parameter's entry, then its
    model's, then the default). A name that is neither a model nor a parameter is an error."""
    default = float(getattr(cfg, "random_walk_pct", 0.0) or 0.0)
    by_name: dict[str, float] = dict(getattr(cfg, "random_walk", None) or {})
    known = {m.name for m in models} | {p for m in models for p in m.names}
    unknown = sorted(set(by_name) - known)
    if unknown:
        raise ValueError(
            f"[estimator] random_walk: no model or parameter named {', '.join(unknown)}; "
            f"known: {', '.join(sorted(known))}"
        )
    out = []
    for m in models:
        base = by_name.get(m.name, default)
        out.append(np.array([by_name.get(p, base) for p in m.names], dtype=float) / 100.0)
    return out


#: `[estimator]` conditioning keys per model role. A model's role is its name up to the first
#: "_": the reference family's `mechanical`/`fluid` and the real-rig family's
#: `mechanical_lin`/`fluid_lin` (estimator.models_lin) alike.
CONDITIONING_KEYS = {
    "mechanical": ("mech_cutoff_hz", "mech_taps"),
    "fluid": ("fluid_cutoff_hz", "fluid_taps"),
}


def model_role(model: LinearModel) -> str:
    return model.name.split("_", 1)[0]


def configure_models(models: Sequence[LinearModel], cfg: Any) -> list[LinearModel]:
    """The models running the profile's `[estimator]` settings: conditioning per role, the
    Coulomb band of a model with a shape, the valve constants of a model with switches. A key
    that is set but acts on no model of the chosen family is refused, naming the key and the
    family, rather than silently ignored."""
    out = [with_configured_switches(with_configured_shape(m, cfg), cfg) for m in models]
    taken: set[str] = set()
    for i, m in enumerate(out):
        role_keys = CONDITIONING_KEYS.get(model_role(m))
        if role_keys is not None:
            cutoff, taps = (getattr(cfg, k, None) for k in role_keys)
            out[i] = m.with_conditioning(cutoff, taps)
            taken.update(role_keys)
        if m.shape is not None:
            taken.add("coulomb_band_m_s")
        if m.switches is not None:
            taken.update(("valve_null_offset_v", "valve_lap_v"))
    keys = [k for ks in CONDITIONING_KEYS.values() for k in ks]
    for key in [*keys, "coulomb_band_m_s", "valve_null_offset_v", "valve_lap_v"]:
        value = getattr(cfg, key, None)
        if value is not None and key not in taken:
            family = getattr(cfg, "model", None) or "reference"
            raise ValueError(
                f"[estimator] {key} = {value}: no model of the family '{family}' takes it "
                f"(its models: {', '.join(m.name for m in models)}); remove the key or choose "
                "a family it acts on"
            )
    return out
