"""estimator.batch's small paths on tiny synthetic inputs: which parameters need a joint to move
(`joint_parameters`), `identify_run`'s argument checks, defaults and its bookkeeping around the
per-model fits (rows used, blocks, trims, notes, the sensor-σ refit), the oil-temperature note
(`_oil_temperature`) and the periodic fit's setup (`_periodic`).

The fitting itself is stubbed where these tests only check what `identify_run` hands to it
(estimator.model_fit.fit_blocks, estimator.repeats.periodic_fit): the numbers it must pass are
worked out by hand from the docstrings."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import estimator.batch as batch
import estimator.sensor_sigma as sensor_sigma
from controller.plant.oil import OilLaw
from estimator.batch import _oil_temperature, _periodic, identify_run, joint_parameters
from estimator.chain import TEMP_SLOT
from estimator.datause import STATE_RUNNING
from estimator.model_fit import prior_fit
from estimator.models import LinearModel
from estimator.oil_span import OIL_SPAN_LIMIT_K
from estimator.repeats import Repeats

FS = 1000.0


# --- joint_parameters ----------------------------------------------------------------------


def test_joint_parameters_are_the_ones_numbered_with_the_joint() -> None:
    names = ["W1", "M1", "Fv1", "M2", "Fv2", "R12", "1/b1", "Pc"]
    # Gravity (W…) and the bulk terms (1/b…) never; R12 needs both joints; an unnumbered
    # name belongs to no joint on a two-joint rig.
    assert joint_parameters(names, 0, 2) == ["M1", "Fv1", "R12"]
    assert joint_parameters(names, 1, 2) == ["M2", "Fv2", "R12"]


def test_a_gravity_name_first_does_not_end_the_list() -> None:
    assert joint_parameters(["W", "1/b", "M", "Fc+"], 0, 1) == ["M", "Fc+"]


def test_a_one_joint_rigs_unnumbered_names_need_its_joint() -> None:
    assert joint_parameters(["M", "Fv", "W"], 0, 1) == ["M", "Fv"]
    # A numbered name on a one-joint rig still needs its number to match.
    assert joint_parameters(["M1", "Fv"], 0, 1) == ["M1", "Fv"]
    assert joint_parameters(["M", "Fv"], 0, 2) == []


# --- identify_run: the argument checks --------------------------------------------------------


class _Reached(Exception):
    """The checks passed: identify_run went on to read the signals."""


def _profile(nj: int = 1, oil_channel: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(
        rig=SimpleNamespace(loop_rate_hz=FS),
        joints=[SimpleNamespace(name=f"j{i + 1}") for i in range(nj)],
        oil_temperature=None if oil_channel is None else SimpleNamespace(name=oil_channel),
    )


@pytest.fixture
def reach_signals(monkeypatch: pytest.MonkeyPatch) -> None:
    def stop(*a, **k):
        raise _Reached

    monkeypatch.setattr(batch, "signals_from_columns", stop)


@pytest.mark.parametrize("decimation", [None, 1, 5])
def test_a_decimation_of_one_or_more_is_accepted(reach_signals, decimation) -> None:
    with pytest.raises(_Reached):
        identify_run({}, SimpleNamespace(), profile=_profile(), decimation=decimation)


@pytest.mark.parametrize("decimation", [0, -2])
def test_a_decimation_below_one_is_refused(reach_signals, decimation) -> None:
    with pytest.raises(ValueError, match=f"decimation must be ≥ 1, got {decimation}"):
        identify_run({}, SimpleNamespace(), profile=_profile(), decimation=decimation)


@pytest.mark.parametrize("cutoff", [None, 1e-3, 100.0, 499.9])
def test_a_cutoff_below_nyquist_is_accepted(reach_signals, cutoff) -> None:
    with pytest.raises(_Reached):
        identify_run({}, SimpleNamespace(), profile=_profile(), cutoff_hz=cutoff)


@pytest.mark.parametrize("cutoff", [0.0, -1.0, 500.0, 600.0, 2500.0])
def test_a_cutoff_outside_zero_to_nyquist_is_refused(reach_signals, cutoff) -> None:
    # fs = 1000 Hz: the open interval (0, 500) Hz.
    with pytest.raises(ValueError) as err:
        identify_run({}, SimpleNamespace(), profile=_profile(), cutoff_hz=cutoff)
    assert str(err.value) == f"cutoff_hz must be in (0, 500.0), got {cutoff}"


# --- identify_run around the fits (fit_blocks stubbed) ----------------------------------------


def _model(name: str = "toy", cutoff: float = 10.0, prior=None, fluid: bool = False):
    def regressor(x):  # pragma: no cover - fit_blocks is stubbed
        raise AssertionError

    return LinearModel(
        name=name,
        names=("a", "b"),
        n_outputs=1,
        regressor=regressor,
        param_scale=np.ones(2),
        output_scale=np.ones(1),
        cutoff_hz=cutoff,
        prior=prior,
        fluid=fluid,
    )


class _Harness:
    """identify_run on N rows of 1 joint at 1 kHz with the signals, spool fusion, still-joint
    check and fits stubbed: `calls` holds what each fit_blocks call got."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, n: int = 1000) -> None:
        self.n = n
        self.calls: list[dict] = []
        self.fit_result = None  # None: "no block gave a row"
        monkeypatch.setattr(batch, "signals_from_columns", lambda *a, **k: np.zeros((self.n, 6)))
        monkeypatch.setattr(batch, "fuse_blocks", lambda *a, **k: False)
        monkeypatch.setattr(batch, "still_joints", lambda *a, **k: [])
        monkeypatch.setattr(batch, "fit_warnings", lambda *a, **k: [])

        def fit_blocks(mdl, raw, blks, **kw):
            self.calls.append({"model": mdl.name, "blks": list(blks), **kw})
            if self.fit_result is None:
                return None
            return self.fit_result(mdl), []

        monkeypatch.setattr(batch, "fit_blocks", fit_blocks)

    def columns(self, **extra) -> dict:
        return {"t": np.arange(self.n) / FS, **extra}

    def run(self, columns=None, models=None, **kw):
        return identify_run(
            self.columns() if columns is None else columns,
            SimpleNamespace(oil=None),
            profile=_profile(),
            models=[_model()] if models is None else models,
            **kw,
        )


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> _Harness:
    return _Harness(monkeypatch)


