"""`gpdlm export` and `gpdlm report --from FILE`: the run-records file (header, runs, step-metric
summaries, checksum trailer; the same bytes for the same runs) and the report built from it, byte for byte
the report built from the store (Markdown, LaTeX, HTML with its figures, the CSVs, the notes); a damaged,
truncated or foreign file is one line of error."""

from __future__ import annotations

import gzip
import json
from datetime import UTC

import pytest

from gpdlm_cli import cli
from gpdlm_cli.analysis import export

from ..conftest import exhaustive
from .conftest import one_line_error
from .test_report import EXP, store  # noqa: F401 (the synthetic experiment of test_report)


def _export(store, path, *args):  # noqa: F811
    return cli.main(["export", "--tracking-uri", store["uri"], "--experiment", EXP, "--output", str(path), *args])


@pytest.fixture(scope="module")
def records(store, tmp_path_factory):  # noqa: F811
    path = tmp_path_factory.mktemp("export") / "runs.jsonl.gz"
    assert _export(store, path) == 0
    return path


def _lines(path):
    return [json.loads(ln) for ln in gzip.decompress(path.read_bytes()).splitlines()]


def test_the_file_holds_every_run_with_step_summaries_and_a_checksum(records, store, tmp_path):  # noqa: F811
    lines = _lines(records)
    header, runs, trailer = lines[0], lines[1:-1], lines[-1]
    # 8 configurations x 2 sizes x 3 seeds, FAILED + RUNNING traps, one bias run; the `compare` run is not exported
    assert header == {"format": "gpdlm-runs", "version": 1, "experiments": [EXP], "n_runs": 48 + 2 + 1}
    assert trailer["n_runs"] == 51 and len(trailer["sha256"]) == 64
    assert sorted({r["status"] for r in runs}) == ["FAILED", "FINISHED", "RUNNING"]
    assert sum(r["tags"]["gpdlm.command"] == "bias" for r in runs) == 1
    run = next(
        r
        for r in runs
        if r["params"]["model.name"] == "dlm"
        and r["params"]["dataset.name"] == "pol"
        and r["params"]["objective.beta"] == "0.1"
        and r["params"]["seed"] == "0"
        and r["params"]["dataset.split.train_size"] == "100"
    )
    assert run["metrics"]["test_nll"] == 1.0 and run["metrics"]["val_nll"] == 1.0
    s = run["steps"]["test_nll"]  # steps 10, 20, 30 (the final value at 30 is the same point)
    assert (s["n"], s["first"], s["last"], s["min"], s["max"], s["last_step"]) == (3, 2.0, 1.0, 1.0, 2.0, 30)
    assert s["points"] == [[10, 2.0], [20, 1.5], [30, 1.0]]
    assert "val_nll" not in run["steps"]  # logged once: a final value, no step summary
    # the same runs give the same bytes (gzip without a timestamp, sorted keys and runs)
    again = tmp_path / "again.jsonl.gz"
    assert _export(store, again) == 0
    assert again.read_bytes() == records.read_bytes()
    assert export.read(records).sha256 == trailer["sha256"]
    lean = tmp_path / "lean.jsonl.gz"
    assert _export(store, lean, "--no-histories") == 0
    assert all("points" not in s for r in _lines(lean)[1:-1] for s in r["steps"].values())


def test_histories_read_in_bulk_are_the_per_run_histories(store, monkeypatch):  # noqa: F811
    """The SQL store's histories are read with one query per metric and batch of runs; they are exactly what a
    query per run and metric returns (the path of a store without the bulk query), and no per-run query is made."""
    from mlflow.tracking import MlflowClient

    from gpdlm_cli.analysis.store import search_all

    client = MlflowClient(tracking_uri=store["uri"])
    runs = list(search_all(client, client.get_experiment_by_name(EXP).experiment_id))

    class PerRun:  # a client without the SQL store's bulk query
        get_metric_history = staticmethod(client.get_metric_history)

    monkeypatch.setattr(export, "BULK_RUNS", 7)  # several batches of runs
    per_run = export.metric_histories(PerRun(), runs)
    calls = []
    monkeypatch.setattr(client, "get_metric_history", lambda *a, **k: calls.append(a))
    bulk = export.metric_histories(client, runs)
    assert not calls and bulk == per_run
    assert sum(len(pts) > 1 for h in bulk.values() for pts in h.values()) > 10  # step metrics among them


