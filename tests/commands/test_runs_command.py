"""`gpdlm runs` (status, stale runs, marking them FAILED) and what compare/select say about the runs
they leave out: unfinished runs are counted, reruns count once, no group pools two configurations,
and select understands Optuna studies."""

from __future__ import annotations

import csv
import os
import socket
import statistics
import subprocess
import sys
import time

import pytest
from mlflow.tracking import MlflowClient

from gpdlm_cli import cli
from gpdlm_cli.tracking.liveness import process_start, process_tags

from .conftest import make_experiment, make_run, one_line_error

HOUR_MS = 3600 * 1000


def _params(variant="joint", seed=0, **extra):
    return {
        "dataset.name": "concrete",
        "model.name": "dlm",
        "model.variant": variant,
        "likelihood.name": "gaussian",
        "estimator.name": "auto",
        "objective.beta": "1.0",
        "seed": seed,
        "trainer.lr": "0.1",
        **extra,
    }


@pytest.fixture(scope="module")
def store(module_uri):
    client = MlflowClient(module_uri)
    exp = make_experiment(client, module_uri, "life")
    now = int(time.time() * 1000)
    ids = {}
    for variant, base in (("joint", 1.0), ("fixed", 3.0)):
        for seed in (0, 1):
            ids[(variant, seed)] = make_run(
                client,
                exp,
                _params(variant, seed),
                {"test_nll": base + seed, "val_nll": 1.0, "n_train": 100},
                tags={"gpdlm.config_hash": f"{variant}{seed}"},
                start_time=now - 10_000 + seed,
            )
    # a rerun of (joint, seed 0): the same config hash, started later -- it replaces the first
    ids["rerun"] = make_run(
        client,
        exp,
        _params("joint", 0),
        {"test_nll": 1.5, "val_nll": 1.0, "n_train": 100},
        tags={"gpdlm.config_hash": "joint0"},
        start_time=now - 5_000,
    )
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = {"gpdlm.host": socket.gethostname(), "gpdlm.pid": dead.stdout.strip(), "gpdlm.process_start": "1"}
    ids["gone"] = make_run(client, exp, _params(seed=5), {"test_nll": 99.0}, status="RUNNING", tags=gone)
    ids["silent"] = make_run(
        client,
        exp,
        _params(seed=6),
        {},
        status="RUNNING",
        start_time=now - 2 * HOUR_MS,
        tags={"gpdlm.host": "node-17", "gpdlm.pid": "4242"},
    )
    ids["alive"] = make_run(
        client, exp, _params(seed=7), {}, status="RUNNING", start_time=now - 2 * HOUR_MS, tags=process_tags()
    )
    ids["failed"] = make_run(client, exp, _params(seed=8), {"test_nll": 99.0}, status="FAILED")
    ids["killed"] = make_run(client, exp, _params(seed=9), {"test_nll": 99.0}, status="KILLED")
    return {"uri": module_uri, "client": client, "exp": exp, "ids": ids}


def _runs(store, *args):
    return cli.main(["runs", "--tracking-uri", store["uri"], "--experiment", "life", *args])


def test_process_start_identifies_this_process():
    import time

    import psutil

    start = float(process_start(os.getpid()))
    assert psutil.boot_time() - 1 <= start <= time.time()
    assert abs(start - psutil.Process().create_time()) < 0.01
    assert process_start(2**22 + 12345) == ""  # no such process


def test_a_reused_pid_is_not_the_run_s_process():
    """The PID exists but started at another time: the run's process is gone (psutil, any OS)."""
    from gpdlm_cli.tracking.liveness import process_state

    me = process_tags()
    assert process_state(me) == "alive"
    assert process_state({**me, "gpdlm.process_start": f"{float(me['gpdlm.process_start']) - 3600:.2f}"}) == "gone"


