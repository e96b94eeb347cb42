"""`+experiment=published_sgpr_table`: a published sparse-GP table's protocol on any mirrored set in one preset
(issue 47, item 7) -- kernel, mean, split, M per model, optimiser and stop rule -- composed for each set the
table used, validated as `gpdlm train` validates it, and its smoke size trained for both models."""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from gpdlm_cli.config_check import check_overrides
from gpdlm_cli.run.train import run_train

from ..conftest import compose, exhaustive, sweep_grid

MIRRORED = ("pol", "elevators", "bike", "kin40k")
PROTOCOL = {
    "kernel.name": "matern32",
    "kernel.ard": False,
    "model.mean": "constant",
    "model.inducing_init": "kmeans",
    "dataset.split.val_fraction": 0.16,
    "dataset.split.test_fraction": 0.2,
    "dataset.split.mask": None,
    "dataset.split.train_size": None,
    "trainer.optimizer": "adam",
    "trainer.lr": 0.1,
    "trainer.batch_size": None,
    "trainer.max_iters": 100,
    "trainer.stop_rule": "none",
    "trainer.keep_best": None,
    "trainer.protocol": "paper",
    "tracking.experiment": "published_sgpr_table",
}


@pytest.mark.parametrize("dataset", exhaustive(MIRRORED, fast=1))  # the fast lane: pol; make test, all four
@pytest.mark.parametrize("model,m", [("sgpr", 512), ("svgp", 1024)])
def test_preset_sets_the_whole_protocol_for_any_mirrored_set(dataset, model, m):
    overrides = ["+experiment=published_sgpr_table", f"dataset={dataset}", f"model={model}"]
    cfg = compose(overrides)
    assert cfg.dataset.name == dataset and cfg.model.name == model and cfg.model.num_inducing == m
    for key, value in PROTOCOL.items():
        assert OmegaConf.select(cfg, key) == value, key
    assert check_overrides(["train", *overrides][1:]) is None  # what `gpdlm train` checks before a run folder


def test_preset_sweeps_both_models_over_three_seeds_and_stays_overridable():
    assert sweep_grid(["+experiment=published_sgpr_table"]) == {"model": ["sgpr", "svgp"], "seed": ["0", "1", "2"]}
    cfg = compose(
        [
            "+experiment=published_sgpr_table",
            "model=svgp",
            "published_table_m.svgp=256",
            "kernel.ard=true",
            "trainer.max_iters=300",
        ]
    )
    assert (cfg.model.num_inducing, cfg.kernel.ard, cfg.trainer.max_iters) == (256, True, 300)
    assert compose(["+experiment=published_sgpr_table"]).model.name == "sgpr"  # one run: SGPR on pol


@pytest.mark.slow
@pytest.mark.parametrize("model", ["sgpr", "svgp"])
def test_smoke_size_trains(tmp_path, model):
    cfg = compose(
        ["+experiment=published_sgpr_table_smoke", f"model={model}", "tracking.enabled=false", "progress=false"]
    )
    assert cfg.model.num_inducing == {"sgpr": 10, "svgp": 20}[model] and cfg.dataset.split.train_size == 200
    metrics = run_train(cfg, tmp_path)
    assert metrics["iterations"] == 5 and metrics["n_train"] == 200
    assert math.isfinite(metrics["test_nll"]) and metrics["test_rmse_norm"] < 1.0  # better than the mean on pol
    assert (tmp_path / "hyperparameters.json").exists()
