"""The study preset: `gpdlm train -m +experiment=rkhs_batch_study_smoke` end to end (a subprocess,
as a user runs it), its runs in MLflow with the family's metrics; the full preset's grid."""

from __future__ import annotations

import csv
import inspect
import math
import os
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

import gpdlm_cli

from ..conftest import compose

ROOT = Path(gpdlm_cli.__file__).resolve().parents[1]


def test_full_preset_composes_the_papers_grid():
    """6 arms x 2 kernels x 4 batch sizes x 3 learning rates x 5 splits, AdaDelta, 100 epochs,
    90/10 without validation; keep_best is train_nlml for the RKHS models and none for SVGP, whose
    M is the batch size. The arms: SCGD as gpdlm defines it (b_t = (t+1)^-1/2) and as the paper ran it
    (b_t = 0.9), MINIMAX with the exact penalty and with the paper's mu = 1, BSGD, SVGP."""
    from hydra import compose as hcompose
    from hydra import initialize_config_module

    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        cfg = hcompose(config_name="config", overrides=["+experiment=rkhs_batch_study"], return_hydra_config=True)
    grid = {k: str(v).split(",") for k, v in cfg.hydra.sweeper.params.items()}
    assert grid == {"model": ["scgd", "scgd_paper", "minimax", "minimax_paper", "bsgd", "svgp"], "kernel": ["linear", "rff"],
                    "trainer.batch_size": ["16", "32", "64", "128"], "trainer.lr": ["0.1", "0.3", "1.0"],
                    "seed": ["0", "1", "2", "3", "4"]}
    scgd = compose(["+experiment=rkhs_batch_study", "model=scgd", "kernel=rff", "trainer.batch_size=16"])
    assert (scgd.trainer.optimizer, scgd.trainer.max_epochs, scgd.trainer.keep_best) == ("adadelta", 100, "train_nlml")
    assert (scgd.kernel.num_features, scgd.features.widths, scgd.dataset.split.val_fraction) == (1000, [128, 128], 0.0)
    assert (scgd.model.b0, scgd.model.b_decay, scgd.model.b_min) == (1.0, 0.5, 0.0)
    from gpdlm_cli.objectives import SCGD  # the class defaults that tests/rkhs/test_unbiased.py checks are these

    defaults = inspect.signature(SCGD).parameters
    assert tuple(defaults[k].default for k in ("b0", "b_decay", "b_min")) == (1.0, 0.5, 0.0)
    paper = compose(["+experiment=rkhs_batch_study", "model=scgd_paper", "kernel=rff", "trainer.batch_size=16"])
    assert (paper.model.name, paper.model.b0, paper.model.b_decay, paper.model.b_min) == ("scgd", 0.9, 0.0, 0.0)
    assert paper.trainer.keep_best == "train_nlml"
    minimax = compose(["+experiment=rkhs_batch_study", "model=minimax"])
    assert minimax.model.exact_penalty is True
    paper = compose(["+experiment=rkhs_batch_study", "model=minimax_paper"])
    assert (paper.model.name, paper.model.mu, paper.model.mu_growth, paper.model.exact_penalty) == ("minimax", 1.0, 1.0, False)
    svgp = compose(["+experiment=rkhs_batch_study", "model=svgp", "kernel=linear", "trainer.batch_size=32"])
    assert svgp.trainer.keep_best is None and svgp.model.num_inducing == 32


SETTINGS = {
    "scgd unbiased in the limit: b_t = 1 (t+1)^-0.5": "scgd",
    "scgd biased (the paper): b_t -> 0.9 constant": "scgd",
    "minimax exact penalty: mu >= ||F|| ||c|| + L at every mu update": "minimax",
    "minimax inexact penalty (the paper): mu = 1": "minimax",
    "bsgd biased for b < n: the exact b x b NLML of each uniform batch": "bsgd",
}


def test_smoke_preset_runs_end_to_end_into_mlflow(tmp_path):
    """Six child runs (scgd, scgd_paper, minimax, minimax_paper, bsgd, svgp on NN + RFF features, batch
    16), all FINISHED under one parent, the RKHS arms named by their tag gpdlm.rkhs_setting; they carry
    train_nlml (also as a per-epoch step metric), the exact-kernel NLML, test RMSE/NLL, iter_ms, peak
    memory and best_iteration; SVGP its test metrics with M = 16. The paper's MINIMAX arm logs
    penalty_exact = 0 and is the one run that warns. `gpdlm compare --by tags.gpdlm.rkhs_setting,model`
    gives one row per arm, labelled by the setting."""
    db = tmp_path / "mlflow.db"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "gpdlm_cli.cli", "train", "-m", "+experiment=rkhs_batch_study_smoke",
                           f"tracking.uri=sqlite:///{db}", "progress=false", "threads=1"],
                          cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("rkhs_batch_study_smoke")
    runs = client.search_runs([exp.experiment_id])
    children = {r.data.tags.get("gpdlm.rkhs_setting", r.data.params["model.name"]): r for r in runs
                if "mlflow.parentRunId" in r.data.tags}
    assert sorted(children) == sorted([*SETTINGS, "svgp"])
    for name, r in children.items():
        m, p = r.data.metrics, r.data.params
        assert r.info.status == "FINISHED"
        assert p["model.name"] == SETTINGS.get(name, "svgp")
        assert p["features.name"] == "nn" and p["kernel.name"] == "rff" and p["trainer.optimizer"] == "adadelta"
        for key in ("test_rmse", "test_nll", "iter_ms"):
            assert math.isfinite(m[key]), (name, key)
        if name == "svgp":
            assert p["model.num_inducing"] == "16"
            continue
        for key in ("train_nlml", "train_nlml_exact_kernel", "peak_memory_mb", "best_iteration"):
            assert math.isfinite(m[key]), (name, key)
        history = client.get_metric_history(r.info.run_id, "train_nlml")
        assert len(history) >= 2  # after epoch 1, and the final (restored) iterate
        assert m["train_nlml"] <= min(h.value for h in history) + 1e-12
    paper = children["minimax inexact penalty (the paper): mu = 1"].data.metrics
    assert paper["mu"] == 1.0 and paper["penalty_exact"] == 0.0
    warnings = [line for line in proc.stderr.splitlines() if "gpdlm: warning: model=minimax" in line]
    assert len(warnings) == 1 and "ended with mu = 1," in warnings[0]

    from gpdlm_cli import cli

    out = tmp_path / "compare"
    assert cli.main(["compare", "--tracking-uri", f"sqlite:///{db}", "--experiment", "rkhs_batch_study_smoke",
                     "--by", "tags.gpdlm.rkhs_setting,model", "--metric", "train_nlml", "--out", str(out),
                     "--no-figures", "--no-log"]) == 0
    with open(out / "compare.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6
    assert {row["tags.gpdlm.rkhs_setting"] for row in rows} >= set(SETTINGS)
