"""The sparse-spectrum family through gpdlm's real path: the gamma ordering and learning on the
AIMPEAK-like generator (3 split seeds), `gpdlm train` runs recorded in MLflow with metrics per
gamma and monitors, the SSGP and VSSGP metrics against dense numpy predictives of the trained
models, VSSGP within 3% of SSGP at the same (converging) budget, and bad input refused with one
line before any run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from gpdlm_cli import build
from gpdlm_cli.exceptions import GpdlmError
from gpdlm_cli.metrics import predictive_metrics
from gpdlm_cli.run.train import run_train
from gpdlm_cli.training import run_stages

from ..conftest import NoRunTracker, compose, exhaustive
from .test_spectral_math import np_feature_moments, np_features

GAMMAS = ["0", "0.1", "0.3", "0.5", "1"]
# AIMPEAK-like network of 150 segments x 54 slots (8,100 rows; the full set has 775): every test
# point's segment has training rows nearby, as in the full data; p = 38 cells of ~200 rows
# lr 1e-2: the measurements below were made at sVBSSGP's default before issue 40 (now 1e-3)
AIMPEAK = [
    "dataset=aimpeak",
    "dataset.n_segments=150",
    "model=svbssgp",
    "model.partitions=38",
    "trainer.lr=0.01",
    "model.gammas=[0,0.1,0.3,0.5,1]",
    "trainer.max_iters=null",
    "trainer.max_epochs=10",
    "trainer.eval_every=0",
    "trainer.eval_every_epochs=1",
    "trainer.stop_rule=none",
    "progress=false",
    "tracking.enabled=false",
]


def _train_and_evaluate(seed: int):
    cfg = compose(AIMPEAK + [f"seed={seed}"])
    build.validate_config(cfg)
    _, splits, data = build.load_data(cfg)
    method = build.build_method(cfg, data, splits.task)
    settings = build.trainer_settings(cfg, splits.n_train, splits.task, method=method, n_val=0)
    untrained = method.evaluate(data.x_test, data.y_test, prefix="test_", y_std=splits.y_std)
    elbo = []
    run_stages(
        method.stages,
        data.x_train,
        data.y_train,
        settings,
        generator=torch.Generator().manual_seed(seed),
        evaluate=lambda: elbo.append(method.monitors["elbo_per_datum"]()) or {},
    )
    trained = method.evaluate(data.x_test, data.y_test, prefix="test_", y_std=splits.y_std)
    elbo.append(method.monitors["elbo_per_datum"]())
    return untrained, trained, elbo


@pytest.fixture(scope="module")
def aimpeak_runs():
    return [_train_and_evaluate(seed) for seed in (0, 1, 2)]


@pytest.mark.slow
def test_rmse_is_monotone_in_gamma_and_local_beats_global(aimpeak_runs):
    """Measured (km/h, seeds 0/1/2): gamma = 0: 4.37/4.39/4.60, gamma = 1: 5.45/5.61/6.17."""
    gaps = []
    for _, trained, _ in aimpeak_runs:
        rmse = [trained[f"test_rmse_g{g}"] for g in GAMMAS]
        assert all(a < b for a, b in zip(rmse, rmse[1:])), rmse
        assert trained["test_rmse"] == trained["test_rmse_g0"] and trained["test_nll"] == trained["test_nll_g0"]
        gaps.append(rmse[-1] - rmse[0])
    assert np.mean(gaps) > 0.8, gaps


@pytest.mark.slow
def test_training_learns_the_global_fit_and_raises_the_elbo(aimpeak_runs):
    """gamma = 1 (phi^T s, the global model) from the untrained prior draw (~ the constant
    predictor, 14-15 km/h) to ~5.5 km/h; the full-data ELBO per datum rises after epoch 1."""
    for untrained, trained, elbo in aimpeak_runs:
        assert trained["test_rmse_g1"] <= 0.65 * untrained["test_rmse_g1"], (
            untrained["test_rmse_g1"],
            trained["test_rmse_g1"],
        )
        assert len(elbo) == 10 and elbo[-1] > elbo[0] + 0.1, elbo
        assert all(math.isfinite(trained[f"test_nll_g{g}"]) for g in GAMMAS)
        assert trained["test_nll_g0"] < trained["test_nll_g1"]


SMALL = ["dataset=aimpeak", "dataset.n_segments=40", "progress=false"]


@pytest.mark.slow
def test_svbssgp_run_is_tracked_with_metrics_per_gamma_and_monitors(tmp_path, mlflow_uri):
    over = SMALL + [
        "model=svbssgp",
        "model.partitions=10",
        "model.gammas=[0,1]",
        "model.predict_samples=5",
        "trainer.max_iters=null",
        "trainer.max_epochs=2",
        "trainer.eval_every=0",
        "trainer.eval_every_epochs=1",
        f"tracking.uri={mlflow_uri}",
        "tracking.experiment=sparse_spectrum",
    ]
    metrics = run_train(compose(over), tmp_path, overrides=over)
    steps_per_epoch = metrics["blocks_per_epoch"]
    assert steps_per_epoch == 10 and metrics["iterations"] == 20 and metrics["epochs"] == 2
    for split in ("val_", "test_"):
        for k in ("nll", "rmse", "mse", "nll_norm", "rmse_norm"):
            assert metrics[f"{split}{k}"] == metrics[f"{split}{k}_g0"] != metrics[f"{split}{k}_g1"]
    table, splits, _ = build.load_data(compose(over))
    y_std = float(np.std(table.y[splits.indices["train"]]))  # the training target's sd, from the raw table
    assert 5 < y_std < 30  # km/h
    assert metrics["test_rmse"] == pytest.approx(metrics["test_rmse_norm"] * y_std, rel=1e-12)
    assert metrics["test_nll"] == pytest.approx(metrics["test_nll_norm"] + math.log(y_std), rel=1e-12)
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


def _train(overrides, seed=0):
    """Train through build + run_stages and evaluate as `gpdlm train` does."""
    cfg = compose(
        ["dataset=aimpeak", "progress=false", "tracking.enabled=false", "trainer.eval_every=0", f"seed={seed}"]
        + list(overrides)
    )
    build.validate_config(cfg)
    _, splits, data = build.load_data(cfg)
    method = build.build_method(cfg, data, splits.task)
    settings = build.trainer_settings(cfg, splits.n_train, splits.task, method=method, n_val=0)
    result = run_stages(
        method.stages, data.x_train, data.y_train, settings, generator=torch.Generator().manual_seed(seed)
    )
    with torch.no_grad():
        if method.evaluate is not None:
            metrics = method.evaluate(data.x_test, data.y_test, prefix="test_", y_std=splits.y_std)
        else:
            metrics = predictive_metrics(method.model, method.likelihood, data.x_test, data.y_test, y_std=splits.y_std)
    return cfg, method, splits, result, metrics


def _np_finite_kernel_gp(x, y, xs, freqs, s2, sn2):
    """The dense n x n GP with k = (s2 / m) phi^T phi': latent mean and variance at xs."""
    m = freqs.shape[0]
    phi, phs = np_features(x, freqs), np_features(xs, freqs)
    K = s2 / m * phi @ phi.T + sn2 * np.eye(len(y))
    Ks = s2 / m * phs @ phi.T
    return Ks @ np.linalg.solve(K, y), s2 / m * (phs**2).sum(1) - np.einsum("ij,ji->i", Ks, np.linalg.solve(K, Ks.T))