def test_refine_is_on_and_linkwise_off_by_default(harness) -> None:
    harness.run()
    (call,) = harness.calls
    assert call["refine"] is True
    assert call["linkwise"] is False


def test_the_default_trim_is_four_corner_periods_and_the_decimation_keeps_the_corner(
    harness,
) -> None:
    harness.run(models=[_model(cutoff=10.0)])
    (call,) = harness.calls
    assert call["cutoff_hz"] == 10.0
    assert call["trim"] == 400  # 4 / 10 Hz = 0.4 s at 1 kHz
    assert call["nd"] == 40  # largest n_d with 0.8·1000/(2 n_d) ≥ 10 Hz


def test_a_block_needs_more_than_both_trims_and_thirty_decimated_rows(harness) -> None:
    # trim 0.1 s = 100 rows, n_d 2: a block must be longer than 2·100 + 30·2 = 260 rows.
    harness.run(segments=[slice(0, 400), slice(500, 760)], trim_s=0.1, decimation=2)
    (call,) = harness.calls
    assert call["trim"] == 100 and call["nd"] == 2
    assert call["blks"] == [slice(0, 400)]
    harness.calls.clear()
    harness.run(segments=[slice(0, 400), slice(500, 761)], trim_s=0.1, decimation=2)
    assert harness.calls[0]["blks"] == [slice(0, 400), slice(500, 761)]