@pytest.mark.parametrize("fmt", exhaustive(["md", "latex", "html"], fast=lambda f: f == "md"))  # fast lane: md
def test_the_report_from_the_file_is_the_report_from_the_store(records, store, tmp_path, capsys, fmt):  # noqa: F811
    a, b = tmp_path / "store", tmp_path / "file"
    base = ["report", "--claims", store["claims"], "--no-log", "--format", fmt]
    assert cli.main([*base, "--tracking-uri", store["uri"], "--experiment", EXP, "--out", str(a)]) == 0
    err_store = capsys.readouterr().err
    assert cli.main([*base, "--from", str(records), "--out", str(b)]) == 0
    err_file = capsys.readouterr().err
    assert "skipped 2 unfinished training run(s)" in err_store
    assert err_file == err_store  # the same notes (unfinished runs skipped)
    files = sorted(p.name for p in a.iterdir())
    assert files == sorted(p.name for p in b.iterdir())
    assert len(files) == {"md": 3, "latex": 3, "html": 6}[fmt]  # html: + the 3 figures, curves included
    for name in files:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.parametrize(
    "expr",
    exhaustive(
        [
            "tags.`gpdlm.command` = 'train' and attributes.status = 'FINISHED' and params.`model.name` != 'dlm'",
            "params.seed = '0'",  # a param
            "params.`dataset.split.train_size` = '100' and metrics.test_nll < 1.5",  # a param and a metric
        ],
        fast=1,  # fast lane: the first (a tag, an attribute, a param)
    ),
)
def test_a_filtered_report_from_the_file_is_the_filtered_report_from_the_store(records, store, tmp_path, capsys, expr):  # noqa: F811
    """``--filter`` selects the same runs from ``--from`` files as from the store they were exported from (MLflow's
    own filter, ``SearchUtils.filter``): the two reports are the same bytes, and differ from the unfiltered one."""
    base = ["report", "--claims", store["claims"], "--no-log"]
    out = {k: tmp_path / k for k in ("store", "file", "all")}
    assert (
        cli.main(
            [*base, "--tracking-uri", store["uri"], "--experiment", EXP, "--filter", expr, "--out", str(out["store"])]
        )
        == 0
    )
    err_store = capsys.readouterr().err
    assert cli.main([*base, "--from", str(records), "--filter", expr, "--out", str(out["file"])]) == 0
    assert capsys.readouterr().err == err_store
    assert cli.main([*base, "--from", str(records), "--out", str(out["all"])]) == 0
    capsys.readouterr()
    for name in ("report.md", "cells.csv", "verdicts.csv"):
        assert (out["file"] / name).read_bytes() == (out["store"] / name).read_bytes(), name
    assert (out["file"] / "cells.csv").read_bytes() != (out["all"] / "cells.csv").read_bytes()


def _rewrite(src, dest, edit):
    lines = gzip.decompress(src.read_bytes()).splitlines(keepends=True)
    dest.write_bytes(gzip.compress(b"".join(edit(lines))))
    return dest


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda ls: [ls[0], ls[1].replace(b'"test_nll":1.0', b'"test_nll":0.5', 1), *ls[2:]], "SHA-256 mismatch"),
        (lambda ls: ls[:-1], "truncated (no checksum line at the end)"),
        (
            lambda ls: [ls[0].replace(b'"version":1', b'"version":2'), *ls[1:]],
            "format version 2; this gpdlm reads version 1",
        ),
        (lambda ls: [b'{"hello": 1}\n', *ls[1:]], "not a gpdlm run-records file"),
    ],
)
def test_a_damaged_file_is_one_line(records, store, tmp_path, capsys, edit, message):  # noqa: F811
    bad = _rewrite(records, tmp_path / "bad.jsonl.gz", edit)
    assert (
        cli.main(["report", "--claims", store["claims"], "--no-log", "--from", str(bad), "--out", str(tmp_path / "o")])
        == 2
    )
    assert message in one_line_error(capsys)
    assert not (tmp_path / "o").exists()  # nothing written


