"""The sparse-spectrum family through gpdlm's real path: the gamma ordering and learning on the
AIMPEAK-like generator (3 split seeds), `gpdlm train` runs recorded in MLflow with metrics per
gamma and monitors, SSGP and VSSGP beating the constant predictor, and bad input refused with
one line before any run."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient

from gpdlm_cli import build
from gpdlm_cli.commands.train import run_train
from gpdlm_cli.exceptions import GpdlmError
from gpdlm_cli.tracking import NullTracker
from gpdlm_cli.training import run_stages

from ..conftest import compose

GAMMAS = ["0", "0.1", "0.3", "0.5", "1"]
# AIMPEAK-like network of 150 segments x 54 slots (8,100 rows; the full set has 775): every test
# point's segment has training rows nearby, as in the full data; p = 38 cells of ~200 rows
AIMPEAK = ["dataset=aimpeak", "dataset.n_segments=150", "model=svbssgp", "model.partitions=38",
           "model.gammas=[0,0.1,0.3,0.5,1]", "trainer.max_iters=null", "trainer.max_epochs=10", "trainer.eval_every=0",
           "trainer.eval_every_epochs=1", "trainer.stop_rule=none", "progress=false", "tracking.enabled=false"]


def _train_and_evaluate(seed: int):
    cfg = compose(AIMPEAK + [f"seed={seed}"])
    build.validate_config(cfg)
    _, splits, data = build.load_data(cfg)
    method = build.build_method(cfg, data, splits.task)
    settings = build.trainer_settings(cfg, splits.n_train, splits.task, method=method, n_val=0)
    untrained = method.evaluate(data.x_test, data.y_test, prefix="test_", y_std=splits.y_std)
    elbo = []
    run_stages(method.stages, data.x_train, data.y_train, settings, generator=torch.Generator().manual_seed(seed),
               evaluate=lambda: elbo.append(method.monitors["elbo_per_datum"]()) or {})
    trained = method.evaluate(data.x_test, data.y_test, prefix="test_", y_std=splits.y_std)
    elbo.append(method.monitors["elbo_per_datum"]())
    return untrained, trained, elbo


@pytest.fixture(scope="module")
def aimpeak_runs():
    return [_train_and_evaluate(seed) for seed in (0, 1, 2)]


def test_rmse_is_monotone_in_gamma_and_local_beats_global(aimpeak_runs):
    """Measured (km/h, seeds 0/1/2): gamma = 0: 4.37/4.39/4.60, gamma = 1: 5.45/5.61/6.17."""
    gaps = []
    for _, trained, _ in aimpeak_runs:
        rmse = [trained[f"test_rmse_g{g}"] for g in GAMMAS]
        assert all(a < b for a, b in zip(rmse, rmse[1:])), rmse
        assert trained["test_rmse"] == trained["test_rmse_g0"] and trained["test_nll"] == trained["test_nll_g0"]
        gaps.append(rmse[-1] - rmse[0])
    assert np.mean(gaps) > 0.8, gaps


def test_training_learns_the_global_fit_and_raises_the_elbo(aimpeak_runs):
    """gamma = 1 (phi^T s, the global model) from the untrained prior draw (~ the constant
    predictor, 14-15 km/h) to ~5.5 km/h; the full-data ELBO per datum rises after epoch 1."""
    for untrained, trained, elbo in aimpeak_runs:
        assert trained["test_rmse_g1"] <= 0.65 * untrained["test_rmse_g1"], (untrained["test_rmse_g1"], trained["test_rmse_g1"])
        assert len(elbo) == 10 and elbo[-1] > elbo[0] + 0.1, elbo
        assert all(math.isfinite(trained[f"test_nll_g{g}"]) for g in GAMMAS)
        assert trained["test_nll_g0"] < trained["test_nll_g1"]


SMALL = ["dataset=aimpeak", "dataset.n_segments=40", "progress=false"]


def test_svbssgp_run_is_tracked_with_metrics_per_gamma_and_monitors(tmp_path, mlflow_uri):
    over = SMALL + ["model=svbssgp", "model.partitions=10", "model.gammas=[0,1]", "model.predict_samples=5",
                    "trainer.max_iters=null", "trainer.max_epochs=2", "trainer.eval_every=0", "trainer.eval_every_epochs=1",
                    f"tracking.uri={mlflow_uri}", "tracking.experiment=sparse_spectrum"]
    metrics = run_train(compose(over), tmp_path, overrides=over)
    steps_per_epoch = metrics["blocks_per_epoch"]
    assert steps_per_epoch == 10 and metrics["iterations"] == 20 and metrics["epochs"] == 2
    for split in ("val_", "test_"):
        for k in ("nll", "rmse", "mse", "nll_norm", "rmse_norm"):
            assert metrics[f"{split}{k}"] == metrics[f"{split}{k}_g0"] != metrics[f"{split}{k}_g1"]
    assert metrics["test_rmse"] == pytest.approx(metrics["test_rmse_norm"] * (metrics["test_rmse"] / metrics["test_rmse_norm"]))
    assert json.loads((tmp_path / "metrics.json").read_text()) == pytest.approx(metrics)
    client = MlflowClient(mlflow_uri)
    (run,) = client.search_runs([client.get_experiment_by_name("sparse_spectrum").experiment_id])
    assert run.info.status == "FINISHED" and run.data.metrics["test_rmse_g1"] == pytest.approx(metrics["test_rmse_g1"])
    assert run.data.tags["gpdlm.svbssgp.iteration"] == "epoch = 10 block steps"
    for name in ("elbo_per_datum", "M_frobenius", "noise_variance", "val_rmse_g1"):
        history = client.get_metric_history(run.info.run_id, name)
        assert [m.step for m in history] == [10, 20], name  # every epoch, and the final evaluation
    assert metrics["M_frobenius"] > 0 and 0 < metrics["noise_variance"] < 1
    assert metrics["predict_ms_per_point"] > 0 and metrics["smallest_cell"] >= 1


@pytest.mark.parametrize("overrides", [
    ["model=ssgp", "trainer.max_iters=100"],
    ["model=ssgp", "trainer.max_iters=100", "model.predict=local", "model.partitions=10"],
    ["model=ssgp", "trainer.optimizer=lbfgs", "trainer.max_iters=30"],
    ["model=vssgp", "trainer.max_iters=150"],
    ["model=vssgp", "model.q_weights=diag", "trainer.max_iters=150"],
    ["model=vssgp", "model.q_weights=diag", "trainer.max_iters=150", "trainer.batch_size=256", "trainer.lr=0.01"],
])
def test_ssgp_and_vssgp_train_and_beat_the_constant_predictor(tmp_path, overrides):
    """rmse_norm is the RMSE in units of the training target's sd: a constant predictor scores ~1."""
    m = run_train(compose(SMALL + overrides + ["tracking.enabled=false", "trainer.eval_every=0"]), tmp_path)
    assert m["test_rmse_norm"] < 0.6 and math.isfinite(m["test_nll"]), m["test_rmse_norm"]


