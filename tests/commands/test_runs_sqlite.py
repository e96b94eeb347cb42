"""`gpdlm runs` reads a SQLite store without MLflow (``tracking.sqlite_runs``): what it reads is what
MLflow's own ``search_runs`` returns, and the command imports no MLflow (docs/performance.md, "gpdlm runs")."""

from __future__ import annotations

import math
import os
import sqlite3
import time

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from gpdlm_cli.analysis import store as S
from gpdlm_cli.commands import run_list
from gpdlm_cli.tracking.sqlite_runs import SqliteRuns, SqliteStoreUnreadable

from ..conftest import copy_store, gpdlm_subprocess
from ..test_startup_imports import imported_modules
from .conftest import make_experiment, make_run


@pytest.fixture(scope="module")
def mixed(template_db, tmp_path_factory):
    """A store with two experiments: finished, failed, RUNNING, deleted and NaN-metric runs, a run named only
    by its mlflow.runName tag, and a deleted experiment."""
    uri = copy_store(template_db, tmp_path_factory.mktemp("sqlite_runs"))
    client = MlflowClient(uri)
    exp = make_experiment(client, uri, "mixed")
    other = make_experiment(client, uri, "other")
    now = int(time.time() * 1000)
    make_run(client, exp, {"seed": 0}, {"test_nll": 1.25, "val_nll": 0.5}, tags={"gpdlm.config_hash": "a"})
    make_run(client, exp, {"seed": 1}, {"test_nll": 2.0}, status="FAILED", tags={"failure_reason": "x"})
    make_run(client, exp, {"seed": 2}, {}, status="RUNNING", start_time=now - 7_200_000, tags={"gpdlm.pid": "1"})
    nan = make_run(client, exp, {"seed": 3}, {"test_rmse": 3.0})
    client.log_batch(nan, metrics=[Metric("test_nll", float("nan"), now, 5)])
    gone = make_run(client, exp, {"seed": 4}, {"test_nll": 9.0})
    client.delete_run(gone)
    unnamed = client.create_run(exp, tags={"gpdlm.command": "train"}, run_name="from-the-tag").info.run_id
    client.log_metric(unnamed, "test_nll", 0.75, timestamp=now - 1000, step=3)
    with sqlite3.connect(S.sqlite_path(uri)) as con:  # an older run: its name only in the mlflow.runName tag
        con.execute("UPDATE runs SET name = NULL WHERE run_uuid = ?", (unnamed,))
    con.close()
    make_run(client, other, {"seed": 0}, {"test_nll": 7.0})
    doomed = make_experiment(client, uri, "doomed")
    client.delete_experiment(doomed)
    return uri, client, exp


def _as_tuple(run):
    metrics = {k: ("nan" if math.isnan(v) else v) for k, v in run.data.metrics.items()}
    stamps = sorted((m.key, m.timestamp, m.step) for m in run.data._metric_objs)
    info = run.info
    return (info.run_id, info.run_name, info.status, info.start_time, dict(run.data.tags), metrics, stamps)


@pytest.mark.parametrize("status", [None, "RUNNING"])
def test_the_direct_reader_returns_what_mlflow_returns(mixed, status):
    uri, client, exp = mixed
    reader = SqliteRuns(S.sqlite_path(uri))
    expected = S.search_all(client, exp, "attributes.status = 'RUNNING'" if status else "")
    got = reader.search_runs(exp, status)
    assert sorted(map(_as_tuple, got)) == sorted(map(_as_tuple, expected))
    assert len(got) == (2 if status else 5)  # the deleted run and the other experiment's are not there
    assert status or "from-the-tag" in {r.info.run_name for r in got}


def test_experiments_are_found_as_mlflow_finds_them(mixed):
    uri, client, exp = mixed
    reader = SqliteRuns(S.sqlite_path(uri))
    assert sorted(reader.experiment_names()) == sorted(e.name for e in client.search_experiments())
    for name in ("mixed", "other", "doomed", "Default", "nope"):
        mine, theirs = reader.get_experiment_by_name(name), client.get_experiment_by_name(name)
        assert (mine and (mine.experiment_id, mine.name)) == (theirs and (theirs.experiment_id, theirs.name)), name


def test_a_file_that_is_not_a_store_is_left_to_mlflow(tmp_path):
    bad = tmp_path / "mlflow.db"
    bad.write_text("garbage, not SQLite")
    with pytest.raises(SqliteStoreUnreadable):
        SqliteRuns(bad).get_experiment_by_name("gpdlm")
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with pytest.raises(SqliteStoreUnreadable):
        SqliteRuns(empty).get_experiment_by_name("gpdlm")


def test_listing_does_not_open_mlflow_but_writing_does(mixed, monkeypatch):
    uri, _, _ = mixed

    def no_mlflow(*a, **k):
        raise AssertionError("MLflow opened")

    monkeypatch.setattr(S, "open_store", no_mlflow)
    client, got_uri, name, runs = run_list.load_runs(uri, "mixed", stale=False, writes=False)
    assert (client, got_uri, name, len(runs)) == (None, uri, "mixed", 5)
    with pytest.raises(AssertionError, match="MLflow opened"):
        run_list.load_runs(uri, "mixed", stale=True, writes=True)


@pytest.mark.slow
def test_gpdlm_runs_on_a_store_imports_no_mlflow_and_lists_the_runs(mixed, tmp_path):
    import shutil

    uri, _, _ = mixed
    shutil.copyfile(S.sqlite_path(uri), tmp_path / "mlflow.db")
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")  # -X importtime's lines on stderr
    done = gpdlm_subprocess(["runs", "--experiment", "mixed"], tmp_path, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    modules = imported_modules(done.stderr)
    assert "gpdlm_cli" in modules
    assert sorted(m for m in ("mlflow", "sqlalchemy", "alembic", "pandas", "torch") if m in modules) == []
    assert "mixed: 5 runs" in done.stdout
    assert [done.stdout.count(s) for s in ("FINISHED", "FAILED", "RUNNING (stale)", "from-the-tag")] == [2, 1, 1, 1]


def test_the_finished_config_hashes_are_read_in_one_query_as_mlflow_reads_them(template_db, tmp_path):
    """``sweep.skip_finished``'s finished jobs (``sweep.iterations.finished_config_hashes``): the FINISHED, active
    runs of the experiment, read straight from the SQLite store; the same set as MLflow's search."""
    from gpdlm_cli.sweep import iterations

    uri = copy_store(template_db, tmp_path)
    client = MlflowClient(uri)
    exp, other = make_experiment(client, uri, "hashes"), make_experiment(client, uri, "elsewhere")
    for h, status in (("a", "FINISHED"), ("b", "FINISHED"), ("c", "FAILED"), ("d", "RUNNING")):
        make_run(client, exp, {}, {}, status=status, tags={"gpdlm.config_hash": h})
    client.delete_run(make_run(client, exp, {}, {}, tags={"gpdlm.config_hash": "deleted"}))
    make_run(client, other, {}, {}, tags={"gpdlm.config_hash": "other"})
    mlflow_says = {
        r.data.tags["gpdlm.config_hash"] for r in S.search_all(client, exp, "attributes.status = 'FINISHED'")
    }
    assert mlflow_says == {"a", "b"}
    assert SqliteRuns(S.sqlite_path(uri)).tag_values(exp, "gpdlm.config_hash", "FINISHED") == mlflow_says
    assert iterations.finished_config_hashes(client, "hashes", uri) == mlflow_says
    assert iterations.finished_config_hashes(client, "nope", uri) == frozenset()
