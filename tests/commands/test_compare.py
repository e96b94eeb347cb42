"""`gpdlm compare`: the table is the mean ± SE computed directly from the runs, numbers sort as
numbers, files and the `compare` MLflow run exist, and bad input is one line with exit code 2."""

from __future__ import annotations

import csv
import math
import random
import statistics

import pytest
from mlflow.tracking import MlflowClient

from gpdlm_cli import cli

from .conftest import make_experiment, make_run, one_line_error

EXP = "synth"
BETAS = ["0.1", "1.0", "9", "10"]  # as strings "10" < "9": the table must put 9 first
SIZES = [100, 1000]
SEEDS = [0, 1, 2]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def store(module_uri):
    """48 FINISHED training runs (2 models x 4 betas x 2 sizes x 3 seeds) with step metrics, plus
    runs that compare must ignore (each with an outlying test_nll that would shift any mean)."""
    client = MlflowClient(module_uri)
    exp = make_experiment(client, module_uri, EXP)
    rng = random.Random(0)
    for model in ("dlm", "svgp"):
        for beta in BETAS:
            for n in SIZES:
                for seed in SEEDS:
                    nll = rng.uniform(0.5, 3.0)
                    # one run writes beta=1 as "1" (objective.beta=1 on the command line): same group as "1.0"
                    b = "1" if (beta == "1.0" and seed == 2 and model == "svgp") else beta
                    make_run(
                        client,
                        exp,
                        {
                            "dataset.name": "concrete",
                            "model.name": model,
                            "model.variant": "joint",
                            "likelihood.name": "gaussian",
                            "estimator.name": "auto",
                            "objective.beta": b,
                            "seed": seed,
                        },
                        {"test_nll": nll, "test_rmse": rng.uniform(4, 9), "val_nll": rng.uniform(0.5, 3), "n_train": n},
                        steps={"test_nll": [(10, nll + 1.0), (20, nll + 0.5)], "train_loss": [(1, 5.0), (2, 4.0)]},
                    )
    outlier = {
        "dataset.name": "concrete",
        "model.name": "dlm",
        "model.variant": "joint",
        "likelihood.name": "gaussian",
        "estimator.name": "auto",
        "objective.beta": "0.1",
        "seed": 9,
    }
    bad = {"test_nll": 1e6, "test_rmse": 1e6, "val_nll": 1e6, "n_train": 100}
    make_run(client, exp, outlier, bad, status="FAILED")
    make_run(client, exp, outlier, bad, status="RUNNING")
    make_run(client, exp, outlier, bad, tags={"gpdlm.sweep": "parent"}, command=None)
    make_run(client, exp, outlier, bad, tags={"gpdlm.refit_of": "x"})
    # a second experiment: numeric sort of a verbatim param key
    exp2 = make_experiment(client, module_uri, "sorting")
    for m in ("100", "9", "10"):
        make_run(
            client,
            exp2,
            {"dataset.name": "concrete", "model.name": "dlm", "model.num_inducing": m},
            {"test_nll": float(m)},
        )
    return {"uri": module_uri, "client": client, "exp": exp}


def _compare(store, tmp_path, *args):
    rc = cli.main(["compare", "--tracking-uri", store["uri"], "--out", str(tmp_path), *args])
    return rc


def _read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _direct_groups(client, exp_id):
    """The expected table, straight from the MLflow runs: FINISHED training runs only."""
    groups = {}
    for r in client.search_runs([exp_id], max_results=1000):
        t = r.data.tags
        if r.info.status != "FINISHED" or t.get("gpdlm.command") != "train" or t.get("gpdlm.refit_of"):
            continue
        p, m = r.data.params, r.data.metrics
        key = (p["model.name"], float(p["objective.beta"]), int(m["n_train"]))
        groups.setdefault(key, []).append(m)
    return groups


