"""The study preset: `gpdlm train -m +experiment=rkhs_batch_study_smoke` end to end (a subprocess,
as a user runs it), its runs in MLflow with the family's metrics; the full preset's grid."""

from __future__ import annotations

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
    """4 methods x 2 kernels x 4 batch sizes x 3 learning rates x 5 splits, AdaDelta, 100 epochs,
    90/10 without validation; keep_best is train_nlml for the RKHS models and none for SVGP, whose
    M is the batch size."""
    from hydra import compose as hcompose
    from hydra import initialize_config_module

    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        cfg = hcompose(config_name="config", overrides=["+experiment=rkhs_batch_study"], return_hydra_config=True)
    grid = {k: str(v).split(",") for k, v in cfg.hydra.sweeper.params.items()}
    assert grid == {"model": ["scgd", "minimax", "bsgd", "svgp"], "kernel": ["linear", "rff"],
                    "trainer.batch_size": ["16", "32", "64", "128"], "trainer.lr": ["0.1", "0.3", "1.0"],
                    "seed": ["0", "1", "2", "3", "4"]}
    scgd = compose(["+experiment=rkhs_batch_study", "model=scgd", "kernel=rff", "trainer.batch_size=16"])
    assert (scgd.trainer.optimizer, scgd.trainer.max_epochs, scgd.trainer.keep_best) == ("adadelta", 100, "train_nlml")
    assert (scgd.kernel.num_features, scgd.features.widths, scgd.dataset.split.val_fraction) == (1000, [128, 128], 0.0)
    assert (scgd.model.b0, scgd.model.b_decay) == (0.9, 0.0)
    svgp = compose(["+experiment=rkhs_batch_study", "model=svgp", "kernel=linear", "trainer.batch_size=32"])
    assert svgp.trainer.keep_best is None and svgp.model.num_inducing == 32


def test_smoke_preset_runs_end_to_end_into_mlflow(tmp_path):
    """Four child runs (scgd, minimax, bsgd, svgp on NN + RFF features, batch 16), all FINISHED under
    one parent; the RKHS runs carry train_nlml (also as a per-epoch step metric), the exact-kernel
    NLML, test RMSE/NLL, iter_ms, peak memory and best_iteration; SVGP its test metrics with M = 16."""
    db = tmp_path / "mlflow.db"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "gpdlm_cli.cli", "train", "-m", "+experiment=rkhs_batch_study_smoke",
                           f"tracking.uri=sqlite:///{db}", "progress=false", "threads=1"],
                          cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("rkhs_batch_study_smoke")
    runs = client.search_runs([exp.experiment_id])
    children = {r.data.params["model.name"]: r for r in runs if "mlflow.parentRunId" in r.data.tags}
    assert sorted(children) == ["bsgd", "minimax", "scgd", "svgp"]
    for name, r in children.items():
        m, p = r.data.metrics, r.data.params
        assert r.info.status == "FINISHED"
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