def _np_predictive(cfg, method, splits):
    """The trained model's latent predictive at the test inputs, dense numpy from its parameters."""
    x, y, xs = splits.X_train, splits.y_train, splits.X_test
    model, m = method.model, cfg.model
    sn2, s2 = float(method.likelihood.noise.detach()), float(model.signal_variance.detach())
    if m.name == "ssgp":
        freqs = model.frequencies.detach().cpu().numpy()
        if m.predict == "global":
            return _np_finite_kernel_gp(x, y, xs, freqs, s2, sn2)
        from sklearn.cluster import KMeans  # gamma = 0: the dense GP on the test point's k-means cell

        km = KMeans(n_clusters=m.partitions, n_init=1, random_state=int(cfg.seed), max_iter=100).fit(x)
        cell = ((x[:, None, :] - km.cluster_centers_) ** 2).sum(-1).argmin(1)
        cell_s = ((xs[:, None, :] - km.cluster_centers_) ** 2).sum(-1).argmin(1)
        mean, var = np.empty(len(xs)), np.empty(len(xs))
        for k in np.unique(cell_s):
            mean[cell_s == k], var[cell_s == k] = _np_finite_kernel_gp(
                x[cell == k], y[cell == k], xs[cell_s == k], freqs, s2, sn2
            )
        return mean, var
    scale = 1.0 / (2 * np.pi * model.lengthscale.detach().cpu().numpy())
    w_mean = model.w_mean.detach().cpu().numpy()
    w_sd = torch.nn.functional.softplus(model.raw_w_sd).detach().cpu().numpy()
    mean_r, var_r = w_mean * scale, (w_sd * scale) ** 2
    e_phi, second = np_feature_moments(x, mean_r, var_r)
    e_phi_s, second_s = np_feature_moments(xs, mean_r, var_r)
    if m.q_weights == "optimal":  # q(s) = N(mu, Sigma), optimal for q(w) (Gal & Turner; their use_exact_A)
        Sigma = np.linalg.inv(second.sum(0) / sn2 + np.eye(2 * m.num_frequencies) * m.num_frequencies / s2)
        mu = Sigma @ e_phi.T @ y / sn2
    else:
        mu = model.s_mean.detach().cpu().numpy()
        Sigma = np.diag(torch.nn.functional.softplus(model.raw_s_sd).detach().cpu().numpy() ** 2)
    mean = e_phi_s @ mu
    return mean, np.einsum("nij,ij->n", second_s, np.outer(mu, mu) + Sigma) - mean**2


