"""Tracebacks, floods and misleading hints of issue 45's probe, each now one honest line: predict on a
directory or a huge junk file (read in chunks, stopped at the first bad row, echoed values capped),
file errors of predict/eval/report that named hydra.run.dir, an MLflow value error that said "check
tracking.uri", compare on a read-only store."""

from __future__ import annotations

import errno
import time

import pytest

from gpdlm_cli.commands import evaluate
from gpdlm_cli.commands._cli import run_cli
from gpdlm_cli.exceptions import fault_message

from ..conftest import compose
from .conftest import one_line_error


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from gpdlm_cli.run.train import run_train
    from gpdlm_cli.tracking import NullTracker

    d = tmp_path_factory.mktemp("predict") / "run"
    run_train(
        compose(
            [
                "dataset=diabetes",
                "model.num_inducing=8",
                "dataset.split.train_size=60",
                "trainer.max_iters=3",
                "progress=false",
                "threads=1",
                "tracking.enabled=false",
            ]
        ),
        d,
        tracker=NullTracker(),
    )
    return d


def _predict(folder, inp, tmp_path):
    return run_cli(evaluate.predict_main, [str(folder), "--input", str(inp), "--output", str(tmp_path / "out.csv")])


def _columns(folder):
    from gpdlm_cli.run.saved_model import read_model_file

    return read_model_file(folder / "model.pt")[0]["feature_names"]


def test_a_directory_given_as_input_is_called_a_directory(folder, tmp_path, capsys):
    assert _predict(folder, tmp_path, tmp_path) == 2
    assert one_line_error(capsys) == f"gpdlm: error: --input {tmp_path} is a directory, not a CSV file"


def test_a_huge_junk_file_stops_at_its_first_bad_row_and_echoes_80_characters(folder, tmp_path, capsys):
    """200,000 rows whose third holds a 2 MB cell: one short line naming row 4, without reading the rest
    (the CSV reader is asked for one 50,000-row chunk)."""
    cols = _columns(folder)
    good = ",".join("0.5" for _ in cols)
    bad = ",".join(["x" * 2_000_000] + ["0.5"] * (len(cols) - 1))
    path = tmp_path / "junk.csv"
    with open(path, "w") as f:
        f.write(",".join(cols) + "\n" + good + "\n" + good + "\n" + bad + "\n")
        f.write((good + "\n") * 200_000)
    chunks = []
    import pandas as pd

    real = pd.read_csv

    def counting(*a, **k):
        reader = real(*a, **k)
        orig = reader.__next__

        class Spy:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                reader.close()

            def __iter__(self):
                return self

            def __next__(self):
                chunks.append(1)
                return orig()

        return Spy()

    capsys.readouterr()
    pd.read_csv = counting
    try:
        t0 = time.perf_counter()
        assert _predict(folder, path, tmp_path) == 2
        seconds = time.perf_counter() - t0
    finally:
        pd.read_csv = real
    line = one_line_error(capsys)
    assert f"column '{cols[0]}' row 4 holds 'xxxx" in line and "..., not a finite number" in line
    assert len(line) < 80 + 200 + len(str(path)), len(line)
    assert chunks == [1] and seconds < 30


def test_a_file_without_a_header_line_is_refused_before_parsing(folder, tmp_path, capsys):
    path = tmp_path / "one_line.csv"
    path.write_bytes(b"\x00junk" * 300_000)  # 1.5 MB and no newline
    assert _predict(folder, path, tmp_path) == 2
    assert "its first line is longer than 1 MiB: not a CSV with a header row" in one_line_error(capsys)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EIO])
def test_file_errors_of_the_analysis_commands_do_not_name_hydra_run_dir(code):
    e = OSError(code, "boom", "/data/out.csv")
    assert "hydra.run.dir" in fault_message(e)  # train, sweep, bias write a Hydra run folder
    line = fault_message(e, run_folder=False)  # predict, eval, report, compare write the paths they were given
    assert "hydra.run.dir" not in line and "/data/out.csv" in line


def test_errors_of_the_analysis_commands_go_through_the_dispatcher_without_hydra_hints(folder, tmp_path, capsys):
    from gpdlm_cli import cli

    out = tmp_path / "no" / "such" / "dir" / "out.csv"
    inp = tmp_path / "in.csv"
    cols = _columns(folder)
    inp.write_text(",".join(cols) + "\n" + ",".join("0.5" for _ in cols) + "\n")
    rc = cli.main(["predict", str(folder), "--input", str(inp), "--output", str(out)])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc != 0 and len(err) == 1 and err[0].startswith("gpdlm: error: ") and "hydra.run.dir" not in err[0], err


def test_an_mlflow_value_error_does_not_blame_the_store():
    from mlflow.exceptions import MlflowException

    line = fault_message(
        MlflowException("'name' exceeds the maximum length of 500 characters", error_code="INVALID_PARAMETER_VALUE")
    )
    assert "tracking.uri" not in line and "shorten it" in line


def test_compare_on_a_read_only_store_says_read_only(template_db, tmp_path, capsys, monkeypatch):
    """A store SQLite cannot write (root bypasses file modes here, so the refusal is injected where
    SQLite raises it): the table and files are made, then one line says the store is read-only."""
    import sqlalchemy.exc
    from mlflow.tracking import MlflowClient

    from gpdlm_cli import cli

    from .conftest import copy_store, make_experiment, make_run

    uri = copy_store(template_db, tmp_path / "store")
    client = MlflowClient(uri)
    exp = make_experiment(client, uri, "gpdlm")
    for seed in (0, 1):
        make_run(client, exp, {"dataset.name": "concrete", "model.name": "dlm", "seed": seed}, {"test_nll": 1.0 + seed})

    def read_only(self, *a, **k):
        raise sqlalchemy.exc.OperationalError("INSERT INTO runs", {}, Exception("attempt to write a readonly database"))

    monkeypatch.setattr(MlflowClient, "create_run", read_only)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    rc = cli.main(["compare", "--tracking-uri", uri])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc != 0 and len(err) == 1 and "the MLflow store is read-only" in err[0], err
    assert list((tmp_path / "outputs" / "compare").glob("*/compare.csv"))
