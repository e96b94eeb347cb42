"""compare and select on real `gpdlm train` runs (tiny ones), and `select --refit` on train+validation."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from gpdlm_cli import cli

from ..conftest import compose, fast
from .conftest import copy_store

EXP = "real"
BASE = ["trainer.max_iters=20", "trainer.eval_every=10", "model.num_inducing=10", "dataset.split.train_size=150"]


@pytest.fixture(scope="module")
def real(template_db, tmp_path_factory):
    from gpdlm_cli.run.train import run_train

    d = tmp_path_factory.mktemp("real")
    uri = copy_store(template_db, d)
    for beta in ("0.1", "10"):
        over = BASE + [f"objective.beta={beta}"]
        cfg = compose(fast([f"tracking.uri={uri}", f"tracking.experiment={EXP}"] + over))
        run_train(cfg, d / f"beta{beta}", overrides=over)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(EXP).experiment_id
    return {"uri": uri, "client": client, "exp": exp, "runs": client.search_runs([exp])}


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_compare_real_runs_with_learning_curves(real, tmp_path):
    assert (
        cli.main(
            [
                "compare",
                "--tracking-uri",
                real["uri"],
                "--experiment",
                EXP,
                "--out",
                str(tmp_path),
                "--metric",
                "test_nll",
                "--no-log",
            ]
        )
        == 0
    )
    rows = _read(tmp_path / "compare.csv")
    by_beta = {float(r.data.params["objective.beta"]): r.data.metrics["test_nll"] for r in real["runs"]}
    assert [(float(r["beta"]), float(r["test_nll_mean"])) for r in rows] == sorted(by_beta.items())
    assert {r["train_size"] for r in rows} == {"150"}
    names = {p.name for p in tmp_path.iterdir()}
    assert {"vs_beta_test_nll.png", "curve_test_nll.png"} <= names and "vs_train_size_test_nll.png" not in names


def test_select_refit_trains_on_train_plus_validation(real, tmp_path, capsys):
    from gpdlm_cli.build import load_data

    client = real["client"]
    best = min(real["runs"], key=lambda r: r.data.metrics["val_nll"])
    rc = cli.main(
        [
            "select",
            "--tracking-uri",
            real["uri"],
            "--experiment",
            EXP,
            "--out",
            str(tmp_path),
            "--refit",
            "--no-figures",
            "--metric",
            "test_nll",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    (row,) = _read(tmp_path / "selected.csv")
    assert row["run_id"] == best.info.run_id

    refits = client.search_runs([real["exp"]], filter_string="tags.`gpdlm.refit_of` != ''")
    assert len(refits) == 1
    refit = refits[0]
    assert refit.data.tags["gpdlm.refit_of"] == best.info.run_id and refit.info.status == "FINISHED"
    assert row["refit_run_id"] == refit.info.run_id
    assert float(row["refit_test_nll"]) == refit.data.metrics["test_nll"]
    assert "val_nll" not in refit.data.metrics  # no validation rows left

    # the refit trained on exactly the old train+validation rows and was tested on the same rows
    beta = best.data.params["objective.beta"]
    _, old, _ = load_data(compose(fast(BASE + [f"objective.beta={beta}"])))
    n_val = len(old.indices["val"])
    assert refit.data.params["dataset.split.val_fraction"] == "0.0"
    assert refit.data.params["dataset.split.train_size"] == str(150 + n_val)
    assert refit.data.metrics["n_train"] == 150 + n_val
    _, new, _ = load_data(
        compose(
            fast(
                BASE
                + [
                    f"objective.beta={beta}",
                    "dataset.split.val_fraction=0.0",
                    f"dataset.split.train_size={150 + n_val}",
                ]
            )
        )
    )
    assert set(new.indices["train"]) == set(old.indices["train"]) | set(old.indices["val"])
    assert np.array_equal(np.sort(new.indices["test"]), np.sort(old.indices["test"]))
    assert (tmp_path / "summary_refit.csv").exists()

    # selecting again reuses the finished refit instead of training another one
    capsys.readouterr()
    assert (
        cli.main(
            [
                "select",
                "--tracking-uri",
                real["uri"],
                "--experiment",
                EXP,
                "--out",
                str(tmp_path / "again"),
                "--refit",
                "--no-figures",
                "--no-log",
                "--metric",
                "test_nll",
            ]
        )
        == 0
    )
    assert "reusing the FINISHED refit run" in capsys.readouterr().err
    assert len(client.search_runs([real["exp"]], filter_string="tags.`gpdlm.refit_of` != ''")) == 1
    # compare leaves refits out unless asked
    assert (
        cli.main(
            [
                "compare",
                "--tracking-uri",
                real["uri"],
                "--experiment",
                EXP,
                "--out",
                str(tmp_path / "c"),
                "--no-log",
                "--no-figures",
                "--include-refits",
                "--metric",
                "test_nll",
            ]
        )
        == 0
    )
    rows = _read(tmp_path / "c" / "compare.csv")
    assert sorted(r["refit"] for r in rows) == ["no", "no", "yes"]
