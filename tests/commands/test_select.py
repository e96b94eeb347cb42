"""`gpdlm select`: per group and seed the run with the lowest validation metric (val_mse for
sq_dlm, val_nll otherwise), its test metrics, the ELBO at beta=1, and the across-seed summary.

The synthetic runs make validation and test disagree -- the run best on validation is the worst on
test -- so picking by the wrong metric or split is detected."""

from __future__ import annotations

import csv
import math
import random
import statistics

import pytest
from mlflow.tracking import MlflowClient

from gpdlm_cli import cli
from gpdlm_cli.analysis.records import RunRecord
from gpdlm_cli.analysis.selection import select_records

from .conftest import make_experiment, make_run

EXP = "selection"
METHODS = [("dlm", "joint"), ("dlm", "fixed"), ("svgp", "joint"), ("sq_dlm", "joint"), ("sgpr", None)]
BETAS = ["0.01", "0.1", "1.0", "10"]
SIZES = [100, 500]
SEEDS = [0, 1]


@pytest.fixture(scope="module")
def store(module_uri):
    client = MlflowClient(module_uri)
    exp = make_experiment(client, module_uri, EXP)
    rng = random.Random(1)
    groups = {}
    for model, variant in METHODS:
        for n in SIZES:
            for seed in SEEDS:
                betas = ["1.0"] if model == "sgpr" else BETAS
                ranks = rng.sample(range(len(betas)), len(betas))
                runs = []
                for beta, rank in zip(betas, ranks):
                    params = {
                        "dataset.name": "concrete",
                        "model.name": model,
                        "likelihood.name": "gaussian",
                        "estimator.name": "auto",
                        "objective.beta": beta,
                        "seed": seed,
                        "dataset.split.train_size": n,
                    }
                    if variant:
                        params["model.variant"] = variant
                    # test disagrees with validation: the val_nll winner (rank 0) is worst on test; for
                    # sq_dlm neither the val_nll winner nor the val_mse winner (rank 3) is best on test
                    t = (rank - 1) % 4 if model == "sq_dlm" else len(betas) - 1 - rank
                    metrics = {
                        "val_nll": 1.0 + 0.1 * rank,
                        "test_nll": 2.0 + 0.1 * t + rng.uniform(0, 0.01),
                        "val_mse": 5.0 + (len(betas) - 1 - rank),  # opposite order to val_nll
                        "test_rmse": rng.uniform(3, 4),
                        "n_train": n,
                    }
                    rid = make_run(
                        client, exp, params, metrics, steps={"test_nll": [(10, 3.0), (20, metrics["test_nll"])]}
                    )
                    runs.append({"id": rid, "beta": float(beta), **metrics})
                groups[(model, variant or "-", n, seed)] = runs
    return {"uri": module_uri, "client": client, "exp": exp, "groups": groups}


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _expected(store):
    """Selections computed directly: {(method, variant, n, seed): run}."""
    out = {}
    for (model, variant, n, seed), runs in store["groups"].items():
        metric = "val_mse" if model == "sq_dlm" else "val_nll"
        best = min(runs, key=lambda r: r[metric])
        assert best is not min(runs, key=lambda r: r["test_nll"]) or len(runs) == 1  # val and test disagree
        out[(model, variant, n, seed)] = (best, metric)
        if model == "svgp":
            out[("svgp (beta=1)", variant, n, seed)] = (next(r for r in runs if r["beta"] == 1.0), metric)
    return out