def test_runs_lists_status_names_and_metrics(store, capsys):
    assert _runs(store, "--limit", "0") == 0
    out = capsys.readouterr().out
    for status in ("FINISHED", "RUNNING (stale)", "FAILED", "KILLED"):
        assert status in out
    assert "life: 10 runs" in out and "test_nll" in out
    table = [ln for ln in out.splitlines() if "dlm-s" in ln and ": stale: " not in ln]
    assert len(table) == 10
    assert _runs(store, "--status", "failed", "killed") == 0
    out = capsys.readouterr().out
    assert "FAILED" in out and "KILLED" in out and "FINISHED" not in out


def test_stale_runs_are_found_and_marked_failed(store, capsys):
    ids, client = store["ids"], store["client"]
    assert _runs(store, "--stale") == 0
    out = capsys.readouterr().out
    stale = {ln.split()[0] for ln in out.splitlines() if ": stale: " in ln}
    assert stale == {ids["gone"][:8], ids["silent"][:8]}  # never the run whose process is alive
    assert f"process {client.get_run(ids['gone']).data.tags['gpdlm.pid']} on this host is gone" in out
    assert "nothing logged for 2.0h (> 30m)" in out
    assert _runs(store, "--stale", "--stale-after", "3h") == 0  # 2 h of silence is not stale then
    assert {ln.split()[0] for ln in capsys.readouterr().out.splitlines() if ": stale: " in ln} == {ids["gone"][:8]}
    assert _runs(store, "--stale", "--mark-failed") == 0
    for key in ("gone", "silent"):
        run = client.get_run(ids[key])
        assert run.info.status == "FAILED" and run.data.tags["failure_reason"].startswith("orphaned: ")
    assert client.get_run(ids["alive"]).info.status == "RUNNING"


@pytest.mark.parametrize(
    "args,message",
    [
        (["--mark-failed"], "--mark-failed needs --stale"),
        (["--stale", "--stale-after", "soon"], "--stale-after must be a positive duration like 90s, 30m, 2h or 1d"),
        (["--status", "DONE"], "unknown --status 'DONE'"),
    ],
)
def test_runs_bad_input_is_one_line(store, capsys, args, message):
    assert _runs(store, *args) == 2
    assert message in one_line_error(capsys)