BASELINES = {  # 60 L-BFGS iterations (the default optimiser) or 150 Adam steps
    "ssgp": ["model=ssgp", "trainer.max_iters=60"],
    "ssgp_local": ["model=ssgp", "model.predict=local", "model.partitions=10", "trainer.max_iters=60"],
    "vssgp": ["model=vssgp", "trainer.max_iters=60"],
    "vssgp_diag": ["model=vssgp", "model.q_weights=diag", "trainer.max_iters=60"],
    "vssgp_diag_minibatch_adam": [
        "model=vssgp",
        "model.q_weights=diag",
        "trainer.optimizer=adam",
        "trainer.batch_size=256",
        "trainer.lr=0.01",
        "trainer.max_iters=150",
    ],
}


@pytest.mark.parametrize("name", sorted(BASELINES))
@pytest.mark.slow
def test_baseline_metrics_are_the_dense_predictive_of_the_trained_model(name):
    """test_rmse and test_nll of a trained SSGP / VSSGP (on the 40-segment network) equal the dense
    numpy predictive computed from its parameters: the n x n finite-kernel GP for SSGP (on the test
    point's k-means cell for predict=local), E[phi_*]^T mu and the second moments of phi_* under q
    for VSSGP (with q(s) optimal or learned)."""
    cfg, method, splits, result, metrics = _train(["dataset.n_segments=40"] + BASELINES[name])
    assert result.iterations == cfg.trainer.max_iters and cfg.trainer.optimizer == (
        "adam" if "adam" in name else "lbfgs"
    )
    mean, var = _np_predictive(cfg, method, splits)
    ys, y_std = splits.y_test, splits.y_std
    total = var + float(method.likelihood.noise.detach())
    rmse = np.sqrt(np.mean((mean - ys) ** 2)) * y_std
    nll = np.mean(0.5 * np.log(2 * np.pi * total) + (ys - mean) ** 2 / (2 * total)) + np.log(y_std)
    assert metrics["test_rmse"] == pytest.approx(rmse, rel=1e-8)
    assert metrics["test_nll"] == pytest.approx(nll, rel=1e-8)
    assert rmse < 0.45 * y_std  # trained: the constant predictor scores ~y_std