def test_a_jump_in_time_cuts_the_data_into_blocks(harness) -> None:
    t = np.arange(harness.n) / FS
    t[600:] += 0.5  # half a second missing before row 600
    got = harness.run(columns={"t": t}, trim_s=0.01, decimation=1)
    assert harness.calls[0]["blks"] == [slice(0, 600), slice(600, harness.n)]
    assert got.data.gaps == 1


def test_a_model_the_run_gave_nothing_keeps_its_prior_and_the_next_is_still_fitted(
    harness,
) -> None:
    got = harness.run(models=[_model("first"), _model("second")])
    assert [c["model"] for c in harness.calls] == ["first", "second"]
    assert [f.name for f in got.fits] == ["first", "second"]
    assert got.conditioning == [(10.0, 40), (10.0, 40)]
    assert not got.fits[1].identifiable.any()


def test_a_model_with_no_long_enough_stretch_says_how_long_its_longest_is_and_what_it_needs(
    harness,
) -> None:
    # trim 0.1 s = 100 rows, n_d 2: more than 2·100 + 30·2 = 260 rows needed; the longest
    # segment is 250 rows.
    got = harness.run(segments=[slice(0, 250), slice(400, 600)], trim_s=0.1, decimation=2)
    assert harness.calls[0]["blks"] == []
    (warning,) = got.fits[0].warnings
    assert "longest stretch of usable rows is 0.25 s and it needs more than 0.26 s" in warning
    # A model that had a long enough stretch and still got nothing is not told it lacked one.
    got = harness.run(segments=[slice(0, 400)], trim_s=0.1, decimation=2)
    assert "longest stretch" not in got.fits[0].warnings[0]


@pytest.mark.parametrize("cutoff", [0.0, 500.0, 600.0])
def test_a_models_own_cutoff_outside_zero_to_nyquist_is_refused(harness, cutoff) -> None:
    with pytest.raises(ValueError) as err:
        harness.run(models=[_model("slow", cutoff=cutoff)], trim_s=0.1, decimation=2)
    assert str(err.value) == f"model 'slow': cutoff {cutoff} Hz outside (0, 500.0)"


def test_running_only_by_default_when_the_run_has_running_rows(harness) -> None:
    state = np.full(harness.n, STATE_RUNNING)
    state[:100] = 1  # not running
    got = harness.run(columns=harness.columns(state=state))
    assert got.data.not_running == 100
    # No RUNNING row at all (e.g. a recording without a loop state machine): every row counts.
    got = harness.run(columns=harness.columns(state=np.ones(harness.n)))
    assert got.data.not_running == 0
    got = harness.run(columns=harness.columns(state=np.ones(harness.n)), running_only=True)
    assert got.data.not_running == harness.n


def test_faulted_rows_are_reported_in_seconds(harness) -> None:
    fault = np.zeros(harness.n)
    fault[200:250] = 1
    got = harness.run(columns=harness.columns(fault=fault))
    assert got.data.faulted == 50
    assert any(w.startswith("50 rows (0.05 s) with a fault") for w in got.warnings)


def test_the_spool_note_only_where_a_fluid_model_runs_without_commands(harness) -> None:
    words = "no valve command recorded for every joint"
    got = harness.run(models=[_model("mechanical")])
    assert not any(words in n for n in got.notes)
    got = harness.run(models=[_model("mechanical"), _model("fluid", fluid=True)])
    assert any(words in n for n in got.notes)
    got = harness.run(models=[_model("fluid", fluid=True)], fuse_spool=False)
    assert not any(words in n for n in got.notes)


def test_a_repeat_period_not_found_is_noted(harness) -> None:
    got = harness.run(repeat_period_s=2.0)  # no ref.* column: nothing repeats
    assert got.periodic == []
    assert any(n.startswith("no repeated 2 s period found") for n in got.notes)
    got = harness.run()
    assert not any("no repeated" in n for n in got.notes)