def test_compare_never_pools_variants_counts_reruns_once_and_names_skipped_runs(store, tmp_path, capsys):
    assert (
        cli.main(
            [
                "compare",
                "--tracking-uri",
                store["uri"],
                "--experiment",
                "life",
                "--by",
                "model",
                "--metric",
                "test_nll",
                "--out",
                str(tmp_path),
                "--no-log",
                "--no-figures",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    runs = [store["client"].get_run(store["ids"][k]) for k in ("gone", "silent", "alive", "failed", "killed")]
    orphaned = sum(r.data.tags.get("failure_reason", "").startswith("orphaned: ") for r in runs)  # marked or not
    statuses = [r.info.status for r in runs]
    assert (
        "skipped 5 unfinished training run(s): "
        + f"{statuses.count('FAILED') - orphaned} FAILED (see their failure_reason), "
        + (
            f"{orphaned} FAILED (orphaned, closed by `gpdlm runs --mark-failed`: their process was gone, their "
            "output folders may hold a whole result), "
            if orphaned
            else ""
        )
        + f"1 KILLED (interrupted), {statuses.count('RUNNING')} RUNNING (still running or orphaned"
        in err
    )
    assert "1 rerun(s) of identical configurations (same gpdlm.config_hash) counted once" in err
    assert (
        "gpdlm: warning: runs grouped by model differ in more than the seed (variant: fixed/joint); "
        "grouped by variant as well" in err
    )
    with open(tmp_path / "compare.csv", newline="") as f:
        rows = {r["variant"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"joint", "fixed"}
    # joint: the rerun (1.5) replaces the first seed-0 run (1.0); seed 1 is 2.0
    assert int(rows["joint"]["n"]) == 2 and float(rows["joint"]["test_nll_mean"]) == pytest.approx(
        statistics.fmean([1.5, 2.0])
    )
    assert int(rows["fixed"]["n"]) == 2 and float(rows["fixed"]["test_nll_mean"]) == pytest.approx(3.5)


def test_compare_says_how_many_runs_mark_failed_closed_and_why(module_uri, tmp_path, capsys):
    """A run whose process died after its result was written (issue 45.7) stays RUNNING until `gpdlm runs
    --stale --mark-failed` closes it; compare then leaves it out and says so, apart from ordinary failures."""
    client = MlflowClient(module_uri)
    exp = make_experiment(client, module_uri, "marked")
    make_run(client, exp, _params(seed=0), {"test_nll": 1.0, "n_train": 100}, tags={"gpdlm.config_hash": "m0"})
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = {"gpdlm.host": socket.gethostname(), "gpdlm.pid": dead.stdout.strip(), "gpdlm.process_start": "1"}
    for seed in (1, 2):
        make_run(client, exp, _params(seed=seed), {"test_nll": 2.0, "n_train": 100}, status="RUNNING", tags=gone)
    make_run(client, exp, _params(seed=3), {"test_nll": 9.0}, status="FAILED", tags={"failure_reason": "nan loss"})
    base = ["--tracking-uri", module_uri, "--experiment", "marked"]
    assert cli.main(["runs", *base, "--stale", "--mark-failed"]) == 0
    capsys.readouterr()
    out = ["--by", "model", "--metric", "test_nll", "--out", str(tmp_path), "--no-log", "--no-figures"]
    assert cli.main(["compare", *base, *out]) == 0
    notes = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("gpdlm: note: ")]
    assert notes == [
        "gpdlm: note: skipped 3 unfinished training run(s): 1 FAILED (see their failure_reason), 2 FAILED "
        "(orphaned, closed by `gpdlm runs --mark-failed`: their process was gone, their output folders may hold "
        "a whole result)"
    ]
    with open(tmp_path / "compare.csv", newline="") as f:
        assert [int(r["n"]) for r in csv.DictReader(f)] == [1]


def test_select_understands_an_optuna_study(module_uri, tmp_path, capsys):
    """Trials of a study over the learning rate share beta: selection is over the searched key, by
    the study's objective (val_rmse here), with no 'repeated betas' note."""
    client = MlflowClient(module_uri)
    exp = make_experiment(client, module_uri, "study")
    parent = make_run(
        client,
        exp,
        {},
        {},
        command=None,
        tags={
            "gpdlm.sweep": "parent",
            "gpdlm.sweeper": "optuna",
            "gpdlm.swept": "trainer.lr",
            "gpdlm.sweep_objective": "val_rmse",
        },
    )
    trials = {
        "0.3": (0.9, 5.0, 2.0),
        "0.01": (0.5, 7.0, 1.0),
        "0.1": (0.7, 3.0, 3.0),
    }  # lr: val_nll, val_rmse, test_nll
    for lr, (vnll, vrmse, tnll) in trials.items():
        make_run(
            client,
            exp,
            {**_params(), "trainer.lr": lr},
            {"val_nll": vnll, "val_rmse": vrmse, "test_nll": tnll, "n_train": 100},
            tags={"mlflow.parentRunId": parent},
        )
    assert (
        cli.main(
            [
                "select",
                "--tracking-uri",
                module_uri,
                "--experiment",
                "study",
                "--metric",
                "test_nll",
                "--out",
                str(tmp_path),
                "--no-log",
                "--no-figures",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "3 run(s) are trials of 1 Optuna study(ies); selecting over the searched keys trainer.lr" in err
    assert "same beta" not in err
    with open(tmp_path / "selected.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["selected_by"] == "val_rmse" and float(row["val_value"]) == 3.0 and float(row["test_nll"]) == 3.0
