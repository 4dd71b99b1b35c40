"""Export round trips (csv, npz, mat) and the `rigctl export` subcommand."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.io

from daq.recording import Recorder, export_run, read_run
from daq.recording.export import matlab_names
from daq.ring import SampleRing
from rigctl import cmd_export

from .helpers import layout_2dof, meta, publish_rows


@pytest.fixture(scope="module")
def run_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    layout = layout_2dof()
    ring = SampleRing(1024, layout.width)
    rec = Recorder(ring, layout, tmp_path_factory.mktemp("export"), meta(), chunk_rows=64)
    path = rec.start("exp")
    publish_rows(ring, 300)
    # Values that a careless text export would mangle: non-finite, tiny, huge, negative zero.
    awkward = [np.nan, np.inf, -np.inf, 5e-324, 1.7976931348623157e308, -0.0, 1 / 3]
    row = ring.claim()
    row[:] = 0.1
    row[0], row[1] = 300, 0.3
    row[2 : 2 + len(awkward)] = awkward
    ring.publish()
    rec.event("state", new="IDLE")
    rec.stop()
    return path


def test_csv_round_trip(run_path: Path, tmp_path: Path) -> None:
    run = read_run(run_path)
    out = export_run(run_path, "csv", tmp_path / "r.csv")
    assert out == tmp_path / "r.csv"
    with out.open() as f:
        header = f.readline().strip().split(",")
    assert header == [
        "time [s]",
        *(f"{c} [{u}]" for c, u in zip(run.columns, run.units, strict=True)),
    ]
    back = np.loadtxt(out, delimiter=",", skiprows=1)
    np.testing.assert_array_equal(back[:, 1:], run.data)
    np.testing.assert_array_equal(back[:, 0], run.data[:, 1] - run.data[0, 1])
    assert np.signbit(back[-1, 8])  # -0.0 survives
    text = out.read_text()
    assert ",0.1," in text and "0.10000000000000001" not in text  # short, not %.17g


def test_npz_round_trip(run_path: Path, tmp_path: Path) -> None:
    run = read_run(run_path)
    out = export_run(run_path, "npz", tmp_path)  # a directory: named after the run
    assert out == tmp_path / "exp.npz"
    with np.load(out, allow_pickle=False) as z:
        np.testing.assert_array_equal(z["data"], run.data)
        np.testing.assert_array_equal(z["seq"], run.seq)
        assert tuple(z["columns"]) == run.columns and tuple(z["units"]) == run.units
        assert json.loads(str(z["meta_json"]))["rig"] == "sim-2dof"
        assert json.loads(str(z["events_json"]))[0]["new"] == "IDLE"


def test_mat_round_trip(run_path: Path, tmp_path: Path) -> None:
    run = read_run(run_path)
    out = export_run(run_path, "mat", tmp_path / "r.mat")
    m = scipy.io.loadmat(out, squeeze_me=True, struct_as_record=False)
    np.testing.assert_array_equal(m["data"], run.data)
    np.testing.assert_array_equal(m["seq"], run.seq)
    assert [str(c).strip() for c in m["columns"]] == list(run.columns)
    names = matlab_names(run.columns)
    for name, col in zip(names, run.columns, strict=True):
        np.testing.assert_array_equal(getattr(m["signals"], name), run.column(col))


def test_matlab_names_are_valid_and_unique() -> None:
    assert matlab_names(("raw.p_a", "raw-p_a", "1x", "t")) == ["raw_p_a", "raw_p_a_2", "c_1x", "t"]


def test_default_output_is_next_to_the_run(run_path: Path) -> None:
    out = export_run(run_path, "csv")
    try:
        assert out == run_path.with_suffix(".csv") and out.stat().st_size > 0
    finally:
        out.unlink()


def test_unknown_format_is_refused(run_path: Path) -> None:
    with pytest.raises(ValueError, match="choose one of csv, npz, mat, mcap"):
        export_run(run_path, "xlsx")  # type: ignore[arg-type]


def _cli(argv: list[str]) -> tuple[argparse.Namespace, int]:
    parser = argparse.ArgumentParser(prog="rigctl")
    cmd_export.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args, args.func(args)


def test_cli_exports(run_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli.npz"
    _, code = _cli(["export", str(run_path), "--format", "npz", "--out", str(out)])
    assert code == 0 and capsys.readouterr().out.strip() == str(out)
    with np.load(out) as z:
        np.testing.assert_array_equal(z["data"], read_run(run_path).data)


def test_cli_warns_about_an_incomplete_run(
    run_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = tmp_path / "cut.rigrun"
    cut.write_bytes(run_path.read_bytes()[:-30])
    _, code = _cli(["export", str(cut), "--format", "csv"])
    err = capsys.readouterr().err
    assert code == 0 and "incomplete" in err and "cut short: True" in err
    assert (tmp_path / "cut.csv").exists()


def test_cli_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, code = _cli(["export", str(tmp_path / "missing.rigrun"), "--format", "csv"])
    assert code == 2 and "no such run file" in capsys.readouterr().err
    junk = tmp_path / "junk.rigrun"
    junk.write_text("not a run")
    _, code = _cli(["export", str(junk), "--format", "csv"])
    assert code == 2 and "bad magic" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        _cli(["export", str(junk), "--format", "xlsx"])
    assert exc.value.code == 2


def test_cli_bad_output_directory_exits_2(
    run_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, code = _cli(["export", str(run_path), "-f", "csv", "-o", str(tmp_path / "no" / "x.csv")])
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_cli_write_failure_exits_1(
    run_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".x.csv.part").mkdir()  # the temporary output name is taken by a directory
    _, code = _cli(["export", str(run_path), "-f", "csv", "-o", str(tmp_path / "x.csv")])
    assert code == 1 and "export failed" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()