@pytest.mark.slow
def test_ssgp_and_vssgp_default_to_lbfgs_with_fixed_lengthscales_and_the_optimal_q_s():
    """The model configs select trainer=lbfgs (the command line still wins), other families keep Adam,
    and the Table 1 baselines preset runs both models with these defaults on svbssgp_aimpeak's data."""
    for model in ("ssgp", "vssgp"):
        assert compose([f"model={model}"]).trainer.optimizer == "lbfgs"
        assert compose([f"model={model}", "trainer=paper"]).trainer.optimizer == "adam"
        assert compose([f"model={model}", "trainer.optimizer=adam"]).trainer.optimizer == "adam"
    cfg = compose(["model=vssgp"])
    assert cfg.model.learn_lengthscale is False and cfg.model.q_weights == "optimal"
    assert compose(["model=svbssgp"]).trainer.optimizer == compose(["model=dlm"]).trainer.optimizer == "adam"
    # the Table 1 baselines preset: both models on svbssgp_aimpeak's data and splits, with those defaults
    preset = OmegaConf.load(Path(build.__file__).parent / "conf" / "experiment" / "svbssgp_aimpeak_baselines.yaml")
    assert preset.hydra.sweeper.params.model == "ssgp,vssgp" and preset.hydra.sweeper.params.seed == "0,1,2,3,4"
    for model in ("ssgp", "vssgp"):
        cfg = compose(["+experiment=svbssgp_aimpeak_baselines", f"model={model}"])
        paper = compose(["+experiment=svbssgp_aimpeak"])
        assert cfg.trainer.optimizer == "lbfgs" and cfg.tracking.experiment == paper.tracking.experiment
        assert cfg.dataset == paper.dataset and cfg.model.num_frequencies == paper.model.num_frequencies == 20


@pytest.mark.slow
def test_vssgp_is_within_3_percent_of_ssgp_at_the_same_budget():
    """Both baselines with their defaults on a 120-segment network (~6,100 training rows), split seed
    1: the review's pair check. Measured (km/h): ssgp 4.883, vssgp 4.797 (ratio 0.982; seeds 0, 2, 3,
    4: 0.957, 0.990, 0.977, 1.000). The former defaults (learned lengthscales, mean-field q(s), 1,000
    Adam steps at lr 0.1, not converged) gave ssgp 4.951, vssgp 5.555 (1.122; seed 0: 0.999)."""
    rmse, results = {}, {}
    for model in ("ssgp", "vssgp"):
        _, _, _, results[model], metrics = _train([f"model={model}", "dataset.n_segments=120"], seed=1)
        rmse[model] = metrics["test_rmse"]
    assert rmse["vssgp"] <= 1.03 * rmse["ssgp"], rmse
    assert all(r.converged for r in results.values()), {k: r.iterations for k, r in results.items()}


def test_block_rows_sets_the_cells_from_the_training_size_and_the_default_lr_is_1e_3():
    """Issue 40: ``model.block_rows`` keeps the paper's rows per block whatever the training size (p =
    round(n / block_rows)); the default Adam lr is 1e-3 (1e-2 made the ELBO fall on the airline stand-in)."""
    from gpdlm_cli.methods import sparse_spectrum as S

    cfg = compose(SMALL + ["model=svbssgp", "model.block_rows=200", "model.partitions=3", "tracking.enabled=false"])
    build.validate_config(cfg)
    _, splits, data = build.load_data(cfg)
    method = build.build_method(cfg, data, splits.task)
    assert splits.n_train == 2030 and method.diagnostics()["partitions"] == 10  # round(2030 / 200)
    (stage,) = method.stages
    assert stage.overrides == {"lr": 1e-3, "batch_size": 203} and S.SVBSSGP_LR == 1e-3
    assert method.watch == ("elbo_per_datum",)
    cfg = compose(SMALL + ["model=svbssgp", "model.partitions=7", "tracking.enabled=false"])
    assert build.build_method(cfg, data, splits.task).diagnostics()["partitions"] == 7  # block_rows null