def test_the_sensor_sigma_refit_is_plain_wls_and_the_prior_goes_to_combine(
    harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.fit_result = lambda mdl: prior_fit(mdl, "stub")
    combined: list = []

    def propagate(refit, columns, uncertainty, channels):
        refit(columns)
        return "prop"

    def combine(fit, prop, prior):
        combined.append(prior)
        return []

    monkeypatch.setattr(sensor_sigma, "used_channels", lambda *a: [])
    monkeypatch.setattr(sensor_sigma, "propagate", propagate)
    monkeypatch.setattr(sensor_sigma, "null_position_shares", lambda *a: None)
    monkeypatch.setattr(sensor_sigma, "combine", combine)
    prior = np.array([3.0, 4.0])
    harness.run(models=[_model(prior=prior)], sensor_uncertainty={"eng.q_1": object()})
    main, refit = harness.calls
    assert main["refine"] is True
    assert refit["refine"] is False and refit["jackknife_groups"] == 0
    (got,) = combined
    np.testing.assert_array_equal(got, prior)
    combined.clear()
    harness.calls.clear()
    harness.run(models=[_model(prior=None)], sensor_uncertainty={"eng.q_1": object()})
    assert combined == [None]


# --- _oil_temperature ------------------------------------------------------------------------

OIL = OilLaw.from_datasheet(46.0, 6.8, 0.0006, reference_c=25.0)


def _oil_raw(nj: int, temps: list[float], other: float = 90.0) -> np.ndarray:
    raw = np.full((len(temps) + 2, 6 * nj), other)
    raw[: len(temps), TEMP_SLOT * nj] = temps  # the rows used; the last two are not
    return raw


def _used(raw: np.ndarray, k: int) -> np.ndarray:
    used = np.zeros(raw.shape[0], dtype=bool)
    used[:k] = True
    return used


def _oil_model(*names: str, referred: tuple[str, ...] = ("Fv1", "Kl1")):
    return SimpleNamespace(names=names, referred=referred)


LAW_WORDS = (
    "referred to 25 °C by the declared oil law "
    "([plant.oil]: ν(40 °C) 46 cSt, ν(100 °C) 6.8 cSt, b −0.06 %/K)"
)
NULL_WORDS = "; the valve null offsets are the ones at the run's temperature"


def test_the_oil_note_gives_the_used_rows_temperatures_and_the_law() -> None:
    raw = _oil_raw(2, [38.0, 42.0, np.nan, 40.0])
    notes, warns = _oil_temperature(
        _profile(2, "oil_t"),
        SimpleNamespace(oil=OIL),
        raw,
        _used(raw, 4),
        2,
        [_oil_model("M1", "Fv1", "Kl1")],
    )
    assert warns == []
    assert notes == [
        "oil at 38.0–42.0 °C (mean 40.0, 'oil_t') in the data used: Fv1, Kl1 " + LAW_WORDS
    ]


def test_the_oil_note_says_the_null_offsets_are_not_referred_unless_modelled() -> None:
    raw = _oil_raw(1, [30.0, 31.0])
    args = (_profile(1, "oil_t"), SimpleNamespace(oil=OIL), raw, _used(raw, 2), 1)
    (note,) = _oil_temperature(*args, [_oil_model("Fv1", "Kl1"), _oil_model("Q01", referred=())])[0]
    assert note.endswith(LAW_WORDS + NULL_WORDS + " (null shift with temperature not modelled)")
    (note,) = _oil_temperature(*args, [_oil_model("Fv1", "Kl1", "Q01", "Qt1")])[0]
    assert note.endswith(LAW_WORDS)
    (note,) = _oil_temperature(*args, [_oil_model("Fv1", "Kl1")])[0]
    assert note.endswith(LAW_WORDS)


def test_no_oil_note_without_a_law_referred_parameters_or_a_measured_temperature() -> None:
    raw = _oil_raw(1, [30.0, 31.0])
    used = _used(raw, 2)
    profile = _profile(1, "oil_t")
    model = _oil_model("Fv1", "Kl1")
    assert _oil_temperature(profile, SimpleNamespace(oil=None), raw, used, 1, [model]) == ([], [])
    plain = _oil_model("Fv1", referred=())
    assert _oil_temperature(profile, SimpleNamespace(oil=OIL), raw, used, 1, [plain]) == ([], [])
    nan = _oil_raw(1, [np.nan, np.nan])
    assert _oil_temperature(profile, SimpleNamespace(oil=OIL), nan, used, 1, [model]) == ([], [])


def test_a_law_without_a_temperature_channel_is_a_warning() -> None:
    raw = _oil_raw(1, [30.0, 31.0])
    notes, warns = _oil_temperature(
        _profile(1), SimpleNamespace(oil=OIL), raw, _used(raw, 2), 1, [_oil_model("Fv1", "Kl1")]
    )
    assert notes == []
    assert warns == [
        "[plant.oil] declares the oil's laws but the profile has no 'temperature' channel: "
        "Fv1, Kl1 are the ones at the run's (unmeasured) oil temperature, not referred to 25 °C"
    ]


# --- _periodic -------------------------------------------------------------------------------


class _PeriodicStubs:
    """find_repeats, periodic_fit, observation and valid_rows recorded; periodic_fit calls
    the batch's observe and valid callbacks once, like estimator.repeats.periodic_fit."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, found: bool = True) -> None:
        self.found = found
        self.repeats_args: list = []
        self.observed: list = []
        self.reach: list = []
        monkeypatch.setattr(batch, "find_repeats", self.find_repeats)
        monkeypatch.setattr(batch, "periodic_fit", self.periodic_fit)
        monkeypatch.setattr(batch, "observation", self.observation)
        monkeypatch.setattr(batch, "valid_rows", self.valid_rows)

    def find_repeats(self, ref, good, period):
        self.repeats_args.append((ref, good, period))
        return Repeats(start=0, period=period, count=2) if self.found else None

    def observation(self, m, block, fs, nj, fc, nd, trim):
        self.observed.append((fs, nj, fc, nd, trim))
        return np.zeros((1, 1, 2)), np.zeros((1, 1)), None

    def valid_rows(self, m, block, nj, reach):
        self.reach.append(reach)
        return np.arange(block.shape[0])

    def periodic_fit(self, mdl, raw, rep, observe, nd, valid):
        block = raw[: 3 * rep.period]  # three tiles of a period, as periodic_fit builds
        observe(mdl, block, rep.period)
        return SimpleNamespace(name=mdl.name, nd=nd, rows=valid(mdl, block))


def _ref_columns(n: int = 1200) -> dict:
    ref = np.sin(np.arange(n) * 2 * np.pi / 400)
    return {"ref.j1": ref, "ref.j2": 2 * ref}


def test_periodic_fits_every_model_at_its_own_corner_and_decimation(monkeypatch) -> None:
    stubs = _PeriodicStubs(monkeypatch)
    columns = _ref_columns()
    raw = np.zeros((1200, 12))
    good = np.ones(1200, dtype=bool)
    models = [_model("m10", cutoff=10.0), _model("m25", cutoff=25.0)]
    out = _periodic(columns, _profile(2), raw, good, models, FS, 2, 0.4, None, None)
    ((ref, good_seen, period),) = stubs.repeats_args
    assert period == 400  # 0.4 s at 1 kHz
    np.testing.assert_array_equal(ref, np.column_stack([columns["ref.j1"], columns["ref.j2"]]))
    assert good_seen is good
    # 10 Hz: n_d = int(0.4·1000/10) = 40, reach 3·1000/10 + 4·40 = 460 rows;
    # 25 Hz: n_d = 16, reach 120 + 64 = 184.
    assert [r.name for r in out] == ["m10", "m25"]
    assert [r.nd for r in out] == [40, 16]
    assert stubs.observed == [(FS, 2, 10.0, 40, 400), (FS, 2, 25.0, 16, 400)]
    assert stubs.reach == [460, 184]
    # The middle period of the three tiles at the decimated rate: rows 400, 440, …, 760.
    np.testing.assert_array_equal(out[0].rows, np.arange(400, 800, 40))
    np.testing.assert_array_equal(out[1].rows, np.arange(400, 800, 16))


def test_periodic_with_a_cutoff_and_decimation_given(monkeypatch) -> None:
    stubs = _PeriodicStubs(monkeypatch)
    raw = np.zeros((1200, 12))
    good = np.ones(1200, dtype=bool)
    out = _periodic(_ref_columns(), _profile(2), raw, good, [_model()], FS, 2, 0.4, 25.0, 2)
    assert stubs.observed == [(FS, 2, 25.0, 2, 400)]
    assert stubs.reach == [3 * 1000 // 25 + 4 * 2]
    np.testing.assert_array_equal(out[0].rows, np.arange(400, 800, 2))


def test_no_periodic_fit_without_a_period_its_reference_or_a_repeat(monkeypatch) -> None:
    stubs = _PeriodicStubs(monkeypatch)
    raw = np.zeros((1200, 12))
    good = np.ones(1200, dtype=bool)
    args = (raw, good, [_model()], FS, 2, 0.4, None, None)
    partial = {"ref.j1": _ref_columns()["ref.j1"]}
    assert _periodic(partial, _profile(2), *args) == []
    assert (
        _periodic(_ref_columns(), _profile(2), raw, good, [_model()], FS, 2, None, None, None) == []
    )
    assert stubs.repeats_args == []
    stubs.found = False
    assert _periodic(_ref_columns(), _profile(2), *args) == []
    assert len(stubs.repeats_args) == 1


# --- the oil's span over the data used (estimator.oil_span) ----------------------------------


def _warming_run(monkeypatch, harness, span_k: float):
    """identify_run on 3 s of rows (a block longer than 10 Hz's trims and 30 decimated rows) with
    the oil measured from 30 °C up by span_k, two models (one referring to the oil's
    temperature, one not) fitted as identifiable."""
    harness.n = 3000
    raw = np.zeros((harness.n, 6))
    raw[:, TEMP_SLOT] = 30.0 + np.linspace(0.0, span_k, harness.n)
    monkeypatch.setattr(batch, "signals_from_columns", lambda *a, **k: raw.copy())

    def fitted(mdl):
        fit = prior_fit(mdl, "stub")
        fit.identifiable[:] = True
        return fit

    def fit_blocks(mdl, raw_in, blks, **kw):  # the stub marks the rows it was given as used
        for b in blks:
            kw["rows_used"][b] = True
        return fitted(mdl), []

    monkeypatch.setattr(batch, "fit_blocks", fit_blocks)
    referring = LinearModel(**{**_model("lin_mech").__dict__, "referred": ("a",)})
    return identify_run(
        harness.columns(),
        SimpleNamespace(oil=OIL),
        profile=_profile(1, "oil_t"),
        models=[referring, _model("plain")],
    )


def test_oil_that_warmed_past_the_limit_flags_the_referring_models_parameters(
    monkeypatch, harness
) -> None:
    got = _warming_run(monkeypatch, harness, OIL_SPAN_LIMIT_K + 0.5)
    assert got.identifiable.tolist() == [False, False, True, True]
    (warning,) = [w for w in got.warnings if "oil warmed" in w]
    assert f"by {OIL_SPAN_LIMIT_K + 0.5:.1f} K" in warning
    assert f"more than the {OIL_SPAN_LIMIT_K:g} K" in warning
    assert "'lin_mech'" in warning and "'plain'" not in warning and "'oil_t'" in warning


def test_oil_within_the_limit_leaves_every_parameter_as_fitted(monkeypatch, harness) -> None:
    got = _warming_run(monkeypatch, harness, OIL_SPAN_LIMIT_K - 0.5)
    assert got.identifiable.all()
    assert not [w for w in got.warnings if "oil warmed" in w]