def test_select_picks_the_validation_argmin_and_reports_its_test_metrics(store, tmp_path, capsys):
    rc = cli.main(
        [
            "select",
            "--tracking-uri",
            store["uri"],
            "--experiment",
            EXP,
            "--out",
            str(tmp_path),
            "--metric",
            "test_nll",
            "test_rmse",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    rows = _read(tmp_path / "selected.csv")
    expected = _expected(store)
    assert len(rows) == len(expected) == 6 * len(SIZES) * len(SEEDS)
    for row in rows:
        key = (row["method"], row["variant"], int(row["train_size"]), int(row["seed"]))
        run, metric = expected[key]
        assert row["run_id"] == run["id"], key
        assert row["selected_by"] == metric
        assert float(row["beta"]) == run["beta"]
        assert float(row["val_value"]) == run[metric]
        assert float(row["test_nll"]) == run["test_nll"] and float(row["test_rmse"]) == run["test_rmse"]
        assert int(row["n_candidates"]) == (1 if key[0] in ("sgpr", "svgp (beta=1)") else 4)
    # numeric order within a method: 100 before 500; sq_dlm is selected by val_mse, never val_nll
    assert [r["train_size"] for r in rows if r["method"] == "dlm" and r["variant"] == "joint"] == ["100"] * 2 + [
        "500"
    ] * 2
    assert {r["selected_by"] for r in rows if r["method"] == "sq_dlm"} == {"val_mse"}

    # the across-seed table of the selected runs
    summary = _read(tmp_path / "summary.csv")
    assert len(summary) == 6 * len(SIZES)
    for row in summary:
        vals = [expected[(row["method"], row["variant"], int(row["train_size"]), s)][0]["test_nll"] for s in SEEDS]
        assert int(row["n"]) == len(SEEDS)
        assert float(row["test_nll_mean"]) == pytest.approx(statistics.fmean(vals), rel=1e-12)
        assert float(row["test_nll_se"]) == pytest.approx(statistics.stdev(vals) / math.sqrt(len(SEEDS)), rel=1e-12)
    assert "svgp (beta=1)" in (tmp_path / "summary.md").read_text()

    files = {
        "selected.csv",
        "selected.md",
        "summary.csv",
        "summary.md",
        "runs.csv",
        "vs_train_size_test_nll.png",
        "curve_test_nll.png",
    }
    assert files <= {p.name for p in tmp_path.iterdir()}
    client = store["client"]
    (run,) = client.search_runs([store["exp"]], filter_string="tags.`gpdlm.command` = 'select'")
    assert run.info.run_name == "select" and run.info.status == "FINISHED"
    assert files <= {a.path for a in client.list_artifacts(run.info.run_id)}


def test_val_metric_override(store, tmp_path):
    rc = cli.main(
        [
            "select",
            "--tracking-uri",
            store["uri"],
            "--experiment",
            EXP,
            "--out",
            str(tmp_path),
            "--val-metric",
            "val_nll",
            "--filter",
            "params.`model.name` = 'sq_dlm'",
            "--no-log",
            "--no-figures",
        ]
    )
    assert rc == 0
    for row in _read(tmp_path / "selected.csv"):
        runs = store["groups"][("sq_dlm", "joint", int(row["train_size"]), int(row["seed"]))]
        assert row["run_id"] == min(runs, key=lambda r: r["val_nll"])["id"] and row["selected_by"] == "val_nll"


# ----- selection rules without MLflow -----------------------------------------------------------------
def _rec(rid, beta, metrics, model="dlm", start=0, **params):
    p = {"dataset.name": "d", "model.name": model, "objective.beta": beta, "seed": "0", **params}
    return RunRecord(rid, rid, start, p, {"n_train": 50.0, **metrics}, {"gpdlm.command": "train"})


def test_ties_go_to_the_larger_beta_then_the_earlier_run():
    sel, _ = select_records(
        [_rec("a", "0.1", {"val_nll": 1.0}), _rec("b", "10", {"val_nll": 1.0}), _rec("c", "1", {"val_nll": 1.5})]
    )
    assert [s.record.run_id for s in sel] == ["b"]
    sel, notes = select_records(
        [
            _rec("z", "1", {"val_nll": 1.0}, start=5),
            _rec("y", "1", {"val_nll": 1.0}, start=9),
            _rec("x", "1", {"val_nll": 1.0}, start=5),
        ]
    )
    assert [s.record.run_id for s in sel] == ["x"]  # earliest start; then the smaller run id
    assert any("same beta" in n for n in notes)


def test_sq_dlm_selects_by_val_mse_or_its_square_root():
    runs = [
        _rec("a", "0.1", {"val_nll": 1.0, "val_mse": 9.0}, model="sq_dlm"),
        _rec("b", "1", {"val_nll": 2.0, "val_mse": 4.0}, model="sq_dlm"),
    ]
    (s,) = select_records(runs)[0]
    assert (s.record.run_id, s.val_metric) == ("b", "val_mse")
    runs = [
        _rec("a", "0.1", {"val_nll": 1.0, "val_rmse": 3.0}, model="sq_dlm"),
        _rec("b", "1", {"val_nll": 2.0, "val_rmse": 2.0}, model="sq_dlm"),
    ]
    (s,) = select_records(runs)[0]
    assert (s.record.run_id, s.val_metric) == ("b", "val_rmse")


def test_non_finite_validation_values_are_never_selected():
    sel, notes = select_records(
        [
            _rec("a", "0.1", {"val_nll": math.nan}),
            _rec("b", "1", {"val_nll": 3.0}),
            _rec("c", "1", {"val_nll": math.inf}, seed="1"),
        ]
    )
    assert [s.record.run_id for s in sel] == ["b"]
    assert any("skipped group" in n and "seed=1" in n for n in notes)


def test_repeated_betas_name_the_param_that_differs():
    runs = [
        _rec("a", "1", {"val_nll": 1.0}, **{"model.num_inducing": "10"}),
        _rec("b", "1", {"val_nll": 2.0}, **{"model.num_inducing": "50"}),
    ]
    sel, notes = select_records(runs)
    assert len(sel) == 1 and any("model.num_inducing" in n and "--also-by" in n for n in notes)
    sel, notes = select_records(runs, also_by=["model.num_inducing"])
    assert [s.record.run_id for s in sel] == ["a", "b"] and not notes


def test_svgp_without_a_beta1_run_has_no_elbo_row():
    sel, notes = select_records([_rec("a", "0.1", {"val_nll": 1.0}, model="svgp")])
    assert [s.method for s in sel] == ["svgp"]
    assert any("no beta=1 run" in n for n in notes)
    sel, _ = select_records(
        [_rec("a", "0.1", {"val_nll": 1.0}, model="svgp"), _rec("b", "1.0", {"val_nll": 2.0}, model="svgp")]
    )
    assert [(s.method, s.record.run_id) for s in sel] == [("svgp", "a"), ("svgp (beta=1)", "b")]