BAD = [
    (
        ["model=svbssgp", "model.gammas=[0,1.5]"],
        "the 'gammas' parameter of model=svbssgp must be a list of floats in [-1, 1] (|gamma| <= 1, Prop. 1); got 1.5 instead",
    ),
    (["model=svbssgp", "model.gammas=-1.01"], "got -1.01 instead"),
    (
        ["model=svbssgp", "model.num_frequencies=0"],
        "the 'num_frequencies' parameter of model=svbssgp must be an integer >= 1; got 0",
    ),
    (
        ["model=ssgp", "model.num_frequencies=0"],
        "the 'num_frequencies' parameter of model=ssgp must be an integer >= 1; got 0",
    ),
    (
        ["model=svbssgp", "model.partitions=0"],
        "the 'partitions' parameter of model=svbssgp must be an integer >= 1; got 0",
    ),
    (
        ["model=svbssgp", "model.partitions=5000"],
        "the 'partitions' parameter of model=svbssgp must be an integer in [1, n_train=2030]; got 5000",
    ),
    (
        ["model=svbssgp", "model.train_partitions=3000"],
        "the 'train_partitions' parameter of model=svbssgp must be an integer in [1, n_train=2030]; got 3000",
    ),
    (
        ["model=svbssgp", "model.block_rows=0"],
        "the 'block_rows' parameter of model=svbssgp must be an integer >= 1; got 0",
    ),
    (
        ["model=svbssgp", "model.block_rows=3000"],
        "the 'block_rows' parameter of model=svbssgp must be an integer in [1, n_train=2030]; got 3000",
    ),
    (
        ["model=svbssgp", "model.predict_samples=0"],
        "the 'predict_samples' parameter of model=svbssgp must be an integer >= 1; got 0",
    ),
    (
        ["model=svbssgp", "model.elbo_samples=-1"],
        "the 'elbo_samples' parameter of model=svbssgp must be an integer >= 0; got -1",
    ),
    (
        ["model=svbssgp", "model.init_scale=0"],
        "the 'init_scale' parameter of model=svbssgp must be a finite float in (0, inf); got 0",
    ),
    (
        ["model=ssgp", "model.signal_init=-1.0"],
        "the 'signal_init' parameter of model=ssgp must be a finite float in (0, inf); got -1.0",
    ),
    (
        ["model=vssgp", "model.learn_lengthscale=1"],
        "the 'learn_lengthscale' parameter of model=vssgp must be true or false; got 1",
    ),
    (["model=svbssgp", "model.cov=dense"], "the 'cov' parameter of model=svbssgp must be 'full', 'block' or 'diag'"),
    (
        ["model=svbssgp", "trainer.batch_size=100"],
        "model=svbssgp sets its block size n / model.train_partitions itself; set trainer.batch_size=null",
    ),
    (
        ["model=svbssgp", "model.train_blocks=kmeans", "model.blocks_per_step=2"],
        "model.train_blocks=kmeans takes one block per step",
    ),
    (["model=svbssgp", "dataset=breast_cancer"], "model=svbssgp is a regression model: it needs likelihood=gaussian"),
    (
        ["model=vssgp", "dataset=breast_cancer", "likelihood=gaussian"],
        "likelihood=gaussian is for regression targets but dataset=breast_cancer is a classification dataset",
    ),
    (["model=ssgp", "model.predict=both"], "the 'predict' parameter of model=ssgp must be 'global' or 'local'"),
    (
        ["model=vssgp", "model.q_weights=full"],
        "the 'q_weights' parameter of model=vssgp must be 'optimal' or 'diag'; got 'full' instead",
    ),
    (["model=vssgp", "trainer.batch_size=100"], "model=vssgp with model.q_weights=optimal trains full batch"),
    (["model=vssgp", "objective.beta=0.5"], "model.q_weights=optimal integrates q(s) out of the beta = 1 bound"),
]


# the fast lane: the table's first 3 cases; make test, all
@pytest.mark.parametrize("overrides,message", exhaustive(BAD, fast=3, ids=lambda c: " ".join(c[0])))
def test_bad_input_fails_with_one_line_before_any_run(tmp_path, overrides, message):
    base = ["progress=false"] if any(o.startswith("dataset=") for o in overrides) else SMALL
    cfg = compose(base + ["tracking.enabled=false"] + overrides)
    with pytest.raises(GpdlmError) as e:
        run_train(cfg, tmp_path, tracker=NoRunTracker())
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "metrics.json").exists()