def test_bad_from_input_is_one_line(records, store, tmp_path, capsys):  # noqa: F811
    base = ["report", "--claims", store["claims"], "--no-log", "--out", str(tmp_path / "o")]
    assert cli.main([*base, "--from", str(records), "--filter", "params.seed = = '0'"]) == 2
    assert "invalid --filter \"params.seed = = '0'\"" in one_line_error(capsys)
    assert cli.main([*base, "--from", str(records), "--filter", "attributes.user_id = 'me'"]) == 2
    assert "they keep the attributes run_id, run_name, status, start_time and end_time, not user_id" in one_line_error(
        capsys
    )
    assert cli.main([*base, "--from", str(records), "--filter", "params.seed = '9'"]) == 2
    assert f"no FINISHED training runs in experiment '{EXP}' matching --filter \"params.seed = '9'\"" in one_line_error(
        capsys
    )
    assert cli.main([*base, "--from", str(records), "--experiment", "other"]) == 2
    assert f"experiment 'other' is not in {records}; experiments there: {EXP}" in one_line_error(capsys)
    assert cli.main([*base, "--from", str(tmp_path / "none.jsonl.gz")]) == 2
    assert "no such file" in one_line_error(capsys)
    (tmp_path / "plain.jsonl.gz").write_text("not gzip")
    assert cli.main([*base, "--from", str(tmp_path / "plain.jsonl.gz")]) == 2
    assert "not a gzip-compressed run-records file" in one_line_error(capsys)
    assert cli.main(["export", "--tracking-uri", store["uri"], "--output", str(tmp_path / "x.json")]) == 2
    assert "must end in .jsonl.gz" in one_line_error(capsys)


def test_filter_and_since_export_the_runs_they_select(template_db, tmp_path, capsys):
    """``--filter`` (MLflow's search syntax) and ``--since`` (a start time, UTC unless given an offset) select
    the runs a study's part exports; together, both apply."""
    from datetime import datetime

    from mlflow.tracking import MlflowClient

    from ..conftest import copy_store
    from .conftest import make_experiment, make_run

    uri = copy_store(template_db, tmp_path / "store")
    client = MlflowClient(uri)
    exp = make_experiment(client, uri, "parts")
    t0 = int(datetime(2026, 12, 1, 3, 0, tzinfo=UTC).timestamp() * 1000)
    for i in range(4):  # one run an hour from 03:00 UTC, data sets a, b, a, b
        make_run(
            client, exp, {"dataset.name": "ab"[i % 2], "seed": i}, {"test_nll": float(i)}, start_time=t0 + i * 3600_000
        )

    def seeds(*args):
        out = tmp_path / "out.jsonl.gz"
        assert cli.main(["export", "--tracking-uri", uri, "--experiment", "parts", "--output", str(out), *args]) == 0
        return sorted(int(r["params"]["seed"]) for r in _lines(out)[1:-1])

    assert seeds() == [0, 1, 2, 3]
    assert seeds("--since", "2026-12-01T05:00") == [2, 3]  # started at 05:00 UTC and after
    assert seeds("--since", "2026-12-01T05:00:00.001") == [3]
    assert seeds("--since", "2026-12-01T06:00+01:00") == [2, 3]  # 05:00 UTC
    assert seeds("--filter", 'params.`dataset.name` = "a"') == [0, 2]  # as pasted from the help
    assert seeds("--filter", "params.`dataset.name` = 'a'", "--since", "2026-12-01T04:00") == [2]
    bad = ["export", "--tracking-uri", uri, "--output", str(tmp_path / "bad.jsonl.gz")]
    assert cli.main([*bad, "--since", "yesterday"]) == 2
    assert "--since 'yesterday' is not a time: give ISO 8601" in one_line_error(capsys)
    assert cli.main([*bad, "--filter", "params.seed ~ 3"]) == 2
    assert "invalid --filter" in one_line_error(capsys)
    assert cli.main([*bad, "--experiment", "parts", "--since", "2026-12-02"]) == 2
    assert "no training runs matching 'attributes.start_time >= " in one_line_error(capsys)
    assert not (tmp_path / "bad.jsonl.gz").exists()