def test_table_equals_mean_and_se_of_the_runs(store, tmp_path, capsys):
    assert (
        _compare(
            store,
            tmp_path,
            "--experiment",
            EXP,
            "--by",
            "dataset,model",
            "--by",
            "beta,train_size",
            "--metric",
            "test_nll",
            "test_rmse",
            "--no-log",
            "--no-figures",
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "test_nll" in out and "±" in out  # the rich table
    rows = _read_csv(tmp_path / "compare.csv")
    expected = _direct_groups(store["client"], store["exp"])
    assert len(rows) == len(expected) == 16
    for row in rows:
        assert row["dataset"] == "concrete"
        runs = expected[(row["model"], float(row["beta"]), int(row["train_size"]))]
        assert int(row["n"]) == len(runs) == 3  # beta "1" and "1.0" are one group
        for metric in ("test_nll", "test_rmse"):
            vals = [m[metric] for m in runs]
            assert float(row[f"{metric}_mean"]) == pytest.approx(statistics.fmean(vals), rel=1e-12)
            assert float(row[f"{metric}_se"]) == pytest.approx(statistics.stdev(vals) / math.sqrt(len(vals)), rel=1e-12)
            assert int(row[f"{metric}_n"]) == 3
    # numbers sort as numbers: 0.1 < 1 < 9 < 10 (not "10" < "9"), 100 < 1000
    order = [(r["model"], r["beta"], r["train_size"]) for r in rows]
    assert order == [(m, b, s) for m in ("dlm", "svgp") for b in ("0.1", "1", "9", "10") for s in ("100", "1000")]
    md = (tmp_path / "compare.md").read_text()
    assert md.startswith("| dataset | model | beta | train_size | n | test_nll | test_rmse |")
    assert md.count("\n") == 2 + 16


def test_verbatim_param_keys_sort_numerically(store, tmp_path):
    assert _compare(store, tmp_path, "--experiment", "sorting", "--by", "model.num_inducing", "--no-log") == 0
    rows = _read_csv(tmp_path / "compare.csv")
    assert [r["model.num_inducing"] for r in rows] == ["9", "10", "100"]
    assert [float(r["test_nll_mean"]) for r in rows] == [9.0, 10.0, 100.0]


def test_files_figures_and_the_compare_run(store, tmp_path):
    client = store["client"]
    assert _compare(store, tmp_path, "--experiment", EXP, "--metric", "test_nll") == 0
    files = {
        "compare.csv",
        "compare.md",
        "runs.csv",
        "vs_train_size_test_nll.png",
        "vs_beta_test_nll.png",
        "curve_test_nll.png",
    }
    assert files <= {p.name for p in tmp_path.iterdir()}
    for f in files:
        if f.endswith(".png"):
            assert (tmp_path / f).read_bytes()[:8] == PNG
    assert len(_read_csv(tmp_path / "runs.csv")) == 48
    runs = client.search_runs([store["exp"]], filter_string="tags.`gpdlm.command` = 'compare'")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.run_name == "compare" and run.info.status == "FINISHED"
    assert run.data.params["metrics"] == "test_nll" and run.data.params["n_runs"] == "48"
    assert files <= {a.path for a in client.list_artifacts(run.info.run_id)}
    # the compare run itself is not a training run: a second compare sees the same 48 runs
    again = tmp_path / "again"
    assert _compare(store, again, "--experiment", EXP, "--metric", "test_nll", "--no-log", "--no-figures") == 0
    assert _read_csv(again / "compare.csv") == _read_csv(tmp_path / "compare.csv")


def test_figures_only_where_the_x_axis_varies(store, tmp_path):
    assert (
        _compare(
            store,
            tmp_path,
            "--experiment",
            EXP,
            "--filter",
            "metrics.n_train = 100",
            "--metric",
            "test_nll",
            "--no-log",
        )
        == 0
    )
    names = {p.name for p in tmp_path.iterdir()}
    assert "vs_train_size_test_nll.png" not in names  # one training size
    assert {"vs_beta_test_nll.png", "curve_test_nll.png"} <= names
    rows = _read_csv(tmp_path / "compare.csv")
    assert {r["train_size"] for r in rows} == {"100"} and len(rows) == 8


def test_compare_select_mode_has_the_elbo_beta1_row(store, tmp_path):
    assert (
        _compare(store, tmp_path, "--experiment", EXP, "--select", "--metric", "test_nll", "--no-log", "--no-figures")
        == 0
    )
    rows = _read_csv(tmp_path / "compare.csv")
    assert [(r["method"], r["train_size"]) for r in rows] == [
        (m, s) for m in ("dlm", "svgp", "svgp (beta=1)") for s in ("100", "1000")
    ]
    assert all(r["n"] == "3" for r in rows)  # one selected run per seed


BAD = [
    (["--filter", "foo bar"], "invalid --filter 'foo bar': Invalid clause(s) in filter string"),
    (["--filter", "params.seed = 1"], "invalid --filter"),
    (["--metric", "test_nope"], "no run has metric 'test_nope'; metrics present: "),
    (["--experiment", "nope"], "experiment 'nope' does not exist in sqlite:///"),
    (["--filter", "params.`model.name` = 'fitc'"], "no FINISHED training runs in experiment 'synth' matching --filter"),
    (["--by", "datset"], "unknown --by key 'datset'"),
    (["--bogus"], "unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize("command", ["compare", "select"])
@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2(store, tmp_path, capsys, command, args, message):
    if command == "select" and args[0] == "--by":
        args = ["--also-by", "datset"]
        message = "unknown --also-by key 'datset'"
    base = ["--experiment", EXP] if "--experiment" not in args else []
    rc = cli.main([command, "--tracking-uri", store["uri"], "--out", str(tmp_path / "out"), *base, *args])
    assert rc == 2
    assert message in one_line_error(capsys)
    assert not (tmp_path / "out").exists()  # nothing written for bad input


@pytest.mark.parametrize("command", ["compare", "select"])
def test_missing_store_is_one_line_error_and_not_created(tmp_path, capsys, command):
    db = tmp_path / "nothing.db"
    assert cli.main([command, "--tracking-uri", f"sqlite:///{db}"]) == 2
    assert f"no MLflow store at {db}" in one_line_error(capsys)
    assert not db.exists()


def test_every_page_of_search_results_is_read():
    """search_runs returns at most max_results runs per call: the loader follows page tokens."""
    from types import SimpleNamespace

    from gpdlm_cli.analysis.store import load_runs

    def run(i, status="FINISHED"):
        return SimpleNamespace(
            info=SimpleNamespace(run_id=f"r{i}", run_name="", start_time=i, status=status),
            data=SimpleNamespace(params={}, metrics={"test_nll": float(i)}, tags={"gpdlm.command": "train"}),
        )

    class Page(list):
        def __init__(self, items, token):
            super().__init__(items)
            self.token = token

    class Client:
        calls = []

        def search_runs(self, ids, filter_string="", max_results=1000, page_token=None):
            self.calls.append(page_token)
            start = int(page_token or 0)
            items = [run(i) for i in range(start, min(start + 1000, 2500))]
            return Page(items, str(start + 1000) if start + 1000 < 2500 else None)

    recs = load_runs(Client(), SimpleNamespace(experiment_id="1", name="e"))
    assert len(recs) == 2500 and Client.calls == [None, "1000", "2000"]