class NoRunTracker(NullTracker):
    def run(self, *a, **k):  # pragma: no cover - reaching it is the failure
        raise AssertionError("an MLflow run was started for bad input")


BAD = [
    (["model=svbssgp", "model.gammas=[0,1.5]"], "the 'gammas' parameter of model=svbssgp must be a list of floats in [-1, 1] (|gamma| <= 1, Prop. 1); got 1.5 instead"),
    (["model=svbssgp", "model.gammas=-1.01"], "got -1.01 instead"),
    (["model=svbssgp", "model.num_frequencies=0"], "the 'num_frequencies' parameter of model=svbssgp must be an integer >= 1; got 0"),
    (["model=ssgp", "model.num_frequencies=0"], "the 'num_frequencies' parameter of model=ssgp must be an integer >= 1; got 0"),
    (["model=svbssgp", "model.partitions=0"], "the 'partitions' parameter of model=svbssgp must be an integer >= 1; got 0"),
    (["model=svbssgp", "model.partitions=5000"], "the 'partitions' parameter of model=svbssgp must be an integer in [1, n_train=2030]; got 5000"),
    (["model=svbssgp", "model.train_partitions=3000"], "the 'train_partitions' parameter of model=svbssgp must be an integer in [1, n_train=2030]; got 3000"),
    (["model=svbssgp", "model.predict_samples=0"], "the 'predict_samples' parameter of model=svbssgp must be an integer >= 1; got 0"),
    (["model=svbssgp", "model.cov=dense"], "the 'cov' parameter of model=svbssgp must be 'full', 'block' or 'diag'"),
    (["model=svbssgp", "trainer.batch_size=100"], "model=svbssgp sets its block size n / model.train_partitions itself; set trainer.batch_size=null"),
    (["model=svbssgp", "model.train_blocks=kmeans", "model.blocks_per_step=2"], "model.train_blocks=kmeans takes one block per step"),
    (["model=svbssgp", "dataset=breast_cancer"], "model=svbssgp is a regression model: it needs likelihood=gaussian"),
    (["model=vssgp", "dataset=breast_cancer", "likelihood=gaussian"], "likelihood=gaussian is for regression targets but dataset=breast_cancer is a classification dataset"),
    (["model=ssgp", "model.predict=both"], "the 'predict' parameter of model=ssgp must be 'global' or 'local'"),
    (["model=vssgp", "model.q_weights=full"], "the 'q_weights' parameter of model=vssgp must be 'optimal' or 'diag'; got 'full' instead"),
    (["model=vssgp", "trainer.batch_size=100"], "model=vssgp with model.q_weights=optimal trains full batch"),
    (["model=vssgp", "objective.beta=0.5"], "model.q_weights=optimal integrates q(s) out of the beta = 1 bound"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_input_fails_with_one_line_before_any_run(tmp_path, overrides, message):
    base = ["progress=false"] if any(o.startswith("dataset=") for o in overrides) else SMALL
    cfg = compose(base + ["tracking.enabled=false"] + overrides)
    with pytest.raises(GpdlmError) as e:
        run_train(cfg, tmp_path, tracker=NoRunTracker())
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "metrics.json").exists()
